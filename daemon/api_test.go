package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

func get(t *testing.T, srv *httptest.Server, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestAPI(t *testing.T) {
	srv := httptest.NewServer(Handler(fixture))
	defer srv.Close()

	code, b := get(t, srv, "/v1/snapshot")
	var s Snapshot
	if code != 200 || json.Unmarshal(b, &s) != nil || s.SchemaVersion != SchemaVersion || len(s.Threads) != 3 {
		t.Errorf("/v1/snapshot: %d %s", code, b)
	}
	code, b = get(t, srv, "/v1/threads?pid=11")
	var th []Thread
	if code != 200 || json.Unmarshal(b, &th) != nil || len(th) != 1 || th[0].TID != 11 {
		t.Errorf("/v1/threads?pid=11: %d %s", code, b)
	}
	code, b = get(t, srv, "/v1/connections?kv=true")
	var cs []Connection
	if code != 200 || json.Unmarshal(b, &cs) != nil || len(cs) != 1 || cs[0].TXBytes != 1000 {
		t.Errorf("/v1/connections?kv=true: %d %s", code, b)
	}
	if code, _ = get(t, srv, "/v1/threads?pid=x"); code != 400 {
		t.Errorf("bad pid: status %d, want 400", code)
	}
	if code, b = get(t, srv, "/metrics"); code != 200 || !bytes.Contains(b, []byte(`hone_syscalls_total{class="futex",process="vllm"} 4`)) {
		t.Errorf("/metrics: %d\n%s", code, b)
	}
	if code, _ = get(t, srv, "/v1/profile?view=nope"); code != 400 {
		t.Errorf("bad view: status %d, want 400", code)
	}
	code, b = get(t, srv, "/v1/profile?view=syscalls")
	if code != 200 {
		t.Fatalf("/v1/profile: %d %s", code, b)
	}
	p, err := profile.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	// futex: 3 calls/3 s on thread 10 plus 1 call/1 s on thread 12.
	var calls, ns int64
	for _, smp := range p.Sample {
		if smp.Location[0].Line[0].Function.Name == "syscall futex" {
			calls += smp.Value[0]
			ns += smp.Value[1]
			if !strings.HasPrefix(smp.Location[2].Line[0].Function.Name, "process vllm (10)") {
				t.Errorf("futex sample's root frame %q", smp.Location[2].Line[0].Function.Name)
			}
		}
	}
	if calls != 4 || ns != 4e9 {
		t.Errorf("profile futex: %d calls %d ns, want 4 and 4e9", calls, ns)
	}
	for _, view := range []string{ViewSched, ViewCUDA} {
		p, err := Profile(fixture(), view)
		if err != nil || len(p.Sample) == 0 {
			t.Errorf("view %s: %v, %d samples", view, err, len(p.Sample))
		}
	}
}

// /v1/profile?view= accepts the known views only: anything else is a 400
// that names the parameter and the allowed values, whether or not the
// snapshot has threads, and the raw value (a NUL byte here) reaches no
// header.
func TestProfileView(t *testing.T) {
	for name, src := range map[string]func() *Snapshot{"fixture": fixture, "empty": func() *Snapshot { return &Snapshot{} }} {
		srv := httptest.NewServer(Handler(src))
		for _, bad := range []string{"nope", "sched%00%0d%0aX-Evil:%201", "SYSCALLS", "%00"} {
			resp, err := http.Get(srv.URL + "/v1/profile?view=" + bad)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.HasPrefix(string(b), "view: want one of syscalls, sched, cuda; got ") {
				t.Errorf("%s: view=%s: %d %q, want 400 naming view and the allowed values", name, bad, resp.StatusCode, b)
			}
			if bytes.ContainsRune(b, 0) {
				t.Errorf("%s: view=%s: the answer echoes a raw NUL: %q", name, bad, b)
			}
			for k, vs := range resp.Header {
				for _, v := range vs {
					if strings.ContainsAny(v, "\x00\r\n") || k == "Content-Disposition" || k == "X-Evil" {
						t.Errorf("%s: view=%s: header %s: %q", name, bad, k, v)
					}
				}
			}
		}
		for _, view := range Views {
			resp, err := http.Get(srv.URL + "/v1/profile?view=" + view)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if want := `attachment; filename="hone-` + view + `.pb.gz"`; resp.StatusCode != 200 || resp.Header.Get("Content-Disposition") != want {
				t.Errorf("%s: view=%s: %d %q, want 200 %q", name, view, resp.StatusCode, resp.Header.Get("Content-Disposition"), want)
			}
		}
		srv.Close()
	}
}
