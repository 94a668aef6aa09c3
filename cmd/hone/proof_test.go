package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// asHoneEnv makes this test binary run hone's main (TestMain), so that a
// test can run `hone ...` as a process, and hone can re-execute itself
// (/proc/self/exe preflight proof-workload) as it does when built.
const asHoneEnv = "HONE_TEST_AS_HONE"

func TestMain(m *testing.M) {
	if os.Getenv(asHoneEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// honeCmd is `hone args...` as a process, without HONE_LIBCUDA.
func honeCmd(args ...string) *exec.Cmd {
	c := exec.Command(os.Args[0], args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "HONE_LIBCUDA=") {
			c.Env = append(c.Env, e)
		}
	}
	c.Env = append(c.Env, asHoneEnv+"=1")
	return c
}

// TestProveWithoutDriver: on a host without the NVIDIA driver (this one,
// when libcuda.so.1 cannot be loaded), `hone preflight --target gpu
// --prove` says "no NVIDIA driver" on stdout and in the JSON verdict,
// skipped, and exits 0, as its --help documents.
func TestProveWithoutDriver(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the GPU proof runs on Linux only")
	}
	// Does libcuda.so.1 load here? Ask the proof's own workload.
	w := honeCmd("preflight", "proof-workload")
	w.Stdin = strings.NewReader(`{"libcuda":"libcuda.so.1"}` + "\n")
	out, err := w.Output()
	var ready struct{ Status, Reason string }
	if err == nil {
		line, _, _ := strings.Cut(string(out), "\n")
		err = json.Unmarshal([]byte(line), &ready)
	}
	if err != nil || ready.Status == "" {
		t.Fatalf("proof-workload: %v: %s", err, out)
	}
	if ready.Status != "no_library" {
		t.Skipf("this host has an NVIDIA driver (libcuda.so.1: %s %s): the no-driver path is not what runs here", ready.Status, ready.Reason)
	}

	path := filepath.Join(t.TempDir(), "proof.json")
	c := honeCmd("preflight", "--target", "gpu", "--prove", "--out", path)
	var stderr strings.Builder
	c.Stderr = &stderr
	stdout, err := c.Output()
	if err != nil {
		t.Fatalf("exit: %v (want 0)\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr.String())
	}
	if !strings.Contains(string(stdout), "SKIPPED: no NVIDIA driver (dlopen libcuda.so.1: ") {
		t.Errorf("stdout:\n%s", stdout)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v["verdict"] != "skipped" || v["status"] != "no NVIDIA driver" || !strings.HasPrefix(v["reason"].(string), "dlopen libcuda.so.1: ") ||
		v["probes"] != nil || v["phases"] != nil {
		t.Errorf("verdict JSON:\n%s", b)
	}
}

// --prove is for --target gpu alone; --prove-busy needs --prove: exit 2.
func TestProveBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"preflight", "--prove"},
		{"preflight", "--target", "daemon", "--prove"},
		{"preflight", "--target", "gpu", "--prove", "--freeze", "x.txt"},
		{"preflight", "--target", "gpu", "--prove", "--port", "8000"},
		{"preflight", "--target", "gpu", "--prove-busy", "5s"},
		{"preflight", "--target", "gpu", "--prove", "--prove-busy", "100ms"},
	} {
		if _, errs, code := runCLI(t, "", args...); code != exitBadInput || !strings.Contains(errs, "--prove") {
			t.Errorf("%v: exit %d\n%s", args, code, errs)
		}
	}
}
