package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hone-llm/hone/schema"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	engines "github.com/hone-llm/hone/engine"
)

// engine talks to the serving endpoint's non-completion routes: /tokenize,
// /metrics, /version and /v1/models (vLLM's names; /tokenize and /metrics
// have no /v1 prefix).
type engine struct {
	http  *http.Client
	base  string // scheme://host[:port], no trailing slash
	model string
	// facts are the recognised engine's (info sets them); nil: vLLM's
	// conventions (conventions).
	facts *engines.Facts
}

// conventions are the HTTP conventions replay speaks to the endpoint (its
// request id header, its cache-reset route): those of the engine its GET
// /version answer names (engine.Recognise), vLLM's when it names none
// (the proxy passes its workers' answer on; other servers of vLLM's API).
func (e *engine) conventions() engines.Facts {
	if e.facts != nil {
		return *e.facts
	}
	return engines.FactsOf(engines.VLLM)
}

// resetRoute is the engine's cache-reset route ("POST /reset_prefix_cache").
func (e *engine) resetRoute() string { return e.conventions().Cache.ResetRoute }

// tokenize is POST /tokenize {"model","prompt","add_special_tokens":false}.
func (e *engine) tokenize(ctx context.Context, text string) ([]int, error) {
	body, err := json.Marshal(map[string]any{"model": e.model, "prompt": text, "add_special_tokens": false})
	if err != nil {
		return nil, err
	}
	url := e.base + "/tokenize"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		msg := errorMessage(resp.Body)
		if strings.Contains(strings.ToLower(msg), "model") {
			return nil, fmt.Errorf("POST %s: HTTP %d: %s (is --model the served model name?)", url, resp.StatusCode, msg)
		}
		return nil, fmt.Errorf("POST %s: HTTP %d: the endpoint has no /tokenize route (hone needs vLLM's tokenizer API): %s", url, resp.StatusCode, msg)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("POST %s: HTTP %d: %s", url, resp.StatusCode, errorMessage(resp.Body))
	}
	var out struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("POST %s: reply is not {\"tokens\":[...]}: %w", url, err)
	}
	if out.Tokens == nil {
		return nil, fmt.Errorf("POST %s: reply has no \"tokens\"", url)
	}
	return out.Tokens, nil
}

// get fetches a small document; ok is false on 404 (route absent).
func (e *engine) get(ctx context.Context, path string) (body []byte, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	url := e.base + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, false, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, errorMessage(resp.Body))
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, false, fmt.Errorf("GET %s: %w", url, err)
	}
	return body, true, nil
}

// info reads /version and /v1/models. A served model list without the
// requested model is an error naming the models that are served.
func (e *engine) info(ctx context.Context) (schema.EngineInfo, error) {
	info := schema.EngineInfo{Endpoint: e.base}
	if b, ok, err := e.get(ctx, "/version"); err != nil {
		return info, err
	} else if ok {
		var v struct {
			Version           string  `json:"version"`
			TimeScale         float64 `json:"time_scale"`
			CostProfile       string  `json:"cost_profile"`
			CostProfileSource string  `json:"cost_profile_source"`
		}
		if json.Unmarshal(b, &v) == nil {
			info.Version, info.TimeScale = v.Version, v.TimeScale
			info.CostProfile, info.CostProfileSource = v.CostProfile, v.CostProfileSource
		}
		if r, ok := engines.Recognise(info.Version); ok {
			f := r.Facts()
			e.facts = &f
		}
	}
	b, ok, err := e.get(ctx, "/v1/models")
	if err != nil || !ok {
		return info, err
	}
	models, ok := parseModels(b)
	if !ok {
		return info, nil
	}
	var names []string
	for _, m := range models {
		if m.id == e.model {
			info.Model = m.raw
			return info, nil
		}
		names = append(names, m.id)
	}
	return info, &ModelError{Model: e.model, Served: names}
}

// servedModel is one entry of GET /v1/models: its id and the entry as
// the engine wrote it.
type servedModel struct {
	id  string
	raw json.RawMessage
}

// parseModels reads a GET /v1/models body (OpenAI's list: {"data":
// [{"id": ...}, ...]}); ok is false when it is not one.
func parseModels(b []byte) (models []servedModel, ok bool) {
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if json.Unmarshal(b, &list) != nil {
		return nil, false
	}
	for _, m := range list.Data {
		var id struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m, &id) == nil {
			models = append(models, servedModel{id: id.ID, raw: m})
		}
	}
	return models, true
}

