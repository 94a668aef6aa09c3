//go:build linux

package daemon

import (
	"io"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf/bpftest"
)

// TestSnapshotRedactsCommandLines: a target found by a pattern that
// matches its secret (matching sees the real command line) appears in the
// API with the secrets redacted, and no response carries them.
func TestSnapshotRedactsCommandLines(t *testing.T) {
	bpftest.Require(t)
	const key, token = "sk-hone0test0secret0123456789", "hf_Hone0Test0Token0123456789abcd"
	c := exec.Command("sh", "-c", "sleep 30; :", "sh", "--api-key", key, "HF_TOKEN="+token, "--port", "8000")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	d := startDaemon(t, Config{Match: regexp.MustCompile(regexp.QuoteMeta(key))})
	var cl string
	eventually(t, 5*time.Second, func() string {
		for _, tg := range d.Snapshot().Targets {
			if tg.PID == c.Process.Pid {
				cl = tg.Cmdline
				return ""
			}
		}
		return "target with the secret in its command line not found"
	})
	if want := "sh -c sleep 30; : sh --api-key [REDACTED] HF_TOKEN=[REDACTED] --port 8000"; cl != want {
		t.Errorf("cmdline %q, want %q", cl, want)
	}
	srv := httptest.NewServer(Handler(d.Snapshot))
	defer srv.Close()
	for _, path := range []string{"/v1/snapshot", "/metrics", "/v1/threads", "/v1/profile?view=syscalls"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), key) || strings.Contains(string(b), token) {
			t.Errorf("%s shows a secret", path)
		}
	}
}
