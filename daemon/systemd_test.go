//go:build linux

package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/features"
	"kernel.org/pub/linux/libs/security/libcap/cap"

	"github.com/hone-llm/hone/bpf/bpftest"
)

const unitFile = "../deploy/systemd/hone-daemon.service"

// readUnit returns the [Service] section's assignments, key by key in
// file order (continuation lines joined), as systemd reads them.
func readUnit(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section, pending := "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, pending = pending+line, ""
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q: not KEY=VALUE", path, line)
		}
		if section == "[Service]" {
			out[strings.TrimSpace(k)] = append(out[strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// unitCaps is the capability set a unit's assignments of key give: each
// assignment adds its names, an empty one resets (systemd.exec(5)).
func unitCaps(t *testing.T, key string, values []string) []cap.Value {
	t.Helper()
	var set []cap.Value
	for _, v := range values {
		if v == "" {
			set = nil
			continue
		}
		if strings.HasPrefix(v, "~") {
			t.Fatalf("%s=%s: an inverted list grants every other capability; list the ones granted", key, v)
		}
		for _, name := range strings.Fields(v) {
			c, err := cap.FromName(strings.ToLower(name))
			if err != nil {
				t.Fatalf("%s: %s: %v", key, name, err)
			}
			if !slices.Contains(set, c) {
				set = append(set, c)
			}
		}
	}
	slices.Sort(set)
	return set
}

// TestSystemdUnitCapabilities: the unit grants a non-root daemon exactly
// StartCapabilities(true, false), bounding and ambient sets alike, for the
// flags its ExecStart passes (no --bpf-stats); what the daemon keeps after
// attaching is among them (a drop to a capability not permitted fails);
// no_new_privs is set (ambient capabilities survive it, and the daemon
// sets it itself anyway); the daemon writes only to its StateDirectory.
func TestSystemdUnitCapabilities(t *testing.T) {
	u := readUnit(t, unitFile)
	one := func(key string) string {
		if v := u[key]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	start := one("ExecStart")
	if !strings.HasPrefix(start, "/usr/local/bin/hone daemon ") {
		t.Errorf("ExecStart=%s: want /usr/local/bin/hone daemon ...", start)
	}
	stats := slices.Contains(strings.Fields(start), "--bpf-stats")
	want := slices.Clone(StartCapabilities(true, stats))
	slices.Sort(want)
	for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		if len(u[key]) == 0 {
			t.Errorf("%s: no %s=", unitFile, key)
			continue
		}
		if got := unitCaps(t, key, u[key]); !slices.Equal(got, want) {
			t.Errorf("%s=%v, want daemon.StartCapabilities(uprobe_multi, bpf_stats=%v) %v", key, got, stats, want)
		}
	}
	for _, multi := range []bool{true, false} {
		for _, stats := range []bool{true, false} {
			for _, c := range KeptCapabilities(multi) {
				if !slices.Contains(StartCapabilities(multi, stats), c) {
					t.Errorf("KeptCapabilities(uprobe_multi=%v) keeps %v, not in StartCapabilities(%v, %v)", multi, c, multi, stats)
				}
			}
		}
	}
	if one("DynamicUser") != "yes" && (one("User") == "" || one("User") == "root" || one("User") == "0") {
		t.Errorf("the unit runs the daemon as root: want DynamicUser=yes or a User= other than root")
	}
	for key, want := range map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "StateDirectory": "hone"} {
		if got := one(key); got != want {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
	for _, f := range strings.Fields(start) {
		if strings.HasPrefix(f, "/var/") && !strings.HasPrefix(f, "/var/lib/"+one("StateDirectory")+"/") {
			t.Errorf("ExecStart writes %s, outside StateDirectory=%s (read-only under ProtectSystem=strict)", f, one("StateDirectory"))
		}
	}
}

// TestStartCapabilities shows by experiment that StartCapabilities are
// what a non-root daemon needs, as the unit runs it: a copy of the test
// binary, as uid 65534 with exactly those ambient capabilities, starts
// the daemon, drops to KeptCapabilities and writes its snapshot, with and
// without --bpf-stats and with perf-event uprobes (as on kernels before
// 6.6); with any one of them missing it fails, at start or at the drop.
// (No libcuda is mapped here: TestPrivilegeNeeds covers probing one.)
func TestStartCapabilities(t *testing.T) {
	bpftest.Require(t)
	// The copy of this test binary that uid 65534 runs must be reachable.
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "daemon.test")
	copyFile(t, os.Args[0], bin)
	const nobody = 65534

	run := func(caps []cap.Value, bpfStats, perfUprobes bool) (*Snapshot, string, error) {
		t.Helper()
		spec, _ := json.Marshal(subprocessSpec{Match: "^hone-start-capabilities-no-such-process$", Listen: "off",
			Duration: 300 * time.Millisecond, BPFStats: bpfStats, PerfUprobes: perfUprobes, DropCaps: true})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, bin, "-test.run=^$")
		c.Env = append(os.Environ(), subprocessEnv+"="+string(spec))
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		for _, v := range caps {
			c.SysProcAttr.AmbientCaps = append(c.SysProcAttr.AmbientCaps, uintptr(v))
		}
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			return nil, stderr.String(), err
		}
		var s Snapshot
		if err := json.Unmarshal(out, &s); err != nil {
			return nil, stderr.String(), fmt.Errorf("snapshot: %v", err)
		}
		return &s, stderr.String(), nil
	}
	without := func(set []cap.Value, drop cap.Value) []cap.Value {
		return slices.DeleteFunc(slices.Clone(set), func(c cap.Value) bool { return c == drop })
	}

	multi := features.HaveBPFLinkUprobeMulti() == nil
	for _, tc := range []struct {
		name                         string
		multi, bpfStats, perfUprobes bool
	}{
		{"default", multi, false, !multi},
		{"--bpf-stats", multi, true, !multi},
		{"perf-event uprobes", false, false, true}, // as on kernels before 6.6
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := StartCapabilities(tc.multi, tc.bpfStats)
			s, stderr, err := run(set, tc.bpfStats, tc.perfUprobes)
			if err != nil {
				t.Fatalf("uid %d with ambient %v: %v\n%s", nobody, set, err, stderr)
			}
			if s.Daemon.UID != nobody || !s.Daemon.NoNewPrivs || s.BPF.StatsEnabled != tc.bpfStats {
				t.Errorf("uid %d, no_new_privs %v, BPF stats %v; want uid %d, true, %v", s.Daemon.UID, s.Daemon.NoNewPrivs, s.BPF.StatsEnabled, nobody, tc.bpfStats)
			}
			if want := capabilityNames(KeptCapabilities(tc.multi)); strings.ToUpper(s.Daemon.Capabilities) != want+"=EP" {
				t.Errorf("capabilities after the drop %q, want %s=ep", s.Daemon.Capabilities, want)
			}
			t.Logf("ambient %v as uid %d: started, kept %q", set, nobody, s.Daemon.Capabilities)
			for _, c := range set {
				_, stderr, err := run(without(set, c), tc.bpfStats, tc.perfUprobes)
				if err == nil {
					t.Errorf("without %v: the daemon started and dropped; StartCapabilities holds one it does not need", c)
					continue
				}
				t.Logf("without %v: %s", c, lastLine(stderr))
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
