package replay

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// FuzzParseCounters feeds Prometheus text expositions, as GET /metrics
// answers, to ParseCounters. Seeds: vLLM's exposition (vllmExposition,
// thinned), hone's emulator's (testdata/metrics/emulator-decode.prom,
// scraped from a disaggregated decode worker, thinned: a large seed makes
// the fuzzer minimize slowly) and the older engines' unsuffixed names. Properties:
//   - ParseCounters is nil exactly when the exposition does not parse;
//   - every counter it returns is a vllm: counter (name ending _total, or
//     one of the old unsuffixed prefix-cache names), finite and >= 0, so
//     that a record holding it writes as JSON and deltas between scrapes
//     mean something;
//   - a hit rate between two scrapes is nil or a finite number.
func FuzzParseCounters(f *testing.F) {
	emu, err := os.ReadFile("testdata/metrics/emulator-decode.prom")
	if err != nil {
		f.Fatal(err)
	}
	if ParseCounters(emu) == nil {
		f.Fatal("testdata/metrics/emulator-decode.prom does not parse")
	}
	f.Add(emu)
	// vllmExposition's shapes in a third of its size (the fuzzer minimizes
	// what a large seed turns up slowly): two engines, a label value with
	// escapes, a _created gauge beside its counter, a histogram.
	var vllm []string
	for _, l := range strings.Split(vllmExposition, "\n") {
		if strings.HasPrefix(l, "vllm:prefix_cache") || strings.Contains(l, "TYPE vllm:prefix_cache") ||
			strings.Contains(l, "vllm:time_to_first_token_seconds_") && !strings.Contains(l, `le="0.1"`) {
			vllm = append(vllm, l)
		}
	}
	f.Add([]byte(strings.Join(vllm, "\n") + "\n"))
	f.Add([]byte("vllm:gpu_prefix_cache_hits 50 1700000000000\nvllm:gpu_prefix_cache_queries{engine=\"0\"} 100\n"))
	f.Add([]byte("# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{engine=\"0\"} 1e3\nvllm:prefix_cache_hits_total{engine=\"0\",model_name=\"x\\\"y\"} 900\n"))
	f.Add([]byte("# TYPE vllm:request_prompt_tokens summary\nvllm:request_prompt_tokens{quantile=\"0.5\"} 3\nvllm:request_prompt_tokens_sum 7\nvllm:request_prompt_tokens_count 2\n"))
	f.Add([]byte("vllm:prefix_cache_hits_total{engine=\"0\" 5\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseCounters(b)
		pc := ParseCounters(b)
		if (err != nil) != (pc == nil) {
			t.Fatalf("ParseCounters %v, parse error %v", pc, err)
		}
		if err != nil {
			return
		}
		for name, v := range c {
			if !strings.HasPrefix(name, "vllm:") ||
				!strings.HasSuffix(name, "_total") && name != "vllm:gpu_prefix_cache_hits" && name != "vllm:gpu_prefix_cache_queries" {
				t.Fatalf("%q read as a counter", name)
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("counter %s = %v", name, v)
			}
			if pc[name] != v {
				t.Fatalf("counter %s: ParseCounters %v, parseCounters %v", name, pc[name], v)
			}
		}
		if r := HitRate(c, schema.Counters{"vllm:prefix_cache_hits_total": 1e6, "vllm:prefix_cache_queries_total": 2e6,
			"vllm:gpu_prefix_cache_hits": 1e6, "vllm:gpu_prefix_cache_queries": 2e6}); r != nil && (math.IsNaN(*r) || math.IsInf(*r, 0)) {
			t.Fatalf("hit rate %v", *r)
		}
	})
}
