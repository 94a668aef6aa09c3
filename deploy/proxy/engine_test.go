package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/engine"
)

// flushEngine is an engine registered only here whose conventions differ
// from vLLM's: another request-id head, another cache-reset route, which
// needs a variable.
type flushEngine struct{}

func init() { engine.Register(flushEngine{}) }

func (flushEngine) Name() string { return "flush-test" }

func (flushEngine) Facts() engine.Facts {
	return engine.Facts{
		Title: "Flush", Binary: "flush",
		Cache: engine.Cache{ResetRoute: "POST /flush_cache", ResetEnv: "FLUSH_ADMIN=1"},
		HTTP:  engine.HTTP{RequestIDHeader: "X-Trace-Id", ResponseHeads: []string{"Content-Type"}},
	}
}

func (flushEngine) Render(engine.Launch) (engine.Command, error) { return engine.Command{}, nil }
func (flushEngine) Recognise(string) bool                        { return false }
func (flushEngine) MatchProcess(string, []string) bool           { return false }

// TestEngineConventions: the proxy reads and sets the workers' engine's
// request-id head and fans out its reset route, naming its variable when a
// worker lacks the route; deploy names an engine only when its
// conventions are not vLLM's.
func TestEngineConventions(t *testing.T) {
	var mu sync.Mutex
	var ids, paths []string
	w := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ids, paths = append(ids, r.Header.Get("X-Trace-Id")), append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/completions":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"text":"x","finish_reason":"length"}]}`)
		case "/health":
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(w.Close)
	px := startProxy(t, Config{Engine: "flush-test", Mode: ModeColocated, HealthInterval: 50 * time.Millisecond,
		Workers: []Worker{{Name: "w0", Role: RoleColocated, URL: w.URL}}})

	status, head, body := post(t, px.URL, completion([]int{1, 2, 3}, 1), map[string]string{"X-Trace-Id": "abc"})
	if status != http.StatusOK || head.Get("X-Trace-Id") != "abc" || head.Get("X-Request-Id") != "" {
		t.Fatalf("completion: %d %v %s", status, head, body)
	}
	resp, err := testClient.Post(px.URL+"/flush_cache", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e resetError
	if resp.StatusCode != http.StatusNotFound || json.Unmarshal(b, &e) != nil ||
		!strings.Contains(e.Error.Message, "flush_cache: worker w0 answered 404 (no /flush_cache: Flush serves it only with FLUSH_ADMIN=1)") {
		t.Fatalf("POST /flush_cache: %d %s", resp.StatusCode, b)
	}
	mu.Lock()
	defer mu.Unlock()
	var sawCompletion, sawFlush bool
	for i, p := range paths {
		sawCompletion = sawCompletion || p == "POST /v1/completions" && ids[i] == "abc"
		sawFlush = sawFlush || p == "POST /flush_cache"
	}
	if !sawCompletion || !sawFlush {
		t.Fatalf("worker saw %v with ids %v", paths, ids)
	}

	if got := EngineField("flush-test"); got != "flush-test" {
		t.Errorf("EngineField(flush-test) = %q", got)
	}
	for _, n := range []string{engine.VLLM, engine.Emulator} {
		if got := EngineField(n); got != "" {
			t.Errorf("EngineField(%s) = %q, want empty", n, got)
		}
	}
	if _, err := New(Config{Engine: "nope", Mode: ModeColocated, Workers: []Worker{{Name: "w0", Role: RoleColocated, URL: w.URL}}}, nil); err == nil {
		t.Error("New took an unregistered engine")
	}
}
