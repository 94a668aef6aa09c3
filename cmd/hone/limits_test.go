package main

import (
	"strings"
	"testing"
)

// TestLimitFlags: hone proxy and hone sim serve document their client
// limits in --help, and refuse bad ones with exit 2 naming the flag.
func TestLimitFlags(t *testing.T) {
	for _, cmd := range [][]string{{"proxy"}, {"sim", "serve"}} {
		out, _, code := runCLI(t, "", append(cmd, "--help")...)
		for _, f := range []string{"--max-body-bytes", "--max-body-memory", "--body-timeout", "--read-header-timeout", "--idle-timeout", "--max-header-bytes", "--max-connections", "(default 33554432)", "(default 30s)"} {
			if code != 0 || !strings.Contains(out, f) {
				t.Errorf("hone %v --help: exit %d, lacks %s", cmd, code, f)
			}
		}
	}
	for _, args := range [][]string{
		{"proxy", "--replica", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--max-body-bytes", "-1"},
		{"sim", "serve", "--port", "0", "--max-body-bytes", "-1"},
	} {
		_, errs, code := runCLI(t, "", args...)
		if code != 2 || !strings.Contains(errs, "--max-body-bytes") {
			t.Errorf("hone %v: exit %d, stderr %q; want exit 2 naming --max-body-bytes", args, code, errs)
		}
	}
}
