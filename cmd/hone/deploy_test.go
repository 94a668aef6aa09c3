package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDeployRenderCLI(t *testing.T) {
	spec := "../../deploy/testdata/specs/disagg-nixl-2p2d.yaml"
	out, errs, code := runCLI(t, "", "deploy", "render", spec)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if n := strings.Count(out, "vllm serve "); n != 4 {
		t.Errorf("want 4 worker lines, got %d:\n%s", n, out)
	}
	// decode-0 has TP 2, so it holds side-channel ports 5602-5603 and
	// decode-1 starts at 5604.
	if !strings.Contains(out, "VLLM_NIXL_SIDE_CHANNEL_PORT=5604") || !strings.Contains(out, "hone proxy --spec "+spec) {
		t.Errorf("render output:\n%s", out)
	}
	out, _, code = runCLI(t, "", "deploy", "render", "--output", "json", spec)
	var v struct {
		Plan struct {
			Workers []struct{ Argv []string }
		}
		Proxy struct {
			Mode    string
			Workers []struct{ URL string }
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || len(v.Plan.Workers) != 4 || v.Proxy.Mode != "disaggregated" {
		t.Errorf("json render: exit %d\n%s", code, out)
	}
}

func TestDeployCLIErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"deploy", "render", "/nonexistent.yaml"}, "read spec", exitBadInput},
		{[]string{"deploy", "render", "--output", "xml", "../../deploy/testdata/specs/colocated-tp2.yaml"}, "-o/--output: \"xml\" is not an output format", exitBadInput},
		{[]string{"deploy", "down", "--state-dir", t.TempDir(), "nothing"}, "no deployment state", exitBadInput},
		{[]string{"deploy", "down", "--state-dir", t.TempDir()}, "no deployment under", exitBadInput},
		{[]string{"proxy"}, "give --replica URL", exitBadInput},
		{[]string{"proxy", "--replica", "http://127.0.0.1:1", "--routing", "random"}, "routing: want", exitBadInput},
	} {
		_, errs, code := runCLI(t, "", c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d with %q", c.args, code, errs, c.code, c.want)
		}
	}
}
