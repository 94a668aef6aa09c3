//go:build linux

package diagnose

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf/bpftest"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/replay"
)

// cliScenario is one kernel-evidence scenario run as a user runs it, every
// part a hone command: hone sim serve (profile qwen2.5-coder-0.5b-l4, its
// steps calling the test workload's fake libcuda in process, prefix
// caching and per-request metrics off), hone daemon --pid --http-ports
// with its defaults, hone replay (--runs 1) and hone diagnose report
// --daemon with its defaults (--evidence auto).
type cliScenario struct {
	name     string
	scale    float64  // the emulator's --time-scale
	serve    []string // more hone sim serve flags (--max-num-seqs ...)
	qps      string   // hone replay --qps
	requests int      // hone replay --requests (per level)
	replay   []string // more hone replay flags (--input-tokens ...)
}

// TestKernelEvidenceHeldBack is issue 43's held-back scenario: max-num-seqs
// 8, --qps 4,24, 40 requests a level (4096-token prompts, 128 tokens out:
// replay's defaults), at time scale 0.5 and 2. See runCLIScenario for what
// is asserted.
func TestKernelEvidenceHeldBack(t *testing.T) {
	requireAlone(t)
	for _, scale := range []float64{0.5, 2} {
		t.Run(fmt.Sprintf("time scale %g", scale), func(t *testing.T) {
			runCLIScenario(t, cliScenario{scale: scale, serve: []string{"--max-num-seqs", "8"}, qps: "4,24", requests: 40})
		})
	}
}

// TestKernelEvidenceCLIScenarios: more scenarios like the held-back one —
// in-process CUDA calls, max-num-seqs 4 to 16, rates from an idle engine
// to saturation, time scale 1 and 2, the token budget told to no one.
func TestKernelEvidenceCLIScenarios(t *testing.T) {
	requireAlone(t)
	for _, sc := range []cliScenario{
		// Four seats, 1k prompts in one step each, 32 tokens out: nearly
		// idle at 6 req/s, seats full at 60.
		{name: "seqs 4 short prompts", scale: 1, serve: []string{"--max-num-seqs", "4"}, qps: "6,60", requests: 32,
			replay: []string{"--input-tokens", "1024", "--output-tokens", "32"}},
		// Sixteen seats, 2k prompts, 48 tokens out, a 512-token budget:
		// every prefill chunked over four steps or more, decodes beside.
		{name: "seqs 16 chunked prefill", scale: 2, serve: []string{"--max-num-seqs", "16", "--max-num-batched-tokens", "512"},
			qps: "8,60", requests: 32, replay: []string{"--input-tokens", "2048", "--output-tokens", "48"}},
	} {
		t.Run(sc.name, func(t *testing.T) { runCLIScenario(t, sc) })
	}
}

// TestKernelEvidenceHoldout holds scenarios out of development: they are
// run once, to check the join and the split on what they were not tuned
// to, with HONE_KERNEL_HOLDOUT=1 (and the host alone, as the others).
func TestKernelEvidenceHoldout(t *testing.T) {
	requireAlone(t)
	if os.Getenv("HONE_KERNEL_HOLDOUT") != "1" {
		t.Skip("held out: HONE_KERNEL_HOLDOUT=1 runs it")
	}
	for _, sc := range []cliScenario{
		{name: "seqs 6 three levels", scale: 1, serve: []string{"--max-num-seqs", "6"}, qps: "2,10,40", requests: 32,
			replay: []string{"--input-tokens", "3000", "--output-tokens", "24"}},
		{name: "seqs 12 long answers", scale: 2, serve: []string{"--max-num-seqs", "12"}, qps: "6,48", requests: 40,
			replay: []string{"--input-tokens", "512", "--output-tokens", "96"}},
	} {
		t.Run(sc.name, func(t *testing.T) { runCLIScenario(t, sc) })
	}
}

// requireAlone skips unless the host is this test's alone, as
// TestKernelEvidenceScenarios does (make test-kernel-scenarios; the held-back
// scenario also in make test's second pass).
func requireAlone(t *testing.T) {
	t.Helper()
	bpftest.Require(t)
	if testing.Short() {
		t.Skip("starts an engine, the daemon and a replay")
	}
	if os.Getenv("HONE_TEST_ALONE") != "1" {
		t.Skip("runs with the host to itself: make test's second pass and make test-kernel-scenarios set HONE_TEST_ALONE=1")
	}
}

