package kubernetes

import (
	"strings"
	"testing"
)

// TestNodeUprobeMulti reads kernel releases as uname -r prints them: from
// 6.6 the daemon attaches uprobe_multi links; 5.8 to 6.5 perf-event
// uprobes; before 5.8 it cannot run.
func TestNodeUprobeMulti(t *testing.T) {
	for _, c := range []struct {
		release string
		multi   bool
		err     string
	}{
		{"", true, ""},
		{"6.18.44-fc-v1272", true, ""},
		{"6.6.0", true, ""},
		{"6.6-rc1", true, ""},
		{"10.0.1", true, ""},
		{"6.5.13", false, ""},
		{"5.15.0-105-generic", false, ""},
		{"5.10.220-209.869.amzn2.x86_64", false, ""},
		{"5.8.0", false, ""},
		{"5.7.19", false, "needs Linux >= 5.8"},
		{"4.18.0-553.el8_10.x86_64", false, "needs Linux >= 5.8"},
		{"6", false, "want a kernel release"},
		{"x.y", false, "want a kernel release"},
		{"6.x", false, "want a kernel release"},
		{"-6.8", false, "want a kernel release"},
	} {
		multi, err := NodeUprobeMulti(c.release)
		switch {
		case c.err == "" && (err != nil || multi != c.multi):
			t.Errorf("%q: %v, %v; want %v", c.release, multi, err, c.multi)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--node-kernel")):
			t.Errorf("%q: err %v, want %q naming --node-kernel", c.release, err, c.err)
		}
	}
}
