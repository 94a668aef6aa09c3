package preflight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hone-llm/hone/bpf/bpftest"
	"github.com/hone-llm/hone/daemon/probes"
	"github.com/hone-llm/hone/deploy"
)

// TestMain doubles as the unprivileged child of TestDaemonTargetAsNonRoot.
func TestMain(m *testing.M) {
	if os.Getenv("HONE_PREFLIGHT_CHILD") == "1" {
		json.NewEncoder(os.Stdout).Encode(EBPFChecks())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// privileged gates a test on root and a BTF kernel: skipped with the reason
// where they are missing, failed instead under HONE_REQUIRE_BPF=1 (CI).
func privileged(t *testing.T) { bpftest.Require(t) }

func find(t *testing.T, cs []Check, name string) Check {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, cs)
	return Check{}
}

func TestDaemonTargetPassesHere(t *testing.T) {
	privileged(t)
	r := Run(context.Background(), Options{Target: TargetDaemon, HoneVersion: "test", HoneCommit: "abc"})
	for _, name := range []string{"privileges", "btf", "probes-procs", "probes-syscalls", "probes-sched", "probes-sockets", "probes-cuda", "ringbuf", "bpf-stats", "simulator-golden"} {
		if c := find(t, r.Checks, name); c.Status != Pass {
			t.Errorf("%s: %s — %s", name, c.Status, c.Detail)
		}
	}
	// This kernel family has no kprobes: reported, not failed.
	k := find(t, r.Checks, "kprobes")
	if k.Status == Fail {
		t.Errorf("kprobes must never fail the daemon target: %+v", k)
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/kprobe/type"); err != nil && (k.Status != Skip || !strings.Contains(k.Detail, "absent")) {
		t.Errorf("kprobes absent here but reported %+v", k)
	}
	if !r.Passed {
		t.Errorf("daemon target failed: %v", r.Failed())
	}
}

func TestDaemonTargetAsNonRoot(t *testing.T) {
	privileged(t) // root is needed to become someone else
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "preflight.test")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"HONE_PREFLIGHT_CHILD=1", "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child as uid 65534: %v", err)
	}
	var cs []Check
	if err := json.Unmarshal(out, &cs); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	p := find(t, cs, "privileges")
	if p.Status != Fail || !strings.Contains(p.Detail, "CAP_BPF") || !strings.Contains(p.Detail, "CAP_PERFMON") || !strings.Contains(p.Detail, "uid 65534") {
		t.Errorf("privileges as nobody: %+v", p)
	}
	// Nothing attaches without privileges: the daemon's own family fails,
	// the others warn.
	if c := find(t, cs, "probes-procs"); c.Status != Fail {
		t.Errorf("procs probes as nobody: %+v", c)
	}
	if c := find(t, cs, "probes-syscalls"); c.Status != Warn {
		t.Errorf("syscall probes as nobody: %+v", c)
	}
}

// Preflight names each probe family available on this kernel, and each
// that is not: a kernel without the socket tracepoints (injected) warns,
// naming the family, why and what the daemon then lacks, and the others
// pass, attached for real; a kernel without the daemon's own family fails.
func TestProbeFamilies(t *testing.T) {
	privileged(t)
	missing := errors.New("find target in vmlinux: btf_trace_sock_send_length: not found")
	without := func(name string) func(probes.Family) (string, error) {
		return func(f probes.Family) (string, error) {
			if f.Name == name {
				return "", missing
			}
			return attachFamily(f)
		}
	}
	cs := familyChecks(without(probes.Sockets))
	if len(cs) != len(probes.All) {
		t.Fatalf("%d family checks, want %d: %+v", len(cs), len(probes.All), cs)
	}
	sockets, _ := probes.Lookup(probes.Sockets)
	for _, c := range cs {
		switch c.Name {
		case "probes-sockets":
			want := Check{Section: "ebpf", Name: "probes-sockets", Status: Warn,
				Detail: "sockets unavailable on this kernel: " + missing.Error() + "; the daemon runs without it and lacks " + sockets.Lost,
				Fix:    "the sockets probes need " + sockets.Needs}
			if c != want {
				t.Errorf("sockets check\n%+v\nwant\n%+v", c, want)
			}
		case "probes-procs":
			if c.Status != Pass || c.Detail != "tp_btf sched_process_fork, sched_process_exec, sched_process_exit: loaded and attached" {
				t.Errorf("procs check: %+v", c)
			}
		default:
			if c.Status != Pass || !strings.HasSuffix(c.Detail, ": loaded and attached") {
				t.Errorf("%s: %+v", c.Name, c)
			}
		}
	}
	if c := familyChecks(without(probes.Procs))[0]; c.Name != "probes-procs" || c.Status != Fail || !strings.Contains(c.Detail, "the daemon needs it") {
		t.Errorf("procs missing: %+v, want a failure", c)
	}
}

