package replay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// vllmExposition is /metrics as vLLM's prometheus_client writes it (text
// format 0.0.4): HELP and TYPE lines, _created gauges, two engines (data
// parallel), a model name whose label value holds escaped quotes, a brace
// and a backslash, and histograms whose _sum and _count are not counters.
const vllmExposition = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 8123.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="org/m \"q\" {x} \\ end"} 3.0
vllm:num_requests_running{engine="1",model_name="org/m \"q\" {x} \\ end"} 2.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="org/m \"q\" {x} \\ end"} 12000.0
vllm:prefix_cache_queries_total{engine="1",model_name="org/m \"q\" {x} \\ end"} 4000.5
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="org/m \"q\" {x} \\ end"} 1.7523e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="org/m \"q\" {x} \\ end"} 9000.0
vllm:prefix_cache_hits_total{engine="1",model_name="org/m \"q\" {x} \\ end"} 3000.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="org/m \"q\" {x} \\ end"} 10.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="org/m \"q\" {x} \\ end"} 5.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="org/m \"q\" {x} \\ end"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="org/m \"q\" {x} \\ end"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="org/m \"q\" {x} \\ end"} 12.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="org/m \"q\" {x} \\ end"} 15.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="org/m \"q\" {x} \\ end"} 15.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="org/m \"q\" {x} \\ end"} 3.25
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="org/m \"q\" {x} \\ end"} 1.7523e+09
# HELP vllm:request_prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:request_prompt_tokens_total counter
vllm:request_prompt_tokens_total{engine="0",model_name="org/m \"q\" {x} \\ end"} 2.5e+06
`

func TestParseCountersVLLMExposition(t *testing.T) {
	c := ParseCounters([]byte(vllmExposition))
	want := schema.Counters{
		"vllm:prefix_cache_queries_total":  16000.5,
		"vllm:prefix_cache_hits_total":     12000,
		"vllm:request_success_total":       15,
		"vllm:request_prompt_tokens_total": 2.5e6,
	}
	if len(c) != len(want) {
		t.Fatalf("got %v, want %v", c, want)
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %g, want %g", k, c[k], v)
		}
	}
	if h, q, ok := prefixCache(c); !ok || h != 12000 || q != 16000.5 {
		t.Errorf("prefix cache %g/%g %v", h, q, ok)
	}
	// Unquoted names, no HELP or TYPE, a timestamp: still read.
	c = ParseCounters([]byte("vllm:gpu_prefix_cache_hits 50 1700000000000\nvllm:gpu_prefix_cache_queries{engine=\"0\"} 100\n"))
	if c["vllm:gpu_prefix_cache_hits"] != 50 || c["vllm:gpu_prefix_cache_queries"] != 100 || len(c) != 2 {
		t.Errorf("old names: %v", c)
	}
}

// An exposition that does not parse is no reading at all, and the scrape
// says why.
func TestScrapeMalformed(t *testing.T) {
	const bad = "vllm:prefix_cache_hits_total{engine=\"0\" 5\nvllm:prefix_cache_queries_total 10\n"
	if c := ParseCounters([]byte(bad)); c != nil {
		t.Errorf("malformed exposition read as %v", c)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, bad)
	}))
	defer srv.Close()
	e := &engine{http: srv.Client(), base: srv.URL, model: "m"}
	c, err := e.scrape(context.Background())
	if c != nil || err == nil || !strings.Contains(err.Error(), "/metrics") {
		t.Errorf("scrape of a malformed exposition: %v, %v", c, err)
	}
}
