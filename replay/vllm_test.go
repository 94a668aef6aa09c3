package replay

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeVLLM is an in-process server speaking vLLM's wire format for the
// routes hone uses: POST /tokenize, POST /v1/completions (streaming, with a
// usage chunk with "choices": [] and data: [DONE]), GET /metrics with the
// prefix-cache counters, GET /version and GET /v1/models. Its prefix cache
// hashes 16-token blocks like vLLM's, so cached_tokens and the counters are
// what a real engine would report for the same prompts. Output ids are a
// function of the prompt (greedy decoding is deterministic here).
type fakeVLLM struct {
	t          testing.TB
	model      string
	noModels   bool          // no /v1/models route
	noTokenize bool          // no /tokenize route
	tokenDelay time.Duration // between streamed tokens
	// firstDelay is a prefill: before the first token. Tests that assert
	// a valid verdict at time scale 0.01 set it, so that TTFT is not
	// comparable to the host's own dispatch lag.
	firstDelay time.Duration
	// fault picks a misbehaviour for a request id (from X-Request-Id).
	fault func(id int) string
	// tokenize overrides the word tokenizer.
	tokenize func(string) []int
	// devMode serves POST /reset_prefix_cache (vLLM: VLLM_SERVER_DEV_MODE=1);
	// brokenReset answers it without clearing anything.
	devMode, brokenReset bool
	// version is GET /version's JSON; "" the default vLLM answer, "-" none.
	version string
	// foreignQueries is added to the queries counter at every scrape:
	// traffic that is not the replay's.
	foreignQueries int
	// metricsTimeScale, when set, is the time_scale the per-request
	// metrics state (hone's emulator writes one).
	metricsTimeScale float64
	// noPrefixCache plays --no-enable-prefix-caching: nothing ever hits.
	noPrefixCache bool

	mu          sync.Mutex
	cache       map[uint64]bool
	hits, query int
	resets      int
	bodies      []map[string]any
	requests    int
}

func newFakeVLLM(t testing.TB) *fakeVLLM {
	return &fakeVLLM{t: t, model: "test-model", cache: map[uint64]bool{}}
}

func (f *fakeVLLM) start() *httptest.Server {
	s := httptest.NewServer(f)
	f.t.Cleanup(s.Close)
	return s
}

var wordRE = regexp.MustCompile(`[A-Za-z_]+|[0-9]+|\S`)

// wordTokens is the test tokenizer: one id per word, number or symbol.
func wordTokens(text string) []int {
	words := wordRE.FindAllString(text, -1)
	ids := make([]int, len(words))
	for i, w := range words {
		h := fnv.New32a()
		h.Write([]byte(w))
		ids[i] = 100 + int(h.Sum32()%50000)
	}
	return ids
}

func vllmError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "NotFoundError", "param": nil, "code": status}})
}

