//go:build linux && cgo

package emulator

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// workerLibEnv names the library TestCUDAWorkerHelper serves: set, the
// test binary run as a CUDA worker is one.
const workerLibEnv = "HONE_TEST_CUDA_WORKER_LIB"

// TestCUDAWorkerHelper is the child process of TestCUDAWorkerProcess (the
// test binary started as hone sim cuda-worker would be); without its
// environment variable it does nothing.
func TestCUDAWorkerHelper(t *testing.T) {
	lib := os.Getenv(workerLibEnv)
	if lib == "" {
		t.Skip("the CUDA worker of TestCUDAWorkerProcess")
	}
	if err := ServeCUDAWorker(lib, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestServeCUDAWorker: each call byte is one call into the library, in
// order; each sync is answered with the CLOCK_MONOTONIC readings taken
// before the step's first launch (0: none) and before the sync. EOF ends
// the worker cleanly, an unknown byte with an error.
func TestServeCUDAWorker(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	lib := buildLib(t, recordingCUDA, fmt.Sprintf("-DHONE_LOG=%q", log))
	var out bytes.Buffer
	before := monotonicNow()
	if err := ServeCUDAWorker(lib, strings.NewReader("kksgss"), &out); err != nil {
		t.Fatal(err)
	}
	after := monotonicNow()
	if b, _ := os.ReadFile(log); string(b) != "LLSGSS" {
		t.Errorf("library saw %q, want LLSGSS", b)
	}
	if out.Len() != 3*16 {
		t.Fatalf("%d answer bytes, want 3 of 16", out.Len())
	}
	var r [6]int64
	for i := range r {
		r[i] = int64(binary.LittleEndian.Uint64(out.Bytes()[8*i:]))
	}
	// (launch, sync) per sync: a step of two launches, one of a graph
	// launch, a sync with no launch before it.
	if !(before <= r[0] && r[0] <= r[1] && r[1] <= r[2] && r[2] <= r[3] && r[3] <= after && r[4] == 0 && r[3] <= r[5] && r[5] <= after) {
		t.Errorf("readings %v: want increasing between %d and %d, the third launch 0", r, before, after)
	}
	if err := ServeCUDAWorker(lib, strings.NewReader("kx"), io.Discard); err == nil || !strings.Contains(err.Error(), `unknown call byte 'x'`) {
		t.Errorf("unknown call byte: %v", err)
	}
}

// TestCUDAWorkerProcess: with Config.CUDAWorker the steps' calls come
// from a child process, one launch and one sync a step, the trace's
// readings are the child's and lie at or after the modelled instants,
// and the child ends with the server.
func TestCUDAWorkerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	log := filepath.Join(t.TempDir(), "calls")
	lib := buildLib(t, recordingCUDA, fmt.Sprintf("-DHONE_LOG=%q", log))
	t.Setenv(workerLibEnv, lib)
	trace := newSyncBuffer()
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01, Trace: trace,
		CUDAWorker: []string{os.Args[0], "-test.run=^TestCUDAWorkerHelper$", "-test.v=false", "-test.count=1"}})
	w, ok := s.eng.probe.(*workerProbe)
	if !ok {
		t.Fatalf("probe %T: want the worker", s.eng.probe)
	}
	child := w.cmd.Process.Pid
	if child == os.Getpid() {
		t.Fatal("the worker is this process")
	}
	const n, k = 2, 4
	for i := range n {
		if _, _, err := complete(context.Background(), s.URL(), map[string]any{"prompt": suffix(700+i, 32), "max_tokens": k,
			"ignore_eos": true}, ""); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	// The start's sync proves the library loaded; then a prefill step and
	// k-1 graph-replayed decode steps per request.
	if want := "S" + strings.Repeat("LS"+strings.Repeat("GS", k-1), n); string(b) != want {
		t.Fatalf("library saw %q, want %q", b, want)
	}
	lines := stepLines(t, trace)
	if len(lines) != n*k {
		t.Fatalf("%d step lines, want %d", len(lines), n*k)
	}
	for _, l := range lines {
		num := func(k string) float64 { return l[k].(float64) }
		if start, end, launch, sync := num("start_mono_ns"), num("end_mono_ns"), num("launch_mono_ns"), num("sync_mono_ns"); !(launch >= start && sync >= end && sync >= launch) {
			t.Errorf("step %v: start %.0f end %.0f launch %.0f sync %.0f: want start <= launch, end <= sync", l["step"], start, end, launch, sync)
		}
	}
	s.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(child, 0); errors.Is(err, syscall.ESRCH) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker (pid %d) outlived the server by 10 s", child)
		}
	}
}

// TestCUDAWorkerStartFails: a worker that cannot load its library fails
// Start, naming the worker.
func TestCUDAWorkerStartFails(t *testing.T) {
	t.Setenv(workerLibEnv, filepath.Join(t.TempDir(), "missing.so"))
	_, err := Start(context.Background(), Config{Host: "127.0.0.1", Profile: "exercise",
		CUDAWorker: []string{os.Args[0], "-test.run=^TestCUDAWorkerHelper$", "-test.v=false", "-test.count=1"}})
	if err == nil || !strings.Contains(err.Error(), "cuda worker") {
		t.Fatalf("Start with a failing worker: %v", err)
	}
}
