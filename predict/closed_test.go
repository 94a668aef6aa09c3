package predict

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// TestClosedLoop: --concurrency N keeps N measured requests in flight
// from the measurement's start until the last one is sent, colocated and
// disaggregated; each later request is sent at an earlier one's end; the
// record states the load and validates.
func TestClosedLoop(t *testing.T) {
	for _, kind := range []string{deploy.Colocated, deploy.Disaggregated} {
		for _, n := range []int{1, 4, 16} {
			w := replay.DefaultWorkload()
			w.Requests = 72
			rec, err := Run(testSpec(t, kind, "qwen2.5-coder-0.5b-l4"), Options{Workload: w, Concurrency: []int{n}, SLO: slo.Default, KeepRequests: true})
			if err != nil {
				t.Fatal(err)
			}
			if rec.Workload.LoadMode() != schema.LoadClosed || !slices.Equal(rec.Workload.Concurrency, []int{n}) || len(rec.Workload.QPS) != 0 {
				t.Fatalf("%s/%d: workload load %q concurrency %v qps %v", kind, n, rec.Workload.Load, rec.Workload.Concurrency, rec.Workload.QPS)
			}
			l := rec.Runs[0].Levels[0]
			if l.Concurrency != n || l.OfferedQPS != 0 || l.Measured != w.Requests-replay.Sessions {
				t.Fatalf("%s/%d: level concurrency %d offered %v measured %d", kind, n, l.Concurrency, l.OfferedQPS, l.Measured)
			}
			var ends []float64
			for _, q := range l.Requests[replay.Sessions:] {
				ends = append(ends, *q.FinishMs)
			}
			slices.Sort(ends)
			measured := l.Requests[replay.Sessions:]
			for i, q := range measured {
				want := replay.MeasureStartMillis
				if i >= n {
					want = ends[i-n]
				}
				if q.SentMs != want || q.ScheduledMs != want {
					t.Fatalf("%s/%d: request %d sent at %v (scheduled %v), want %v", kind, n, q.ID, q.SentMs, q.ScheduledMs, want)
				}
			}
			lastSend := measured[len(measured)-1].SentMs
			for _, at := range append([]float64{replay.MeasureStartMillis}, ends...) {
				if at > lastSend {
					break
				}
				in := 0
				for _, q := range measured {
					if q.SentMs <= at && *q.FinishMs > at {
						in++
					}
				}
				if in != n {
					t.Fatalf("%s/%d: %d in flight at %v ms", kind, n, in, at)
				}
			}
			path := filepath.Join(t.TempDir(), "rec.json")
			if err := replay.WriteRecord(path, rec); err != nil {
				t.Fatal(err)
			}
			if _, err := replay.ReadRecord(path); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err := Run(testSpec(t, deploy.Colocated, "qwen2.5-coder-0.5b-l4"), Options{Workload: replay.DefaultWorkload(), QPS: []float64{1}, Concurrency: []int{2}, SLO: slo.Default})
	var pe *replay.ParamError
	if !errors.As(err, &pe) || pe.Field != "concurrency" {
		t.Errorf("qps and concurrency together: %v, want a ParamError naming concurrency", err)
	}
}
