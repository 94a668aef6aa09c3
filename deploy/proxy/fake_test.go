package proxy

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEngine speaks vLLM's wire format for /v1/completions, /health and
// /metrics, with a block-hashed prefix cache (16-token blocks) and switches
// for the failures the proxy must handle.
type fakeEngine struct {
	t    *testing.T
	name string
	srv  *httptest.Server

	mu       sync.Mutex
	requests []fakeRequest
	blocks   map[uint64]bool
	hits     int
	queries  int

	// Failure switches, read under mu.
	failStatus  int           // answer completions with this status
	noParams    bool          // prefill: answer without kv_transfer_params
	stallAfter  int           // stream: stall forever after this many tokens, before usage and [DONE] when all (0: never)
	hangHeaders bool          // never send response headers
	unhealthy   bool          // /health answers 503
	delay       time.Duration // before answering
	holdOpen    bool          // stream: after [DONE], keep the response open until the proxy leaves
	errorEvent  bool          // stream: an error event after the first token, then [DONE]
	resetStatus int           // answer /reset_prefix_cache with this status (0: 200)
	resets      int           // /reset_prefix_cache requests received
}

type fakeRequest struct {
	ID   string
	Body map[string]any
	Raw  []byte
}

const fakeBlock = 16

func newFakeEngine(t *testing.T, name string) *fakeEngine {
	f := &fakeEngine{t: t, name: name, blocks: map[uint64]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", f.completions)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		bad := f.unhealthy
		f.mu.Unlock()
		if bad {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fmt.Fprintf(w, "# HELP vllm:prefix_cache_queries Prefix cache queries, in tokens.\n# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} %d\n", f.queries)
		fmt.Fprintf(w, "# HELP vllm:prefix_cache_hits Prefix cache hits, in tokens.\n# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} %d\n", f.hits)
		fmt.Fprintf(w, "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n")
	})
	mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.resets++
		status := f.resetStatus
		f.mu.Unlock()
		if status != 0 {
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"detail":"%s: reset failing on purpose"}`, f.name)
		}
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

func (f *fakeEngine) set(fn func(f *fakeEngine)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
}

func (f *fakeEngine) got() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.requests...)
}

// cache looks the prompt's full blocks up in the prefix cache and inserts
// them, returning the cached token count.
func (f *fakeEngine) cache(prompt []int) int {
	h := fnv.New64a()
	cached, missed := 0, false
	for i := 0; i+fakeBlock <= len(prompt); i += fakeBlock {
		for _, t := range prompt[i : i+fakeBlock] {
			fmt.Fprintf(h, "%d,", t)
		}
		k := h.Sum64()
		if f.blocks[k] && !missed {
			cached += fakeBlock
		} else {
			missed = true
		}
		f.blocks[k] = true
	}
	f.queries += len(prompt)
	f.hits += cached
	return cached
}

func (f *fakeEngine) completions(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	id := r.Header.Get("X-Request-Id")
	var prompt []int
	if ps, ok := body["prompt"].([]any); ok {
		for _, p := range ps {
			prompt = append(prompt, int(p.(float64)))
		}
	}
	f.mu.Lock()
	f.requests = append(f.requests, fakeRequest{ID: id, Body: body, Raw: raw})
	status, noParams, stallAfter, hang, delay := f.failStatus, f.noParams, f.stallAfter, f.hangHeaders, f.delay
	holdOpen, errorEvent := f.holdOpen, f.errorEvent
	cached := 0
	if status == 0 {
		cached = f.cache(prompt)
	}
	f.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	if hang {
		<-r.Context().Done()
		return
	}
	if status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"%s failing on purpose","code":%d}}`, f.name, status)
		return
	}
	maxTokens := 4
	if v, ok := body["max_tokens"].(float64); ok {
		maxTokens = int(v)
	}
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`,
		len(prompt), maxTokens, len(prompt)+maxTokens, cached)
	if stream, _ := body["stream"].(bool); !stream {
		kv := "null"
		if kvp, ok := body["kv_transfer_params"].(map[string]any); ok && kvp["do_remote_decode"] == true && !noParams {
			kv = fmt.Sprintf(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],"remote_engine_id":"%s","remote_request_id":"%s","remote_host":"127.0.0.1","remote_port":5600,"tp_size":1}`, f.name, id)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-%s","object":"text_completion","model":"m","choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":%s,"kv_transfer_params":%s}`, id, usage, kv)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl := w.(http.Flusher)
	for i := range maxTokens {
		fmt.Fprintf(w, "data: {\"id\":\"cmpl-%s\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"t%d\",\"token_ids\":[%d],\"finish_reason\":%s}]}\n\n",
			id, i, 100+i, finish(i == maxTokens-1))
		fl.Flush()
		if stallAfter > 0 && i+1 == stallAfter {
			<-r.Context().Done()
			return
		}
		if errorEvent {
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"engine failed on purpose\",\"type\":\"InternalServerError\",\"code\":500}}\n\n")
			break
		}
	}
	if !errorEvent {
		fmt.Fprintf(w, "data: {\"id\":\"cmpl-%s\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[],\"usage\":%s}\n\n", id, usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if holdOpen {
		// Like a worker whose stream end the proxy has not read yet when
		// the client, holding [DONE], closes.
		fl.Flush()
		<-r.Context().Done()
	}
}

func finish(last bool) string {
	if last {
		return `"length"`
	}
	return "null"
}

// expectedStream is the exact body a fake engine streams, so tests can check
// the proxy passed it through unchanged.
func expectedStream(id string, maxTokens, promptLen, cached int) string {
	var b strings.Builder
	for i := range maxTokens {
		fmt.Fprintf(&b, "data: {\"id\":\"cmpl-%s\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"t%d\",\"token_ids\":[%d],\"finish_reason\":%s}]}\n\n",
			id, i, 100+i, finish(i == maxTokens-1))
	}
	fmt.Fprintf(&b, "data: {\"id\":\"cmpl-%s\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n",
		id, promptLen, maxTokens, promptLen+maxTokens, cached)
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}