// ServedModels is the ids of the models endpoint serves (GET /v1/models,
// within 10 s), for a client that was not told which to ask for (vllm bench
// serve takes the served model when --model is not given).
func ServedModels(ctx context.Context, endpoint string) ([]string, error) {
	base, err := normalEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	e := &engine{http: &http.Client{}, base: base}
	b, ok, err := e.get(ctx, "/v1/models")
	if err != nil {
		return nil, err
	}
	models, parsed := parseModels(b)
	if !ok || !parsed {
		return nil, fmt.Errorf("GET %s/v1/models: no model list (not an OpenAI-compatible server?)", e.base)
	}
	ids := make([]string, len(models))
	for i, m := range models {
		ids[i] = m.id
	}
	return ids, nil
}

// ModelError says the endpoint does not serve the requested model.
type ModelError struct {
	Model  string
	Served []string
}

func (e *ModelError) Error() string {
	return fmt.Sprintf("model %q is not served by the endpoint (it serves %s)", e.Model, strings.Join(quoteAll(e.Served), ", "))
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	if len(out) == 0 {
		return []string{"nothing"}
	}
	return out
}

// scrape reads /metrics; nil (no error) when the route is absent, nil and
// the error when the exposition does not parse.
func (e *engine) scrape(ctx context.Context) (schema.Counters, error) {
	b, ok, err := e.get(ctx, "/metrics")
	if err != nil || !ok {
		return nil, err
	}
	c, err := parseCounters(b)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", e.base, err)
	}
	return c, nil
}

// ParseCounters extracts vllm: counters from Prometheus text exposition:
// series whose name ends in _total, plus the old unsuffixed prefix-cache
// names and the emulator's KV-pull lateness (EmulatorKVPullsLate), summed over label sets (engines, model names). A histogram's or
// summary's series (_bucket, _sum, _count) never match. An exposition that
// does not parse gives nil: a partial read could sum a counter over only
// some of its label sets. A counter with a value no counter can hold (NaN,
// infinite or negative), or whose sum overflows, is left out: it would make
// deltas meaningless and the run record unwritable (JSON has no NaN or Inf).
func ParseCounters(text []byte) schema.Counters {
	c, _ := parseCounters(text)
	return c
}

func parseCounters(text []byte) (schema.Counters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("metrics exposition: %w", err)
	}
	c := schema.Counters{}
	bad := map[string]bool{}
	for _, f := range fams {
		// The family as samples, each named as its line is in the
		// exposition (a histogram's as name_bucket, name_sum, name_count).
		samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, f)
		if err != nil {
			return nil, fmt.Errorf("metrics exposition: %w", err)
		}
		for _, s := range samples {
			name := string(s.Metric[model.MetricNameLabel])
			if engines.IsCounter(name) || // the engines' own (engine.Facts.Metrics)
				name == schema.EmulatorKVPullsLate || name == schema.EmulatorKVPullLateSeconds || name == schema.EmulatorKVPullLateModelSeconds {
				v := float64(s.Value)
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					bad[name] = true
				}
				c[name] += v
			}
		}
	}
	for name, v := range c {
		if bad[name] || math.IsInf(v, 0) {
			delete(c, name)
		}
	}
	return c, nil
}

// prefixCache returns the prefix-cache hits and queries, by the newest name
// the engine exposes.
func prefixCache(c schema.Counters) (hits, queries float64, ok bool) {
	// The names of the prefix-cache counters, newest first
	// (engine.Facts.Metrics.PrefixCache; reference/vllm.md).
	for _, p := range engines.PrefixCacheCounters() {
		h, ok1 := c[p.Hits]
		q, ok2 := c[p.Queries]
		if ok1 && ok2 {
			return h, q, true
		}
	}
	return 0, 0, false
}

// HitRate is Δhits/Δqueries between two scrapes; nil when either scrape
// lacks the counters or nothing was queried.
func HitRate(before, after schema.Counters) *float64 {
	dh, dq, ok := counterDelta(before, after)
	if !ok || dq <= 0 {
		return nil
	}
	r := dh / dq
	return &r
}

// resetPrefixCache empties the engine's prefix cache by its cache-reset
// route (vLLM's POST /reset_prefix_cache). An engine without the route
// (vLLM outside dev mode) gives a *RouteError.
func (e *engine) resetPrefixCache(ctx context.Context) error {
	route := e.resetRoute()
	method, path, ok := strings.Cut(route, " ")
	if !ok {
		return &RouteError{Route: "cache reset", Status: http.StatusNotFound, Message: e.conventions().Title + " has no cache-reset route"}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	url := e.base + path
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return &RouteError{Route: route, Status: resp.StatusCode, Message: errorMessage(resp.Body)}
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, errorMessage(resp.Body))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return nil
}

// resetMissing says why the endpoint lacks the cache-reset route.
func (e *engine) resetMissing() string {
	f := e.conventions()
	if f.Cache.ResetEnv != "" {
		return fmt.Sprintf("the endpoint has no %s (%s serves it only with %s)", f.Cache.ResetRoute, f.Title, f.Cache.ResetEnv)
	}
	return "the endpoint has no cache-reset route"
}

