//go:build linux && cgo

package emulator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf/bpftest"
)

// buildLib compiles C source into a shared library named libcuda.so.1 in
// a fresh directory, as bpftest.Workload builds the daemon's fake driver.
func buildLib(t *testing.T, src string, defs ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("gcc not found: %v", err)
	}
	dir := t.TempDir()
	c := filepath.Join(dir, "lib.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libcuda.so.1")
	args := append([]string{"-O1", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", lib}, defs...)
	if out, err := exec.Command("gcc", append(args, c)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

// recordingCUDA logs each call to the file HONE_LOG as one byte: 'G'
// cuGraphLaunch, 'L' cuLaunchKernel, 'S' cuStreamSynchronize; 'X' when the
// arguments are not the harmless ones (NULL handles, a 1x1x1 grid).
const recordingCUDA = `#include <fcntl.h>
#include <unistd.h>
static void rec(char c)
{
	int fd = open(HONE_LOG, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) {
		write(fd, &c, 1);
		close(fd);
	}
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		   unsigned shmem, void *stream, void **params, void **extra)
{
	int ok = !f && gx == 1 && gy == 1 && gz == 1 && bx == 1 && by == 1 && bz == 1 && !shmem && !stream && !params && !extra;
	rec(ok ? 'L' : 'X');
	return 0;
}
int cuGraphLaunch(void *exec, void *stream) { rec(!exec && !stream ? 'G' : 'X'); return 0; }
int cuStreamSynchronize(void *stream) { rec(!stream ? 'S' : 'X'); return 0; }
`

// TestCUDALibFakeCUDA: the daemon tests' fake libcuda loads, every step
// calls it, and each step line's readings lie at or after the modelled
// instants they stand for (launch at or after the start, sync at or after
// the end) and within a generous slack of the end.
func TestCUDALibFakeCUDA(t *testing.T) {
	_, lib := bpftest.Workload(t) // the daemon tests' fake libcuda
	trace := newSyncBuffer()
	// A GPU profile (a front end, batches, chunked prefill) at half speed.
	s := startServer(t, Config{Profile: "qwen2.5-coder-0.5b-a10", TimeScale: 0.5, Trace: trace, CUDALib: lib})
	if _, ok := s.eng.probe.(*dlCUDAProbe); !ok {
		t.Fatalf("probe %T: want the dlopen'ed library", s.eng.probe)
	}
	ctx := context.Background()
	const n, k = 3, 6
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, _, err := complete(ctx, s.URL(), map[string]any{"prompt": suffix(400+i, 30+20*i), "max_tokens": k,
				"ignore_eos": true}, "")
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	lines := stepLines(t, trace)
	if got := s.eng.steps.Load(); got != int64(len(lines)) || got < k {
		t.Fatalf("engine ran %d steps, trace has %d step lines: want equal and at least %d", got, len(lines), k)
	}
	const slack = float64(5 * time.Second) // host timing: bounded loosely, one side only
	decodes := 0
	for _, l := range lines {
		num := func(k string) float64 { return l[k].(float64) }
		start, end, launch, sync := num("start_mono_ns"), num("end_mono_ns"), num("launch_mono_ns"), num("sync_mono_ns")
		if !(start <= end && launch >= start && sync >= end && sync >= launch) {
			t.Errorf("step %v: start %.0f end %.0f launch %.0f sync %.0f: want start <= launch, end <= sync",
				l["step"], start, end, launch, sync)
		}
		if launch > end+slack || sync > end+slack {
			t.Errorf("step %v: launch %.0f or sync %.0f more than %v after the end %.0f", l["step"], launch, sync,
				time.Duration(slack), end)
		}
		want := "graph"
		if stepPrefills(l) {
			want = "launch"
		}
		if l["call"] != want {
			t.Errorf("step %v: call %v, want %s", l["step"], l["call"], want)
		}
		for _, r := range l["requests"].([]any) {
			if r.(map[string]any)["decode"].(bool) {
				decodes++
			}
		}
	}
	if decodes != n*(k-1) {
		t.Errorf("step lines hold %d decodes, want %d", decodes, n*(k-1))
	}
}

// TestCUDALibCallsInOrder: the library itself sees exactly one launch and
// one sync per step, in step order, with the harmless arguments, and the
// launches match the step lines' calls.
func TestCUDALibCallsInOrder(t *testing.T) {
	for _, eager := range []bool{false, true} {
		t.Run(fmt.Sprintf("eager=%v", eager), func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "calls")
			lib := buildLib(t, recordingCUDA, fmt.Sprintf("-DHONE_LOG=%q", log))
			trace := newSyncBuffer()
			s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01, Trace: trace, CUDALib: lib, EnforceEager: eager})
			ctx := context.Background()
			const n, k = 2, 4
			for i := range n {
				if _, _, err := complete(ctx, s.URL(), map[string]any{"prompt": suffix(500+i, 32), "max_tokens": k,
					"ignore_eos": true}, ""); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			decode := "GS"
			if eager {
				decode = "LS"
			}
			want := strings.Repeat("LS"+strings.Repeat(decode, k-1), n)
			if string(b) != want {
				t.Fatalf("library saw %q, want %q", b, want)
			}
			lines := stepLines(t, trace)
			if len(lines) != n*k || s.eng.steps.Load() != int64(n*k) {
				t.Fatalf("%d step lines, %d engine steps: want %d", len(lines), s.eng.steps.Load(), n*k)
			}
			for i, l := range lines {
				call := "launch"
				if b[2*i] == 'G' {
					call = "graph"
				}
				if l["call"] != call {
					t.Errorf("step %d: line says %v, library saw %s", i+1, l["call"], call)
				}
			}
		})
	}
}

// TestCUDALibMissingSymbol: a library without cuStreamSynchronize fails
// Start with an error naming --cuda-lib and the symbol.
func TestCUDALibMissingSymbol(t *testing.T) {
	lib := buildLib(t, `int cuLaunchKernel(void) { return 0; }
int cuGraphLaunch(void) { return 0; }
`)
	s, err := Start(context.Background(), Config{Profile: "exercise", CUDALib: lib})
	if err == nil {
		s.Close()
		t.Fatal("Start accepted a library without cuStreamSynchronize")
	}
	for _, w := range []string{"--cuda-lib", lib, "cuStreamSynchronize"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
}
