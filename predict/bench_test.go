package predict

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/slo"
)

// BenchmarkScan is the brief's full scan (6 levels × 128 requests × 128
// output tokens) of one config in virtual time: the target is
// under 50 ms of CPU per scan. It reports simulated output tokens per
// CPU-second (wall, on an otherwise idle core).
func BenchmarkScan(b *testing.B) {
	for _, c := range []struct{ kind, profile string }{
		{deploy.Colocated, "qwen2.5-coder-0.5b-l4"},
		{deploy.Disaggregated, "qwen2.5-coder-0.5b-l4"},
		{deploy.Colocated, "qwen2.5-coder-0.5b-h200"},
	} {
		b.Run(c.kind+"/"+c.profile, func(b *testing.B) {
			spec := testSpec(b, c.kind, c.profile)
			w := replay.DefaultWorkload()
			qps := []float64{1, 2, 4, 8, 16, 32}
			b.ReportAllocs()
			cpu0 := cpuSeconds()
			for b.Loop() {
				if _, err := Run(spec, Options{Workload: w, QPS: qps, SLO: slo.Default}); err != nil {
					b.Fatal(err)
				}
			}
			cpu := cpuSeconds() - cpu0
			tokens := float64(len(qps) * w.Requests * w.OutputTokens)
			b.ReportMetric(cpu*1000/float64(b.N), "cpu-ms/op")
			b.ReportMetric(tokens*float64(b.N)/cpu, "tokens/cpu-s")
		})
	}
}

// BenchmarkExactScan is the reference beside BenchmarkScan: the brief's
// exact queueing model (package sim) over the same scan.
func BenchmarkExactScan(b *testing.B) {
	for _, mode := range []sim.Mode{sim.Colocated, sim.Disaggregated} {
		b.Run(string(mode), func(b *testing.B) {
			sc := sim.DefaultScan(sim.Config{Mode: mode, PrefixCache: true})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sim.Scan(sc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGrid1000 ranks a 1,000-config grid (budget 8, the default
// axes, cut to its first 1,000 specs) on the brief's full scan, on every
// CPU: the target is under a minute on a 2-core machine.
func BenchmarkGrid1000(b *testing.B) {
	base := testSpec(b, deploy.Colocated, "qwen2.5-coder-0.5b-l4")
	base.GPUs = deploy.GPUs{Budget: 8, IDs: []int{0, 1, 2, 3, 4, 5, 6, 7}}
	specs, err := Grid(base, DefaultAxes())
	if err != nil {
		b.Fatal(err)
	}
	if len(specs) < 1000 {
		b.Fatalf("grid of %d specs, want at least 1000", len(specs))
	}
	specs = specs[:1000]
	opts := Options{Workload: replay.DefaultWorkload(), QPS: []float64{1, 2, 4, 8, 16, 32}, SLO: slo.Default}
	for b.Loop() {
		pts := Evaluate(context.Background(), specs, opts, nil)
		for _, p := range pts {
			if p.Err != "" {
				b.Fatalf("%s: %s", p.Spec.Name, p.Err)
			}
		}
		Rank(pts)
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/grid")
}

// cpuSeconds is this process's CPU time so far (user + system, every
// thread: the garbage collector's too).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkTraceMemory predicts a trace of n requests (1,200 input and
// 256 output tokens each, 10 req/s) and reports what the prediction
// holds: retained-B/req is the live heap after it, the record alive
// (every request kept), per request; peak-heap-MB the most heap in use
// while it ran, sampled every 5 ms.
func BenchmarkTraceMemory(b *testing.B) {
	spec := testSpec(b, deploy.Colocated, "qwen2.5-coder-0.5b-l4")
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "trace.jsonl")
			var sb strings.Builder
			for i := range n {
				fmt.Fprintf(&sb, `{"timestamp": %d, "input_length": 1200, "output_length": 256, "hash_ids": [%d, %d]}`+"\n", i*100, i%16, 1000+i)
			}
			if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
				b.Fatal(err)
			}
			tf, err := replay.OpenTrace(path, 0, 16)
			if err != nil {
				b.Fatal(err)
			}
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				var rec *schema.Record
				peak := honetest.HeapPeak(func() { rec, err = RunTrace(spec, Options{SLO: slo.Default, KeepRequests: true}, tf, 1) })
				if err != nil {
					b.Fatal(err)
				}
				if got := len(rec.Runs[0].Levels[0].Requests); got != n {
					b.Fatalf("%d requests, want %d", got, n)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(rec)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "retained-B/req")
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			}
		})
	}
}
