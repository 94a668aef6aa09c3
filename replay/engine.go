package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// engine talks to the serving endpoint's non-completion routes: /tokenize,
// /metrics, /version and /v1/models (vLLM's names; /tokenize and /metrics
// have no /v1 prefix).
type engine struct {
	http  *http.Client
	base  string // scheme://host[:port], no trailing slash
	model string
}

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

// EngineInfo is what the endpoint says about itself.
type EngineInfo struct {
	Endpoint string `json:"endpoint"`
	Version  string `json:"version,omitempty"` // GET /version, when served
	// Model is the served model's /v1/models entry (id, root,
	// max_model_len, ...), as the engine wrote it.
	Model json.RawMessage `json:"model,omitempty"`
	// Error says why /version or /v1/models could not be read; the run
	// goes on without them.
	Error string `json:"error,omitempty"`
}

// info reads /version and /v1/models. A served model list without the
// requested model is an error naming the models that are served.
func (e *engine) info(ctx context.Context) (EngineInfo, error) {
	info := EngineInfo{Endpoint: e.base}
	if b, ok, err := e.get(ctx, "/version"); err != nil {
		return info, err
	} else if ok {
		var v struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(b, &v) == nil {
			info.Version = v.Version
		}
	}
	b, ok, err := e.get(ctx, "/v1/models")
	if err != nil || !ok {
		return info, err
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if json.Unmarshal(b, &list) != nil {
		return info, nil
	}
	var names []string
	for _, m := range list.Data {
		var id struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m, &id) == nil {
			if id.ID == e.model {
				info.Model = m
				return info, nil
			}
			names = append(names, id.ID)
		}
	}
	return info, &ModelError{Model: e.model, Served: names}
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

// Counters is a /metrics scrape: every vllm: counter (name ending _total),
// summed over its label sets.
type Counters map[string]float64

// Names of the prefix-cache counters, newest first (reference/vllm.md).
var (
	hitsNames    = []string{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"}
	queriesNames = []string{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"}
)

// scrape reads /metrics; nil (no error) when the route is absent.
func (e *engine) scrape(ctx context.Context) (Counters, error) {
	b, ok, err := e.get(ctx, "/metrics")
	if err != nil || !ok {
		return nil, err
	}
	return ParseCounters(b), nil
}

// ParseCounters extracts vllm: counters from Prometheus text exposition:
// series whose name ends in _total, plus the old unsuffixed prefix-cache
// names, summed over label sets (engines, model names).
func ParseCounters(text []byte) Counters {
	c := Counters{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, "vllm:") {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if !strings.HasSuffix(name, "_total") && name != "vllm:gpu_prefix_cache_hits" && name != "vllm:gpu_prefix_cache_queries" {
			continue
		}
		if strings.HasPrefix(rest, "{") {
			// Label values may hold spaces or braces inside quotes.
			end, inQ := -1, false
			for i := 1; i < len(rest); i++ {
				switch {
				case rest[i] == '\\' && inQ:
					i++
				case rest[i] == '"':
					inQ = !inQ
				case rest[i] == '}' && !inQ:
					end = i
				}
				if end >= 0 {
					break
				}
			}
			if end < 0 {
				continue
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		c[name] += v
	}
	return c
}

// prefixCache returns the prefix-cache hits and queries, by the newest name
// the engine exposes.
func (c Counters) prefixCache() (hits, queries float64, ok bool) {
	for i := range hitsNames {
		h, ok1 := c[hitsNames[i]]
		q, ok2 := c[queriesNames[i]]
		if ok1 && ok2 {
			return h, q, true
		}
	}
	return 0, 0, false
}

// HitRate is Δhits/Δqueries between two scrapes; nil when either scrape
// lacks the counters or nothing was queried.
func HitRate(before, after Counters) *float64 {
	h0, q0, ok0 := before.prefixCache()
	h1, q1, ok1 := after.prefixCache()
	if !ok0 || !ok1 || q1-q0 <= 0 {
		return nil
	}
	r := (h1 - h0) / (q1 - q0)
	return &r
}
