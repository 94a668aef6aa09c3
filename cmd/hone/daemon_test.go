package main

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/deploy/kubernetes"
)

// hone daemon samples syscall timing by default, one call in
// bpf.DefaultSyscallSample, and says so in its help.
func TestDaemonSyscallSampleDefault(t *testing.T) {
	f := newDaemonCmd().Flags().Lookup("syscall-sample")
	if f == nil || f.DefValue != "16" || bpf.DefaultSyscallSample != 16 {
		t.Fatalf("--syscall-sample default %v, want 16 (bpf.DefaultSyscallSample %d)", f, bpf.DefaultSyscallSample)
	}
	if out, _, code := runCLI(t, "", "daemon", "--help"); code != 0 || !strings.Contains(out, "1: time every call") || !strings.Contains(out, "(default 16)") {
		t.Errorf("daemon --help: exit %d, want --syscall-sample's default and how to time every call\n%s", code, out)
	}
	// Syscalls are timed one second in eight by default, and --help says
	// how to time all the time.
	w, p := newDaemonCmd().Flags().Lookup("syscall-timing-window"), newDaemonCmd().Flags().Lookup("syscall-timing-period")
	if w == nil || p == nil || w.DefValue != "1s" || p.DefValue != "8s" || !strings.Contains(p.Usage, "0: always time") {
		t.Errorf("--syscall-timing-window %v, --syscall-timing-period %v: want defaults 1s of 8s and how to time always", w, p)
	}
}

// A --listen address that is not loopback is refused, exit 2, naming the
// flag and why, unless --allow-remote is given; so is an unknown --user.
func TestDaemonRefusesRemoteListen(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9464", ":9464", "[::]:9464", "10.0.0.1:9464"} {
		_, errs, code := runCLI(t, "", "daemon", "--listen", addr)
		if code != exitBadInput || !strings.Contains(errs, "--listen "+addr) || !strings.Contains(errs, "no authentication") ||
			!strings.Contains(errs, "command lines") || !strings.Contains(errs, "--allow-remote") {
			t.Errorf("--listen %s: exit %d\n%s", addr, code, errs)
		}
	}
	if _, errs, code := runCLI(t, "", "daemon", "--once", "--listen", "0.0.0.0:0"); code != exitBadInput {
		t.Errorf("--once --listen 0.0.0.0:0: exit %d\n%s", code, errs)
	}
	// --allow-remote needs a bearer token file.
	if _, errs, code := runCLI(t, "", "daemon", "--listen", "0.0.0.0:9464", "--allow-remote"); code != exitBadInput || !strings.Contains(errs, "--token-file") {
		t.Errorf("--allow-remote without --token-file: exit %d\n%s", code, errs)
	}
	if _, errs, code := runCLI(t, "", "daemon", "--user", "no-such-user-here"); code != exitBadInput || !strings.Contains(errs, "--user") {
		t.Errorf("--user no-such-user-here: exit %d\n%s", code, errs)
	}
	for _, n := range []string{"0", "3", "131072", "-1", "x"} {
		if _, errs, code := runCLI(t, "", "daemon", "--syscall-sample", n); code != exitBadInput || !strings.Contains(errs, "--syscall-sample") {
			t.Errorf("--syscall-sample %s: exit %d\n%s", n, code, errs)
		}
	}
	for _, c := range [][]string{
		{"--syscall-timing-period", "-1s"},
		{"--syscall-timing-window", "8s"},                                     // not less than the default period
		{"--syscall-timing-window", "0s"},                                     // no window at all
		{"--syscall-timing-window", "2s", "--syscall-timing-period", "2s"},    // always open: say period 0
		{"--syscall-timing-window", "500us", "--syscall-timing-period", "1s"}, // under 1 ms
	} {
		flag := c[0]
		if len(c) > 2 {
			flag = "--syscall-timing-window"
		}
		if _, errs, code := runCLI(t, "", append([]string{"daemon", "--once"}, c...)...); code != exitBadInput || !strings.Contains(errs, flag) {
			t.Errorf("%v: exit %d, want %d naming %s\n%s", c, code, exitBadInput, flag, errs)
		}
	}
}

// --pod-selector and its companions are checked before anything starts;
// the rendered DaemonSet's daemon arguments are flags hone daemon takes.
func TestDaemonPodSelectorFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pod-selector", "hone.dev/pool in (decode", "--node-name", "gpu-1"}, "--pod-selector"},
		{[]string{"--pod-selector", "hone.dev/pool=decode", "--node-name="}, "--node-name: empty"},
		{[]string{"--pod-namespace", "llm"}, "need --pod-selector"},
		{[]string{"--http-ports", "8000,0"}, "--http-ports"},
		{[]string{"--kv-ports", "5600-10"}, "--kv-ports"},
	} {
		_, errs, code := runCLI(t, "", append([]string{"daemon"}, c.args...)...)
		if code != exitBadInput || !strings.Contains(errs, c.want) {
			t.Errorf("daemon %q: exit %d, want %d naming %q\n%s", c.args, code, exitBadInput, c.want, errs)
		}
	}
	objs, err := kubernetes.RenderDaemon(kubernetes.DaemonOptions{Namespace: "llm", Capabilities: []string{"BPF", "PERFMON"}})
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, o := range objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			args = ds.Spec.Template.Spec.Containers[0].Args
		}
	}
	if len(args) == 0 || args[0] != "daemon" {
		t.Fatalf("rendered args %q", args)
	}
	cmd := newDaemonCmd()
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("hone daemon does not take the rendered args %q: %v", args, err)
	}
	for flag, want := range map[string]string{"pod-selector": kubernetes.DefaultServingSelector, "pod-namespace": "llm", "allow-remote": "true"} {
		if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("rendered --%s = %q, want %q", flag, got, want)
		}
	}
}

// --api-max-connections caps the API's clients: its default is the
// daemon's, a negative value is bad input naming the flag.
func TestDaemonAPIMaxConnectionsFlag(t *testing.T) {
	f := newDaemonCmd().Flags().Lookup("api-max-connections")
	if f == nil || f.DefValue != "0" || !strings.Contains(f.Usage, "0: 1024") {
		t.Fatalf("--api-max-connections: %+v, want default 0 meaning 1024", f)
	}
	if _, errs, code := runCLI(t, "", "daemon", "--api-max-connections", "-1"); code != exitBadInput || !strings.Contains(errs, "--api-max-connections -1") {
		t.Errorf("--api-max-connections -1: exit %d\n%s", code, errs)
	}
}
