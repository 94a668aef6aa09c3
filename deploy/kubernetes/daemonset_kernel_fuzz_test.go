package kubernetes

import (
	"strings"
	"testing"
)

// FuzzNodeUprobeMulti: whatever --node-kernel holds, the answer is an
// error naming the flag or a choice, never a panic; a release that leads
// with 6.6 or later has uprobe_multi links.
func FuzzNodeUprobeMulti(f *testing.F) {
	for _, s := range []string{"", "6.8.0-1015-aws", "5.15.0-105-generic", "5.15-rc1", "4.19", "6", "x.y", "+6.6", "6.-1", "99999999999999999999.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, release string) {
		multi, err := NodeUprobeMulti(release)
		if err != nil {
			if !strings.Contains(err.Error(), "--node-kernel") {
				t.Fatalf("%q: %v: the error does not name --node-kernel", release, err)
			}
			return
		}
		if v, ok := kernelVersion(release); release != "" && ok && multi != (v[0] > 6 || v[0] == 6 && v[1] >= 6) {
			t.Fatalf("%q: uprobe_multi %v for %v", release, multi, v)
		}
	})
}
