//go:build linux

package main

import (
	"os"
	"testing"
	"time"
)

func series(f func(t float64) uint64) Series {
	var s Series
	for t := 0.0; t <= 600; t += 5 {
		s.Samples = append(s.Samples, Sample{T: t, RSS: f(t)})
	}
	return s
}

func TestSummarizeFlat(t *testing.T) {
	// Warm-up growth, then noise around a plateau.
	s := series(func(t float64) uint64 {
		if t < 100 {
			return uint64(50e6 + t*1e6)
		}
		return uint64(150e6 + float64(int(t)%15)*1e6)
	})
	r := summarize(s, 200, 600)
	if !r.Flat || r.Monotonic {
		t.Fatalf("want flat, got %+v", r)
	}
	if r.FirstBytes != 50e6 || r.MaxBytes < 150e6 {
		t.Fatalf("first/max: %+v", r)
	}
}

func TestSummarizeSlowLeak(t *testing.T) {
	// 4% over the last 400 s: under the 10% median rule, but monotonic.
	s := series(func(t float64) uint64 { return uint64(100e6 + t*10e3) })
	r := summarize(s, 200, 600)
	if r.Flat || !r.Monotonic {
		t.Fatalf("want monotonic growth, got %+v", r)
	}
}

func TestSummarizeStep(t *testing.T) {
	// A 20% jump in the last half.
	s := series(func(t float64) uint64 {
		if t > 450 {
			return 120e6
		}
		return 100e6
	})
	r := summarize(s, 200, 600)
	if r.Flat {
		t.Fatalf("want growth, got %+v", r)
	}
}

func TestReconciler(t *testing.T) {
	r := newReconciler()
	r.addClient("a", clientOutcome{kind: kindOK, status: 200})
	r.addProxy("a", proxyOutcome{outcome: "success", status: 200})
	r.addProxy("b", proxyOutcome{outcome: "failed", status: 502})
	r.addClient("b", clientOutcome{kind: "http_502", status: 502})
	r.addProxy("c", proxyOutcome{outcome: "success", status: 200})
	r.addClient("c", clientOutcome{kind: kindCut, status: 200})
	r.addClient("d", clientOutcome{kind: kindTransport})
	r.addProxy("e", proxyOutcome{outcome: "success", status: 200})
	if r.agree != 2 || r.disagree != 1 {
		t.Fatalf("agree %d disagree %d", r.agree, r.disagree)
	}
	if co, po := r.pending(); co != 1 || po != 1 {
		t.Fatalf("pending client %d proxy %d", co, po)
	}
}

func TestPromValues(t *testing.T) {
	text := []byte("# HELP x\nhone_bpf_ringbuf_dropped_events_total 3\nhone_target_table_overflows_total{a=\"b\"} 2\nhone_target_table_overflows_total{a=\"c\"} 1\n")
	v := promValues(text, metricNames(text, "drop")...)
	if v["hone_bpf_ringbuf_dropped_events_total"] != 3 {
		t.Fatal(v)
	}
	v = promValues(text, "hone_target_table_overflows_total")
	if v["hone_target_table_overflows_total"] != 3 {
		t.Fatal(v)
	}
}

func TestLiveHeapSeries(t *testing.T) {
	dir := t.TempDir()
	log := dir + "/p.log"
	text := "listening\n" +
		"gc 9 @18.380s 0%: 7.1+123+0.19 ms clock, 14+42/68/0+0.38 ms cpu, 339->340->208 MB, 353 MB goal, 6 MB stacks, 0 MB globals, 2 P\n" +
		"gc 10 @40.085s 0%: 1+2+3 ms clock, 1+2/3/4+5 ms cpu, 357->358->211 MB, 421 MB goal, 0 MB stacks, 0 MB globals, 2 P\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	s, goal := liveHeapSeries("p", log, 1, t0.Add(-2*time.Second), t0, 30)
	if len(s.Samples) != 2 || s.Samples[0].RSS != 208<<20 || s.Samples[1].T < 38.08 || s.Samples[1].T > 38.09 || goal != 421<<20 {
		t.Fatalf("%+v goal %d", s, goal)
	}
}