// runCLIScenario runs sc and asserts, against the emulator's trace:
//
//   - every measured request that joined its kernel evidence is split by
//     it (split_by kernel), and every other one is named in the report's
//     "unjoined" with a reason — none split by client timing;
//   - the join covers at least 95% of the measured requests; one the host
//     distorted (a step, its arrival or its delivery late by more than
//     half the tolerance, in model time) is excused while at most 10% are;
//   - per part (queueing, prefill, decode), at least 90% of the joined
//     requests the host did not distort are within max(5%, 1 ms model
//     time) of the truth; with fewer than 10 such requests (a host too
//     slow for the scale: at 0.5 on two cores nearly every step's launch
//     is late) it is not judged, and says so.
func runCLIScenario(t *testing.T, sc cliScenario) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	hone := honetest.Binary(t)
	_, libcuda := bpftest.Workload(t)
	dir := t.TempDir()
	start := func(name string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, hone, args...)
		log, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
		return cmd
	}
	port, api := freePort(t), freePort(t)
	trace := filepath.Join(dir, "trace.jsonl")
	scale := strconv.FormatFloat(sc.scale, 'g', -1, 64)
	engine := start("serve", append([]string{"sim", "serve", "--port", strconv.Itoa(port), "--profile", "qwen2.5-coder-0.5b-l4",
		"--cuda-lib", libcuda, "--no-enable-prefix-caching", "--time-scale", scale, "--trace-file", trace, "--log-level", "warn"}, sc.serve...)...)
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	honetest.WaitHealthy(t, url)
	start("daemon", "daemon", "--pid", strconv.Itoa(engine.Process.Pid), "--http-ports", strconv.Itoa(port),
		"--listen", "127.0.0.1:"+strconv.Itoa(api))
	snapshot := func() []byte {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(api) + "/v1/snapshot")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	// Ready: the daemon answers and has probed the engine's libcuda.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var s struct {
			CUDA struct {
				Libraries []struct{ Error string } `json:"libraries"`
			} `json:"cuda"`
		}
		if b := snapshot(); b != nil && json.Unmarshal(b, &s) == nil && len(s.CUDA.Libraries) > 0 {
			if e := s.CUDA.Libraries[0].Error; e != "" {
				t.Fatalf("libcuda: %s", e)
			}
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
			t.Fatalf("the daemon did not probe the engine's libcuda in 30 s:\n%s", b)
		}
	}
	t.Logf("engine and daemon ready after %v", time.Since(began).Round(time.Millisecond))
	rec := filepath.Join(dir, "rec.json")
	run := func(args ...string) []byte {
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, hone, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("hone %s: %v\n%s", strings.Join(args, " "), err, errb.String())
		}
		return out.Bytes()
	}
	run(append([]string{"replay", "--endpoint", url, "--model", "Qwen/Qwen2.5-Coder-0.5B-Instruct", "--qps", sc.qps,
		"--requests", strconv.Itoa(sc.requests), "--runs", "1", "--out", rec}, sc.replay...)...)
	r, err := replay.ReadRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	// Every request of the record crossed the engine once: wait for the
	// daemon's last reads to reach its maps.
	sent := 0
	for _, run := range r.Runs {
		for _, l := range run.Levels {
			sent += len(l.Requests)
		}
	}
	t.Logf("replay done after %v", time.Since(began).Round(time.Millisecond))
	var snap []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		snap = snapshot()
		k, err := ParseKernelEvidence(snap)
		if err != nil {
			t.Fatal(err)
		}
		answered := 0 // the last on a keep-alive connection stays open
		for _, x := range k.Exchanges {
			if x.Sends > 0 {
				answered++
			}
		}
		if answered >= sent || time.Now().After(deadline) {
			break
		}
	}
	snapPath := filepath.Join(dir, "snapshot.json")
	if err := os.WriteFile(snapPath, snap, 0o644); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Requests []Attribution   `json:"requests"`
		Unjoined []UnjoinedLevel `json:"unjoined"`
	}
	if err := json.Unmarshal(run("diagnose", "report", "--record", rec, "--daemon", snapPath, "-o", "json"), &rep); err != nil {
		t.Fatal(err)
	}

	// The truth, and how late the host ran each request.
	tb, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	truth, err := ReadTrace(bytes.NewReader(tb))
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseKernelEvidence(snap)
	if err != nil {
		t.Fatal(err)
	}
	late := hostLate(t, k.Exchanges, trace, sc.scale)

	measured := measuredOK(r)
	unjoined := map[string]string{}
	for _, l := range rep.Unjoined {
		for _, id := range l.IDs {
			unjoined[id] = fmt.Sprint(l.Reasons)
		}
	}
	within := func(got, want float64) bool { return math.Abs(got-want) <= max(0.05*want, 1) }
	parts := []string{Queueing, Prefill, Decode}
	ok := map[string]int{}
	var joined, judged, distorted, distortedUnjoined int
	for _, a := range rep.Requests {
		if a.SplitBy != "kernel" || a.Kernel == nil {
			t.Errorf("%s: split by %q without engine metrics, want the kernel split or unjoined", a.RequestID, a.SplitBy)
			continue
		}
		joined++
		if l := late["cmpl-"+a.RequestID]; l > 0.5 {
			distorted++
			continue
		}
		tr, found := truth[a.RequestID]
		if !found {
			t.Errorf("%s: no ground truth", a.RequestID)
			continue
		}
		judged++
		var line []string
		miss := false
		for _, k := range parts {
			w := within(a.Parts[k], tr[k])
			ok[k] += b2i(w)
			miss = miss || !w
			line = append(line, fmt.Sprintf("%s %.2f/%.2f", k, a.Parts[k], tr[k]))
		}
		if miss {
			t.Logf("%s (%g req/s): %s ms (kernel/truth), %d prefill steps, ± %v", a.RequestID, a.OfferedQPS, strings.Join(line, ", "),
				a.Kernel.Steps, a.Kernel.UncertaintyMs)
		}
	}
	for id, why := range unjoined {
		if late["cmpl-"+id] > 0.5 {
			distorted++
			distortedUnjoined++
		}
		t.Logf("%s: not joined: %s", id, why)
	}
	if joined+len(unjoined) != measured {
		t.Errorf("%d joined and %d named unjoined of %d measured requests", joined, len(unjoined), measured)
	}
	base := measured
	if distorted*10 <= measured {
		base -= distortedUnjoined // excused while few
	}
	chunks := ""
	if len(rep.Requests) > 0 && rep.Requests[0].Kernel != nil {
		chunks = rep.Requests[0].Kernel.ChunksFrom
	}
	var got []string
	for _, k := range parts {
		got = append(got, fmt.Sprintf("%s %d/%d", k, ok[k], judged))
	}
	t.Logf("joined %d of %d measured (%d host-distorted); within max(5%%, 1 ms) of the truth: %s; %s",
		joined, measured, distorted, strings.Join(got, ", "), chunks)
	if joined*100 < 95*base {
		t.Errorf("the join covers %d of %d measured requests (%d host-distorted excused); want at least 95%%", joined, base, measured-base)
	}
	if judged < 10 {
		t.Logf("%d requests the host did not distort: too few to judge the split's accuracy at time scale %g", judged, sc.scale)
		return
	}
	for _, k := range parts {
		if ok[k]*10 >= 9*judged {
			continue
		}
		// Under 90%. With many judged requests that is the verdict; with
		// few, misses a split right for 90% of requests would often show
		// (2 of 11: p = 0.30) do not decide it: it fails only when a 90%
		// split would show as many misses less than 1% of the time.
		misses := judged - ok[k]
		if p := binomialTail(judged, misses, 0.1); judged < minJudged && p >= 0.01 {
			t.Logf("%s within tolerance for %d of %d judged requests: under 90%%, but %d misses of %d happen with probability %.2f to a split right for 90%% of requests; too few to decide (fewer than %d judged)",
				k, ok[k], judged, misses, judged, p, minJudged)
			continue
		}
		t.Errorf("%s within tolerance for %d of %d judged requests; want at least 90%%", k, ok[k], judged)
	}
}

