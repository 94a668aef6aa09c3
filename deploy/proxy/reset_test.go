package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func (f *fakeEngine) resetCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resets
}

type resetError struct {
	Error struct {
		Message string   `json:"message"`
		Code    int      `json:"code"`
		Workers []string `json:"workers"`
	} `json:"error"`
}

func postReset(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := testClient.Post(url+"/reset_prefix_cache", "", nil)
	if err != nil {
		t.Fatalf("POST /reset_prefix_cache: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestResetPrefixCacheFansOut: the reset reaches every worker of every pool
// once, not one worker as other unknown routes do.
func TestResetPrefixCacheFansOut(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  func(es []*fakeEngine) Config
	}{
		{"colocated", func(es []*fakeEngine) Config { return colocated(es...) }},
		{"disaggregated", func(es []*fakeEngine) Config { return disagg(es[:2], es[2:]) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			es := []*fakeEngine{newFakeEngine(t, "w0"), newFakeEngine(t, "w1"), newFakeEngine(t, "w2"), newFakeEngine(t, "w3")}
			px := startProxy(t, c.cfg(es))
			for round := 1; round <= 2; round++ {
				status, body := postReset(t, px.URL)
				var reply ResetReply
				if status != http.StatusOK || json.Unmarshal([]byte(body), &reply) != nil || len(reply.Reset) != len(es) {
					t.Fatalf("round %d: %d %s", round, status, body)
				}
				for _, e := range es {
					if n := e.resetCount(); n != round {
						t.Errorf("round %d: %s received %d resets", round, e.name, n)
					}
				}
			}
		})
	}
}

// TestResetPrefixCacheFailures: a worker without the route makes the answer
// 404, so the client can fall back; any other failure is a 502. Both name
// the worker.
func TestResetPrefixCacheFailures(t *testing.T) {
	for _, c := range []struct {
		name       string
		setup      func(p0, d0 *fakeEngine)
		wantStatus int
		wantIn     []string
	}{
		{"one worker lacks the route", func(p0, d0 *fakeEngine) {
			d0.set(func(f *fakeEngine) { f.resetStatus = http.StatusNotFound })
		}, http.StatusNotFound, []string{"d0", "404", "VLLM_SERVER_DEV_MODE"}},
		{"one worker refuses the method", func(p0, d0 *fakeEngine) {
			p0.set(func(f *fakeEngine) { f.resetStatus = http.StatusMethodNotAllowed })
		}, http.StatusNotFound, []string{"p0", "405"}},
		{"one worker unreachable", func(p0, d0 *fakeEngine) {
			p0.srv.Close()
		}, http.StatusBadGateway, []string{"p0", "connect"}},
		{"one worker fails", func(p0, d0 *fakeEngine) {
			d0.set(func(f *fakeEngine) { f.resetStatus = http.StatusInternalServerError })
		}, http.StatusBadGateway, []string{"d0", "500", "reset failing on purpose"}},
		{"route missing beats other failures", func(p0, d0 *fakeEngine) {
			p0.srv.Close()
			d0.set(func(f *fakeEngine) { f.resetStatus = http.StatusNotFound })
		}, http.StatusNotFound, []string{"d0", "p0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p0, d0, d1 := newFakeEngine(t, "p0"), newFakeEngine(t, "d0"), newFakeEngine(t, "d1")
			cfg := disagg([]*fakeEngine{p0}, []*fakeEngine{d0, d1})
			c.setup(p0, d0)
			px := startProxy(t, cfg)
			status, body := postReset(t, px.URL)
			var e resetError
			if status != c.wantStatus || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != c.wantStatus {
				t.Fatalf("%d %s, want %d with a JSON error", status, body, c.wantStatus)
			}
			for _, s := range c.wantIn {
				if !strings.Contains(e.Error.Message, s) {
					t.Errorf("message %q lacks %q", e.Error.Message, s)
				}
			}
			if len(e.Error.Workers) == 0 || strings.Contains(strings.Join(e.Error.Workers, ","), "d1") {
				t.Errorf("workers %v: want the failing ones only", e.Error.Workers)
			}
			if n := d1.resetCount(); n != 1 {
				t.Errorf("healthy d1 received %d resets, want 1", n)
			}
		})
	}
}