func TestGPUTargetWithoutNVML(t *testing.T) {
	// No NVIDIA driver here (nor in CI): a failed check with the reason.
	if exists("/dev/nvidiactl") {
		t.Skip("this host has an NVIDIA driver")
	}
	r := Run(context.Background(), Options{Target: TargetGPU, Python: "python3"})
	c := find(t, r.Checks, "nvml")
	if c.Status != Fail || !strings.HasPrefix(c.Detail, "nvml: unavailable (") {
		t.Errorf("nvml check: %+v", c)
	}
	if r.Passed {
		t.Error("gpu target passed without a GPU")
	}
}

func TestServingChecks(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"a":1}`), 0o644)
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "w.bin"), []byte("abc"), 0o644)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	free, _ := net.Listen("tcp", "127.0.0.1:0")
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()
	r := Run(context.Background(), Options{Target: TargetCPU, ModelDir: dir, Ports: []int{busyPort, freePort}})
	if got := r.Serving.ModelFiles["sub/w.bin"]; got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("sha256(abc) = %q", got)
	}
	if c := find(t, r.Checks, fmt.Sprintf("port-%d", busyPort)); c.Status != Fail {
		t.Errorf("busy port: %+v", c)
	}
	if c := find(t, r.Checks, fmt.Sprintf("port-%d", freePort)); c.Status != Pass {
		t.Errorf("free port: %+v", c)
	}
	if _, err := deploy.HashModelDir(t.TempDir()); err == nil {
		t.Error("an empty model dir hashed fine")
	}
}

func TestCPUTargetAndReport(t *testing.T) {
	r := Run(context.Background(), Options{Target: TargetCPU, HoneVersion: "v", HoneCommit: "c"})
	if !r.Passed {
		t.Fatalf("cpu target failed: %v", r.Failed())
	}
	if r.Host.CPUs < 1 || r.Host.Kernel == "" || r.Host.MemoryBytes == 0 || r.Host.HoneCommit != "c" {
		t.Errorf("host %+v", r.Host)
	}
	path := filepath.Join(t.TempDir(), "env.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	var back Report
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &back); err != nil || back.SchemaVersion != SchemaVersion || back.Target != TargetCPU {
		t.Errorf("round trip: %v %+v", err, back)
	}
	r2 := Run(context.Background(), Options{Target: TargetCPU, Python: "/nonexistent/python3"})
	if c := find(t, r2.Checks, "python"); c.Status != Fail || c.Fix == "" {
		t.Errorf("missing python: %+v", c)
	}
}

// TestVLLMVersionChecks runs the gpu target's serving checks against a fake
// vllm executable: its version and, per deploy's version table, which hone
// features it supports (pass) or lacks (warn, never fail).
func TestVLLMVersionChecks(t *testing.T) {
	fake := func(body string) string {
		p := filepath.Join(t.TempDir(), "vllm")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	_, cs := servingChecks(ctx, Options{Target: TargetGPU, Python: "python3", VLLM: fake(`echo "INFO noise" >&2; echo 0.15.1`)})
	if c := find(t, cs, "vllm-version"); c.Status != Pass || !strings.Contains(c.Detail, "vLLM 0.15.1") {
		t.Errorf("version: %+v", c)
	}
	for name, want := range map[string]Status{
		"vllm-table": Pass, "vllm-kv-load-failure-policy": Pass, "vllm-kv-cache-dtype-bfloat16": Pass,
		"vllm-per-request-metrics": Warn, "vllm-p2p-request-ids": Warn, "vllm-kv-cache-dtype-float16": Warn,
	} {
		if c := find(t, cs, name); c.Status != want || c.Detail == "" {
			t.Errorf("%s: %+v, want %s", name, c, want)
		}
	}
	if c := find(t, cs, "vllm-p2p-request-ids"); !strings.Contains(c.Detail, "P2pNcclConnector specs are refused") {
		t.Errorf("p2p: %+v", c)
	}
	sv, cs := servingChecks(ctx, Options{Target: TargetGPU, Python: "python3", VLLM: fake(`echo 0.27.1`)})
	for _, c := range cs {
		if strings.HasPrefix(c.Name, "vllm-") && c.Status != Pass {
			t.Errorf("0.27.1 %s: %+v", c.Name, c)
		}
	}
	if !sv.VLLMFeatures["p2p-request-ids"] || !sv.VLLMFeatures["per-request-metrics"] {
		t.Errorf("features in the report: %v", sv.VLLMFeatures)
	}
	// No runnable vllm and none importable: a warning, not a failure of its own.
	_, cs = servingChecks(ctx, Options{Target: TargetGPU, Python: "/nonexistent/python3", VLLM: fake(`exit 1`)})
	if c := find(t, cs, "vllm-version"); c.Status != Warn || c.Fix == "" {
		t.Errorf("no vllm: %+v", c)
	}
	// The vllm beside --python is the one asked.
	dir := filepath.Dir(fake(`echo 0.11.1`))
	if got := (Options{Python: filepath.Join(dir, "python3")}).vllm(); got != filepath.Join(dir, "vllm") {
		t.Errorf("vllm beside python: %s", got)
	}
	if got := (Options{Python: "python3"}).vllm(); got != "vllm" {
		t.Errorf("default vllm: %s", got)
	}
}