// minJudged is how many requests the host did not distort the 90% bar
// needs before a point share under it fails a scenario by itself.
const minJudged = 30

// binomialTail is P(X >= k) for X ~ Binomial(n, p).
func binomialTail(n, k int, p float64) float64 {
	sum := 0.0
	for i := k; i <= n; i++ {
		lg := func(x int) float64 { v, _ := math.Lgamma(float64(x) + 1); return v }
		sum += math.Exp(lg(n) - lg(i) - lg(n-i) + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
	}
	return sum
}

// hostLate is, per request (the engine's id, "cmpl-" + the record's), how
// late the host ran what its kernel split reads, in model ms: a step's
// launch or synchronize (readTruth); the engine's arrival reading after
// the kernel saw the request arrive on its socket (the receipt a split
// starts at); its first and last sends after the engine produced the
// first and last tokens — the last three beyond the shortest such lag of
// the run. Each request's exchange is the one received last before its
// arrival reading, within 50 ms.
func hostLate(t *testing.T, xs []KernelExchange, trace string, scale float64) map[string]float64 {
	t.Helper()
	trs, late := readTruth(t, trace, scale)
	out := maps.Clone(late)
	arrival, first, last := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for id, tr := range trs {
		k := sort.Search(len(xs), func(i int) bool { return xs[i].ReceivedNs > tr.ArrivalMono }) - 1
		if k < 0 || tr.ArrivalMono-xs[k].ReceivedNs > 50_000_000 || xs[k].Sends == 0 {
			out[id] = math.Inf(1) // no exchange to read: judged distorted
			continue
		}
		x := xs[k]
		arrival[id] = tr.ArrivalMono - x.ReceivedNs
		first[id] = x.FirstTokenNs(HeadWithFirstToken) - tr.FirstTokenMono
		last[id] = x.LastSendNs - tr.FinishMono
	}
	for _, byID := range []map[string]int64{arrival, first, last} {
		if len(byID) == 0 {
			continue
		}
		least := slices.Min(slices.Collect(maps.Values(byID)))
		for id, lag := range byID {
			out[id] = max(out[id], float64(lag-least)/1e6/scale)
		}
	}
	return out
}

// TestBinomialTail checks the held-back scenarios' small-sample rule
// against figures computed by hand.
func TestBinomialTail(t *testing.T) {
	for _, c := range []struct {
		n, k int
		want float64
	}{
		{11, 0, 1},
		{11, 2, 1 - math.Pow(0.9, 11) - 11*0.1*math.Pow(0.9, 10)}, // 0.3026
		{11, 11, math.Pow(0.1, 11)},
		{20, 21, 0},
	} {
		if got := binomialTail(c.n, c.k, 0.1); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("binomialTail(%d, %d, 0.1) = %.15f, want %.15f", c.n, c.k, got, c.want)
		}
	}
}