// RouteError says the endpoint does not serve a route.
type RouteError struct {
	Route   string
	Status  int
	Message string
}

func (e *RouteError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: the endpoint does not serve it: %s", e.Route, e.Status, e.Message)
}

// chooseCache settles the cold-start procedure: reset where the endpoint
// serves it (probed once, now), fresh prefixes otherwise. want forces one;
// a forced reset the endpoint cannot do is a ParamError.
func chooseCache(ctx context.Context, e *engine, want string) (schema.CacheState, error) {
	if want == schema.CacheFreshPrefixes {
		return schema.CacheState{Procedure: schema.CacheFreshPrefixes, Detail: "as asked: every level's session prefixes come from a fresh seed (prefix_seed per level)"}, nil
	}
	err := e.resetPrefixCache(ctx)
	var re *RouteError
	switch {
	case err == nil:
		return schema.CacheState{Procedure: schema.CacheReset, Detail: e.resetRoute() + " before every level"}, nil
	case want == schema.CacheReset && errors.As(err, &re):
		return schema.CacheState{}, &ParamError{Field: "cache", Value: want,
			Want: "fresh_prefixes: " + e.resetMissing()}
	case want == schema.CacheReset:
		return schema.CacheState{}, fmt.Errorf("reset the prefix cache: %w", err)
	case ctx.Err() != nil:
		return schema.CacheState{}, ctx.Err()
	}
	return schema.CacheState{Procedure: schema.CacheFreshPrefixes, Detail: fmt.Sprintf(
		"the endpoint could not reset its prefix cache (%v): every level's session prefixes come from a fresh seed (prefix_seed per level)", err)}, nil
}

// LevelPrefixSeed is the prefix seed of one level under
// CacheFreshPrefixes: a SplitMix64 step over the workload seed, the run
// and the offered rate, so every config gets the same prompts.
func LevelPrefixSeed(seed uint64, run int, qps float64) uint64 {
	z := seed ^ uint64(run+1)*0x9E3779B97F4A7C15 ^ math.Float64bits(qps)*0xBF58476D1CE4E5B9
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// resolveKind discovers what the endpoint is from GET /version and checks
// it against what the caller stated ("" states nothing).
func resolveKind(stated schema.Kind, info schema.EngineInfo) (schema.Kind, error) {
	found, evidence := schema.KindUnverified, "no GET /version answer"
	switch e, ok := engines.Recognise(info.Version); {
	case ok && e.Facts().Emulated:
		found, evidence = schema.KindEmulated, fmt.Sprintf("GET /version says %q, %s", info.Version, e.Facts().Title)
	case ok:
		found, evidence = schema.KindDevice, fmt.Sprintf("GET /version says %q, as %s does", info.Version, e.Facts().Title)
	case info.Version != "":
		evidence = fmt.Sprintf("GET /version says %q, neither vLLM's nor hone's emulator's", info.Version)
	}
	switch {
	case stated == "" || stated == found || stated == schema.KindUnverified:
		if stated == schema.KindUnverified {
			return schema.KindUnverified, nil
		}
		return found, nil
	case stated == schema.KindDevice && found == schema.KindEmulated:
		// Emulated numbers are never labelled as device measurements.
		return "", &ParamError{Field: "kind", Value: string(stated), Want: "emulated: " + evidence}
	case stated == schema.KindDevice:
		return "", &ParamError{Field: "kind", Value: string(stated),
			Want: "unverified: " + evidence + "; a device record needs vLLM's own version answer"}
	default:
		return "", &ParamError{Field: "kind", Value: string(stated), Want: string(found) + ": " + evidence}
	}
}

// resolveTimeScale adopts the engine's stated time scale, or checks the
// caller's against it; an engine that states none runs in real time
// unless the caller says otherwise.
func resolveTimeScale(stated float64, info schema.EngineInfo) (float64, error) {
	switch {
	case info.TimeScale > 0 && stated > 0 && math.Abs(stated-info.TimeScale) > 1e-9*info.TimeScale:
		return 0, &ParamError{Field: "time-scale", Value: stated,
			Want: fmt.Sprintf("%g, the time scale the engine states in GET /version (or leave it unset to adopt it)", info.TimeScale)}
	case info.TimeScale > 0:
		return info.TimeScale, nil
	case stated > 0:
		return stated, nil
	}
	return 1, nil
}

// engineTimeScale is the time scale the engine wrote into this request's
// per-request metrics (hone's emulator does); 0 when it wrote none.
func engineTimeScale(rr *schema.RequestRecord) float64 {
	if len(rr.EngineMetrics) == 0 || !bytes.Contains(rr.EngineMetrics, []byte(`"time_scale"`)) {
		return 0
	}
	m, _ := schema.DecodeEngineMetrics(rr.EngineMetrics)
	if m.TimeScale == nil {
		return 0
	}
	return *m.TimeScale
}
