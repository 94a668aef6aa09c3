package predict

import (
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
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
			for b.Loop() {
				if _, err := Run(spec, Options{Workload: w, QPS: qps, SLO: slo.Default}); err != nil {
					b.Fatal(err)
				}
			}
			tokens := float64(len(qps) * w.Requests * w.OutputTokens)
			b.ReportMetric(tokens*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
