package kubernetes

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// knownMetrics are the names hone's daemon exports (desc("name", ...) in
// daemon/*.go, each prefixed hone_ by desc) and the vLLM names hone knows
// (the ones its emulator serves under vLLM's names, sim/emulator/metrics.go).
func knownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	metrics, err := os.ReadFile("../../daemon/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(metrics), `prometheus.NewDesc("hone_"+name`) {
		t.Fatal(`daemon/metrics.go: desc no longer prefixes "hone_"; update this test`)
	}
	files, _ := filepath.Glob("../../daemon/*.go")
	descRE := regexp.MustCompile(`\bdesc\("([a-z0-9_]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range descRE.FindAllStringSubmatch(string(b), -1) {
			known["hone_"+m[1]] = true
		}
	}
	b, err := os.ReadFile("../../sim/emulator/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"(vllm:[a-z0-9_:]+)"`).FindAllStringSubmatch(string(b), -1) {
		known[m[1]] = true
	}
	if len(known) < 30 {
		t.Fatalf("found only %d metric names; the sources moved?", len(known))
	}
	return known
}

// promQL are the function, aggregation and keyword names the dashboard's
// queries may use besides metric names.
var promQL = map[string]bool{
	"sum": true, "max": true, "min": true, "avg": true, "count": true, "rate": true, "irate": true,
	"increase": true, "histogram_quantile": true, "label_values": true, "by": true, "without": true,
}

var (
	stripRE       = regexp.MustCompile(`"[^"]*"|\{[^}]*\}|\[[^\]]*\]|\b(by|without)\s*\([^)]*\)`)
	identRE       = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	labelValuesRE = regexp.MustCompile(`label_values\(([^,]+),[^)]*\)`)
)

// metricNames are the metric names of one query: identifiers outside
// label matchers, ranges and grouping clauses that are not PromQL's own.
func metricNames(expr string) []string {
	var out []string
	for _, id := range identRE.FindAllString(stripRE.ReplaceAllString(expr, " "), -1) {
		if !promQL[id] {
			out = append(out, id)
		}
	}
	return out
}

func TestDashboardMetrics(t *testing.T) {
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Name, Query string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	known := knownMetrics(t)
	used := map[string]bool{}
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: query %q names no metric", where, expr)
		}
		for _, n := range names {
			base := n
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if strings.HasPrefix(n, "vllm:") && strings.HasSuffix(n, suf) && known[strings.TrimSuffix(n, suf)] {
					base = strings.TrimSuffix(n, suf)
				}
			}
			if !known[base] {
				t.Errorf("%s: %q is not a metric hone's daemon or vLLM exports (query %q)", where, n, expr)
			}
			used[base] = true
		}
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Query != "prometheus" { // label_values(metric, label): the label is no metric
			check("variable "+v.Name, labelValuesRE.ReplaceAllString(v.Query, "$1"))
		}
	}
	// The brief's families are all there.
	for _, want := range []string{"hone_syscalls_total", "hone_socket_bytes_total", "hone_kv_transfer_burst_seconds_total",
		"hone_cuda_calls_total", "hone_gpu_power_watts", "hone_gpu_energy_joules_total", "hone_gpu_utilization_ratio",
		"vllm:num_requests_running", "vllm:time_to_first_token_seconds"} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

func TestMetricNames(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (le) (rate(vllm:x_bucket{a="b"}[$__rate_interval]))) / sum without (pod) (hone_y)`)
	if strings.Join(got, " ") != "vllm:x_bucket hone_y" {
		t.Errorf("metricNames = %q", got)
	}
}