func (f *fakeVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/version" && r.Method == http.MethodGet && f.version != "-":
		v := f.version
		if v == "" {
			v = `{"version":"0.11.0-test"}`
		}
		io.WriteString(w, v)
	case r.URL.Path == "/reset_prefix_cache" && r.Method == http.MethodPost && f.devMode:
		f.mu.Lock()
		f.resets++
		if !f.brokenReset {
			f.cache = map[uint64]bool{}
		}
		f.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/v1/models" && r.Method == http.MethodGet && !f.noModels:
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","root":"/models/x","max_model_len":32768}]}`, f.model)
	case r.URL.Path == "/metrics" && r.Method == http.MethodGet:
		f.mu.Lock()
		f.query += f.foreignQueries
		h, q := f.hits, f.query
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.\n"+
			"# TYPE vllm:prefix_cache_queries_total counter\n"+
			"vllm:prefix_cache_queries_total{engine=\"0\",model_name=%q} %d.0\n"+
			"# TYPE vllm:prefix_cache_hits_total counter\n"+
			"vllm:prefix_cache_hits_total{engine=\"0\",model_name=%q} %d.0\n"+
			"vllm:num_requests_running{engine=\"0\",model_name=%q} 0.0\n", f.model, q, f.model, h, f.model)
	case r.URL.Path == "/tokenize" && r.Method == http.MethodPost && !f.noTokenize:
		var body struct {
			Model            string `json:"model"`
			Prompt           string `json:"prompt"`
			AddSpecialTokens *bool  `json:"add_special_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			vllmError(w, 400, err.Error())
			return
		}
		if body.Model != f.model {
			vllmError(w, 404, fmt.Sprintf("The model `%s` does not exist.", body.Model))
			return
		}
		if body.AddSpecialTokens == nil || *body.AddSpecialTokens {
			vllmError(w, 400, "test server: want add_special_tokens false")
			return
		}
		tok := wordTokens
		if f.tokenize != nil {
			tok = f.tokenize
		}
		ids := tok(body.Prompt)
		json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "max_model_len": 32768, "tokens": ids, "token_strs": nil})
	case r.URL.Path == "/v1/completions" && r.Method == http.MethodPost:
		f.complete(w, r)
	default:
		http.NotFound(w, r)
	}
}

// requestID returns the request id hone put in X-Request-Id (hone-run-qps-id).
func requestID(r *http.Request) int {
	s := r.Header.Get("X-Request-Id")
	id, err := strconv.Atoi(s[strings.LastIndexByte(s, '-')+1:])
	if err != nil {
		return -1
	}
	return id
}

// cached returns how many leading prompt tokens are in the prefix cache
// (whole 16-token blocks, never the last token, as vLLM) and caches them.
func (f *fakeVLLM) cached(prompt []int) int {
	const block = 16
	f.mu.Lock()
	defer f.mu.Unlock()
	h := fnv.New64a()
	hit, missed := 0, false
	var b [4]byte
	for i := 0; i+block <= len(prompt)-1; i += block {
		for _, id := range prompt[i : i+block] {
			b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
			h.Write(b[:])
		}
		k := h.Sum64()
		if !missed && f.cache[k] && !f.noPrefixCache {
			hit += block
		} else {
			missed = true
		}
		f.cache[k] = true
	}
	f.hits += hit
	f.query += len(prompt)
	return hit
}

func (f *fakeVLLM) complete(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		vllmError(w, 400, "bad JSON")
		return
	}
	f.mu.Lock()
	f.requests++
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	fault := ""
	if f.fault != nil {
		fault = f.fault(requestID(r))
	}
	if body["model"] != f.model || fault == "wrong_model" {
		vllmError(w, 404, fmt.Sprintf("The model `%v` does not exist.", body["model"]))
		return
	}
	var req struct {
		Prompt    []int `json:"prompt"`
		MaxTokens int   `json:"max_tokens"`
	}
	if err := json.Unmarshal(raw, &req); err != nil || len(req.Prompt) == 0 {
		vllmError(w, 400, "prompt must be a list of token ids")
		return
	}
	switch fault {
	case "5xx":
		vllmError(w, 503, "engine overloaded")
		return
	case "non_sse":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"hi","finish_reason":"length"}]}`)
		return
	case "hang":
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		return
	}
	cached := f.cached(req.Prompt)
	h := fnv.New32a()
	fmt.Fprint(h, req.Prompt)
	seed := h.Sum32()
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	fl := w.(http.Flusher)
	// Like vLLM's StreamingResponse: headers go out before the first token.
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	write := func(s string) {
		if fault == "split" {
			// Deliver the stream in 7-byte pieces so events straddle reads.
			for len(s) > 0 {
				n := min(7, len(s))
				io.WriteString(w, s[:n])
				fl.Flush()
				s = s[n:]
			}
			return
		}
		io.WriteString(w, s)
		if fault == "comments" {
			io.WriteString(w, ": keep-alive\r\n\r\n")
		}
		fl.Flush()
	}
	event := func(v any) {
		b, _ := json.Marshal(v)
		if fault == "comments" {
			write("event: message\r\nid: 1\r\ndata: " + string(b) + "\r\n\r\n")
			return
		}
		write("data: " + string(b) + "\n\n")
	}
	n := req.MaxTokens
	if fault == "short" {
		n-- // one token fewer than asked, still finishing with "length"
	}
	for i := range n {
		if fault == "cut" && i == req.MaxTokens/2 {
			// Close the connection mid-stream without the chunked trailer.
			if hj, ok := w.(http.Hijacker); ok {
				conn, _, _ := hj.Hijack()
				conn.Close()
			}
			return
		}
		if fault == "bad_json" && i == 1 {
			write("data: {\"choices\": [\n\n")
			continue
		}
		if fault == "error_event" && i == 2 {
			event(map[string]any{"error": map[string]any{"message": "engine died", "type": "InternalServerError", "code": 500}})
			write("data: [DONE]\n\n")
			return
		}
		if i == 0 && f.firstDelay > 0 {
			time.Sleep(f.firstDelay)
		}
		if fault == "slow" || f.tokenDelay > 0 {
			d := f.tokenDelay
			if fault == "slow" {
				d = 300 * time.Millisecond
			}
			time.Sleep(d)
		}
		choice := map[string]any{"index": 0, "text": fmt.Sprintf(" t%d", i), "logprobs": nil, "finish_reason": nil,
			"stop_reason": nil, "token_ids": []int{int((seed + uint32(i)*7919) % 50000)}}
		if i == 0 {
			choice["prompt_token_ids"] = req.Prompt
		}
		if i == n-1 && fault != "no_finish" {
			choice["finish_reason"] = "length"
		}
		event(map[string]any{"id": "cmpl-1", "object": "text_completion", "created": 1, "model": f.model,
			"choices": []any{choice}, "usage": nil})
	}
	// vLLM writes prompt_tokens_details only when the count is non-zero
	// (serving_completion.py: `if self.enable_prompt_tokens_details and
	// num_cached_tokens`).
	usage := map[string]any{"prompt_tokens": len(req.Prompt), "total_tokens": len(req.Prompt) + req.MaxTokens, "completion_tokens": n}
	if cached > 0 {
		usage["prompt_tokens_details"] = map[string]any{"cached_tokens": cached}
	}
	event(map[string]any{"id": "cmpl-1", "object": "text_completion", "created": 1, "model": f.model, "choices": []any{},
		"usage": usage, "metrics": f.requestMetrics()})
	write("data: [DONE]\n\n")
}

func (f *fakeVLLM) requestMetrics() map[string]any {
	m := map[string]any{"time_to_first_token_ms": 1.5, "queue_time_ms": 0.1}
	if f.metricsTimeScale > 0 {
		m["time_scale"] = f.metricsTimeScale
	}
	return m
}
