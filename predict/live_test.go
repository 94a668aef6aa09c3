package predict

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

var (
	live      = flag.Bool("live", false, "check predictions against live emulator deployments: 12 configs × 2 profiles at time scale 1 (about 25 minutes; make test-consistency)")
	liveScale = flag.Float64("live-scale", 1, "time scale of the -live deployments: the issue's check is at 1; at S the host's delays shrink S-fold in model time (and the check takes S times as long)")
)

// liveTolerance is the bound on the relative difference between a
// predicted figure and the measured median.
const liveTolerance = 0.05

// liveCase is one deployment of the agreement check: the spec's topology,
// knobs and routing, and the one offered rate it is replayed at.
type liveCase struct {
	name     string
	topology string
	knobs    string
	routing  string
	qps      float64
}

// liveCases cover the engine's and the proxy's decisions: data and tensor
// parallelism, P/D handoff with either pool larger, no prefix cache (every
// prompt prefilled whole), CUDA-graph-less steps, a batch limit that queues
// (max_num_seqs 2 saturates both profiles at 32 req/s) and a token budget
// that chunks every measured prefill. Each is one level: at time scale 1 a
// level's warm-up alone is 16 s of wall time (replay.MeasureStartMillis).
var liveCases = []liveCase{
	{"dp1-tp1", "{kind: colocated, replicas: 1, tp: 1}", "", deploy.SessionAffinity, 16},
	{"dp1-tp2", "{kind: colocated, replicas: 1, tp: 2}", "", deploy.SessionAffinity, 16},
	{"dp2-tp1-affinity", "{kind: colocated, replicas: 2, tp: 1}", "", deploy.SessionAffinity, 32},
	{"dp2-tp1-round-robin", "{kind: colocated, replicas: 2, tp: 1}", "", deploy.RoundRobin, 32},
	{"dp2-tp2", "{kind: colocated, replicas: 2, tp: 2}", "", deploy.SessionAffinity, 32},
	{"1p1d", "{kind: disaggregated, prefill: {replicas: 1, tp: 1}, decode: {replicas: 1, tp: 1}}", "", deploy.SessionAffinity, 16},
	{"1p2d", "{kind: disaggregated, prefill: {replicas: 1, tp: 1}, decode: {replicas: 2, tp: 1}}", "", deploy.SessionAffinity, 32},
	{"2p1d", "{kind: disaggregated, prefill: {replicas: 2, tp: 1}, decode: {replicas: 1, tp: 1}}", "", deploy.SessionAffinity, 32},
	{"no-prefix-cache", "{kind: colocated, replicas: 1, tp: 1}", "prefix_caching: false", deploy.SessionAffinity, 8},
	{"eager", "{kind: colocated, replicas: 1, tp: 1}", "enforce_eager: true", deploy.SessionAffinity, 16},
	{"max-num-seqs-2", "{kind: colocated, replicas: 1, tp: 1}", "max_num_seqs: 2", deploy.SessionAffinity, 32},
	{"batched-tokens-64", "{kind: colocated, replicas: 1, tp: 1}", "max_num_batched_tokens: 64", deploy.SessionAffinity, 16},
}

// liveProfiles differ in kind: the L4 is memory-bound (6.5 ms decode
// steps, prefill of a 4k prompt ~88 ms, KV over PCIe), the H200 has 1.4 ms
// steps, ~20 ms cold prefills and NVLink transfers.
var liveProfiles = []string{"qwen2.5-coder-0.5b-l4", "qwen2.5-coder-0.5b-h200"}

// liveWorkload is small enough that a level at 8-32 req/s ends within a
// few seconds of its 16 s warm-up.
var liveWorkload = schema.Workload{Seed: 1, Requests: 64, InputTokens: 4096, UncachedTokens: 128, OutputTokens: 64}

// liveSpec is c on profile at time scale scale, on loopback ports from
// base: the proxy, up to four workers, then the NIXL side-channel ports.
func liveSpec(t testing.TB, c liveCase, profile string, scale float64, base int) *deploy.Spec {
	t.Helper()
	kv := ""
	if strings.Contains(c.topology, deploy.Disaggregated) {
		kv = fmt.Sprintf("kv_connector: {name: NixlConnector, side_channel_port: %d}\n", base+5)
	}
	knobs := "max_model_len: 8192"
	if c.knobs != "" {
		knobs += ", " + c.knobs
	}
	y := fmt.Sprintf(`name: live-%s
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct, revision: emulated}
gpus: {budget: 4}
topology: %s
%sknobs: {%s}
routing: {policy: %s}
network: {proxy_port: %d, worker_port: %d}
emulator: {profile: %s, time_scale: %g}
`, c.name, c.topology, kv, knobs, c.routing, base, base+1, profile, scale)
	s, err := deploy.ParseSpec([]byte(y))
	if err != nil {
		t.Fatalf("%s: %v\n%s", c.name, err, y)
	}
	return s
}

// liveReplay deploys s (emulated workers and hone's proxy), replays w at
// qps for runs passes with replay.Run, and returns the record with the
// proxy's timeline of every request, by request id.
func liveReplay(t *testing.T, ctx context.Context, s *deploy.Spec, w schema.Workload, qps float64, runs int) (*schema.Record, map[string]proxy.Timeline) {
	t.Helper()
	return liveReplayLoad(t, ctx, s, w, []float64{qps}, nil, runs)
}

// liveReplayLoad is liveReplay at open-loop rates qps or, instead,
// closed-loop clients.
func liveReplayLoad(t *testing.T, ctx context.Context, s *deploy.Spec, w schema.Workload, qps []float64, clients []int, runs int) (*schema.Record, map[string]proxy.Timeline) {
	t.Helper()
	d, err := deploy.Up(ctx, s, deploy.UpOptions{StateDir: t.TempDir(), Hone: honetest.Binary(t), Owned: true,
		HealthTimeout: 60 * time.Second, Grace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Down(2 * time.Second)
	rec, err := replay.Run(ctx, replay.Options{Endpoint: d.ProxyURL(), Model: s.ServedName(), Kind: schema.KindEmulated,
		Backend: "emulator", Workload: w, QPS: qps, Concurrency: clients, Runs: runs, SLO: slo.Default, TimeScale: s.Emulator.TimeScale,
		GPUs: s.GPUsNeeded(), CachedTokensReported: true})
	if err != nil {
		t.Fatal(err)
	}
	tls := map[string]proxy.Timeline{}
	for since := uint64(0); ; {
		page, err := proxy.FetchTimelines(ctx, d.ProxyURL(), since)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range page.Timelines {
			tls[tl.RequestID] = tl
		}
		if len(page.Timelines) == 0 || page.Next == since {
			break
		}
		since = page.Next
	}
	if err := d.Down(5 * time.Second); err != nil {
		t.Errorf("deploy down: %v", err)
	}
	return rec, tls
}

// engineTiming is a measured request's TTFT and TPOT by the engines'
// clocks (model ms), from vLLM's per-request metrics: colocated, the
// worker's e2e_time_ms − generation_time_ms, its receipt to its first
// token (the profile's frontend_ms, the queue and the first step);
// disaggregated, the same at the decode worker (whose queue holds the KV
// pull) plus the prefill leg's e2e_time_ms (the prefill worker's receipt
// to its one token, from the proxy's timeline). TPOT is
// generation_time_ms / (tokens − 1). Both leave out the client's and the
// proxy's HTTP hops, which a prediction does not model. Queue, First and
// KV are the serving (colocated or decode) engine's queue_time_ms,
// time_to_first_token_ms and kv_transfer_time_ms, which say where a
// difference in TTFT lies.
type engineTiming struct {
	TTFT, TPOT       float64
	Queue, First, KV float64
}

func engineTimes(q *schema.RequestRecord, tl proxy.Timeline) (engineTiming, error) {
	var dec emulator.RequestMetrics
	if err := json.Unmarshal(q.EngineMetrics, &dec); err != nil || len(q.EngineMetrics) == 0 {
		return engineTiming{}, fmt.Errorf("request %d: no engine metrics in the usage chunk (%v)", q.ID, err)
	}
	if q.OutputTokens < 2 {
		return engineTiming{}, fmt.Errorf("request %d: %d output tokens", q.ID, q.OutputTokens)
	}
	e := engineTiming{TTFT: dec.E2ETimeMs - dec.GenerationTimeMs, TPOT: dec.GenerationTimeMs / float64(q.OutputTokens-1),
		Queue: dec.QueueTimeMs, First: dec.TimeToFirstTokenMs, KV: dec.KVTransferTimeMs}
	if len(tl.Prefill) > 0 {
		leg := tl.Prefill[len(tl.Prefill)-1]
		var pre emulator.RequestMetrics
		if err := json.Unmarshal(leg.EngineMetrics, &pre); err != nil || len(leg.EngineMetrics) == 0 {
			return engineTiming{}, fmt.Errorf("request %d: no engine metrics from prefill worker %s (%v)", q.ID, leg.Worker, err)
		}
		e.TTFT += pre.E2ETimeMs
	}
	return e, nil
}

// liveFigures are one config's figures: predicted, or the medians of the
// valid runs' figures.
type liveFigures struct {
	// TTFT and TPOT are p50s (nearest rank over the measured requests);
	// measured, by the engines' clocks (engineTiming).
	TTFT, TPOT float64
	// Queue, First and KV are p50s of the serving engine's queue_time_ms,
	// time_to_first_token_ms and kv_transfer_time_ms (engineTiming).
	Queue, First, KV float64
	// ClientTTFT and ClientTPOT are the replay client's p50s, which add
	// the host: dispatch, the client's and the proxy's hops.
	ClientTTFT, ClientTPOT float64
	// HostTTFT is the median over requests of client TTFT − engine TTFT.
	HostTTFT  float64
	Objective float64
	Runs      int // valid runs measured
}

// predictedFigures reads a prediction's figures; its engine metrics are
// the serving engine's, as a live answer's are.
func predictedFigures(t *testing.T, rec *schema.Record) liveFigures {
	t.Helper()
	l := rec.Runs[0].Levels[0]
	var queue, first, kv []float64
	for _, q := range l.Requests[replay.Sessions:] {
		var m emulator.RequestMetrics
		if err := json.Unmarshal(q.EngineMetrics, &m); err != nil {
			t.Fatalf("predicted request %d: engine metrics: %v", q.ID, err)
		}
		queue, first, kv = append(queue, m.QueueTimeMs), append(first, m.TimeToFirstTokenMs), append(kv, m.KVTransferTimeMs)
	}
	return liveFigures{TTFT: l.P50TTFTMs, TPOT: l.P50TPOTMs, Queue: slo.NearestRank(queue, 50), First: slo.NearestRank(first, 50),
		KV: slo.NearestRank(kv, 50), ClientTTFT: l.P50TTFTMs, ClientTPOT: l.P50TPOTMs, Objective: rec.Runs[0].Objective, Runs: 1}
}

// levelFigures are one live level's p50s: by the engines' clocks
// (engineTiming), the client's, and the median host floor.
func levelFigures(t *testing.T, l *schema.LevelRecord, tls map[string]proxy.Timeline) liveFigures {
	t.Helper()
	var ttft, tpot, queue, first, kv, host []float64
	for i := range l.Requests {
		q := &l.Requests[i]
		if q.ID < replay.Sessions || q.Outcome != schema.OutcomeOK {
			continue
		}
		e, err := engineTimes(q, tls[q.RequestID])
		if err != nil {
			t.Fatal(err)
		}
		ttft, tpot, queue, first = append(ttft, e.TTFT), append(tpot, e.TPOT), append(queue, e.Queue), append(first, e.First)
		kv, host = append(kv, e.KV), append(host, *q.TTFTMs-e.TTFT)
	}
	if len(ttft) == 0 {
		t.Fatalf("%g req/s: no measured request completed", l.OfferedQPS)
	}
	return liveFigures{TTFT: slo.NearestRank(ttft, 50), TPOT: slo.NearestRank(tpot, 50), Queue: slo.NearestRank(queue, 50),
		First: slo.NearestRank(first, 50), KV: slo.NearestRank(kv, 50), ClientTTFT: l.P50TTFTMs, ClientTPOT: l.P50TPOTMs, HostTTFT: slo.Median(host), Runs: 1}
}

// measuredFigures are the medians over the record's valid runs of their
// figures (the record has one level per run).
func measuredFigures(t *testing.T, rec *schema.Record, tls map[string]proxy.Timeline) liveFigures {
	t.Helper()
	var ttft, tpot, queue, first, kv, cttft, ctpot, host, obj []float64
	for _, run := range rec.Runs {
		if !run.Verdict.Valid {
			t.Logf("run %d left out: %v", run.Run+1, run.Verdict.Reasons)
			continue
		}
		f := levelFigures(t, &run.Levels[0], tls)
		ttft, tpot, queue, first = append(ttft, f.TTFT), append(tpot, f.TPOT), append(queue, f.Queue), append(first, f.First)
		cttft, ctpot, host = append(cttft, f.ClientTTFT), append(ctpot, f.ClientTPOT), append(host, f.HostTTFT)
		kv, obj = append(kv, f.KV), append(obj, run.Objective)
	}
	if len(obj) == 0 {
		t.Fatalf("no valid run: %v", rec.InvalidLevels())
	}
	return liveFigures{TTFT: slo.Median(ttft), TPOT: slo.Median(tpot), Queue: slo.Median(queue), First: slo.Median(first), KV: slo.Median(kv),
		ClientTTFT: slo.Median(cttft), ClientTPOT: slo.Median(ctpot), HostTTFT: slo.Median(host), Objective: slo.Median(obj), Runs: len(obj)}
}

// liveHops are the delays a live run's requests had that a prediction
// leaves out (Options.Hops), by request id, in model ms: from the
// scheduled send to the proxy's send of the first leg (the client's
// lateness and its hop to the proxy), and, disaggregated, from the prefill
// worker's end (the proxy's send of the prefill leg plus the worker's
// e2e_time_ms) to the proxy's send of the decode leg. The proxy's hop to a
// worker stays out: it is a few hundred microseconds of wall time.
func liveHops(t *testing.T, l *schema.LevelRecord, tls map[string]proxy.Timeline, scale float64) map[int][2]float64 {
	t.Helper()
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 / scale }
	hops := map[int][2]float64{}
	for i := range l.Requests {
		q := &l.Requests[i]
		tl, ok := tls[q.RequestID]
		if !ok || tl.Decode == nil {
			continue
		}
		first := tl.Decode.Sent
		decode := 0.0
		if len(tl.Prefill) > 0 {
			leg := tl.Prefill[len(tl.Prefill)-1]
			first = leg.Sent
			var pre emulator.RequestMetrics
			if err := json.Unmarshal(leg.EngineMetrics, &pre); err != nil {
				t.Fatalf("request %d: prefill worker's metrics: %v", q.ID, err)
			}
			decode = ms(tl.Decode.Sent.Sub(leg.Sent)) - pre.E2ETimeMs
		}
		hops[q.ID] = [2]float64{ms(first.Sub(q.Scheduled)), decode}
	}
	return hops
}

// predictLikeRuns predicts s once per valid run of rec, each with that
// run's own hops (liveHops), and returns the medians of their figures, as
// measuredFigures takes the medians of the runs'.
func predictLikeRuns(t *testing.T, s *deploy.Spec, w schema.Workload, qps float64, rec *schema.Record, tls map[string]proxy.Timeline) liveFigures {
	t.Helper()
	var figs []liveFigures
	for _, run := range rec.Runs {
		if !run.Verdict.Valid {
			continue
		}
		hops := liveHops(t, &run.Levels[0], tls, rec.TimeScale)
		pred, err := Run(s, Options{Workload: w, QPS: []float64{qps}, SLO: slo.Default, KeepRequests: true,
			Hops: func(_ float64, id int) Hop { h := hops[id]; return Hop{ArriveMs: h[0], DecodeHopMs: h[1]} }})
		if err != nil {
			t.Fatal(err)
		}
		f := predictedFigures(t, pred)
		// The engines' TTFT, as engineTimes reads it live: from the
		// first worker's receipt, without the proxy's hop between legs.
		var ttft []float64
		for _, q := range pred.Runs[0].Levels[0].Requests[replay.Sessions:] {
			ttft = append(ttft, *q.TTFTFromSentMs-max(hops[q.ID][1], 0))
		}
		f.TTFT = slo.NearestRank(ttft, 50)
		figs = append(figs, f)
	}
	if len(figs) == 0 {
		t.Fatalf("no valid run: %v", rec.InvalidLevels())
	}
	med := func(f func(liveFigures) float64) float64 {
		var v []float64
		for _, x := range figs {
			v = append(v, f(x))
		}
		return slo.Median(v)
	}
	return liveFigures{TTFT: med(func(f liveFigures) float64 { return f.TTFT }), TPOT: med(func(f liveFigures) float64 { return f.TPOT }),
		Queue: med(func(f liveFigures) float64 { return f.Queue }), First: med(func(f liveFigures) float64 { return f.First }),
		KV: med(func(f liveFigures) float64 { return f.KV }), ClientTTFT: med(func(f liveFigures) float64 { return f.ClientTTFT }),
		ClientTPOT: med(func(f liveFigures) float64 { return f.ClientTPOT }), Objective: med(func(f liveFigures) float64 { return f.Objective }),
		Runs: len(figs)}
}

// liveRetryScale is how much slower a config is deployed again when its
// runs at -live-scale were emulator_bound: the modelled link's bytes then
// have that many times longer to cross loopback.
const liveRetryScale = 4

// onlyEmulatorBound reports whether rec has fewer than replay.MinValidRuns
// valid runs and every invalid level is emulator_bound alone.
func onlyEmulatorBound(rec *schema.Record) bool {
	valid := 0
	for _, run := range rec.Runs {
		if run.Verdict.Valid {
			valid++
			continue
		}
		for _, l := range run.Levels {
			for _, r := range l.Verdict.Reasons {
				if r.Code != schema.ReasonEmulatorBound {
					return false
				}
			}
		}
	}
	return valid < replay.MinValidRuns
}

// relErr is (predicted − measured) / measured; 0 when both are 0.
func relErr(pred, meas float64) float64 {
	if pred == meas {
		return 0
	}
	return (pred - meas) / meas
}

// predictedRoutes is, for each request of a level at qps, the workers the
// prediction sends it to ("replica-1", or "prefill-0>decode-1"), by the
// same routing Run uses.
func predictedRoutes(t *testing.T, s *deploy.Spec, w schema.Workload, qps float64) []string {
	t.Helper()
	prof, err := emulator.LookupProfile(s.Emulator.Profile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clusterOf(s, prof)
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := promptsFor(w)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := replay.Generate(replay.ParamsOf(w, qps))
	if err != nil {
		t.Fatal(err)
	}
	r := newRouter(c)
	out := make([]string, len(reqs))
	for i, q := range reqs {
		ids := prompts.Prompt(0, qps, q)
		vr := emulator.VirtualRequest{Prompt: ids, Decode: -1, Shared: sessionNames[q.Session%len(sessionNames)],
			SharedLen: min(w.CachedTokens(), len(ids))}
		r.route(&vr)
		out[i] = c.names[vr.Worker]
		if vr.Decode >= 0 {
			out[i] += ">" + c.names[vr.Decode]
		}
	}
	return out
}

// liveRoute is the workers the proxy sent a request to, spelled as
// predictedRoutes spells them.
func liveRoute(tl proxy.Timeline) string {
	if tl.Decode == nil {
		return ""
	}
	if len(tl.Prefill) > 0 {
		return tl.Prefill[len(tl.Prefill)-1].Worker + ">" + tl.Decode.Worker
	}
	return tl.Decode.Worker
}

// checkDecisions asserts, request by request and run by run, what the
// model decides whatever the host's timing: the same prompt (by hash; each
// run's own suffixes), every request answered in full, the same prompt
// tokens taken from the prefix cache, and the same workers. Round robin
// depends on the order requests reach the proxy, which also forwards the
// replay's own GET /version, /v1/models and /tokenize round robin: there
// the live assignment must be the predicted one up to a relabelling of
// the workers (which are identical).
func checkDecisions(t *testing.T, s *deploy.Spec, w schema.Workload, qps float64, pred, rec *schema.Record, tls map[string]proxy.Timeline) {
	t.Helper()
	prompts, err := promptsFor(w)
	if err != nil {
		t.Fatal(err)
	}
	reqs, _ := replay.Generate(replay.ParamsOf(w, qps))
	routes := predictedRoutes(t, s, w, qps)
	pl := pred.Runs[0].Levels[0]
	for _, run := range rec.Runs {
		l := run.Levels[0]
		if len(l.Requests) != len(reqs) {
			t.Fatalf("run %d: %d requests recorded, want %d", run.Run+1, len(l.Requests), len(reqs))
		}
		relabel := map[string]string{}
		taken := map[string]string{}
		for i := range l.Requests {
			q, p := &l.Requests[i], &pl.Requests[i]
			tl, ok := tls[q.RequestID]
			if !ok {
				t.Fatalf("run %d, request %d: no proxy timeline for %s", run.Run+1, q.ID, q.RequestID)
			}
			switch {
			case q.PromptSHA256 != replay.HashTokens(prompts.Prompt(run.Run, qps, reqs[i])):
				t.Errorf("run %d, request %d: the replay sent another prompt than the prediction's", run.Run+1, q.ID)
			case q.Outcome != schema.OutcomeOK || !q.Valid || tl.Outcome != proxy.OutcomeSuccess:
				t.Errorf("run %d, request %d: outcome %s (%s %s), proxy %s %s", run.Run+1, q.ID, q.Outcome, q.Invalid, q.Error, tl.Outcome, tl.Error)
			case q.OutputTokens != w.OutputTokens || p.OutputTokens != w.OutputTokens:
				t.Errorf("run %d, request %d: %d output tokens live, %d predicted, want %d", run.Run+1, q.ID, q.OutputTokens, p.OutputTokens, w.OutputTokens)
			case q.CachedTokens == nil || q.PromptTokens == nil || *q.CachedTokens != *p.CachedTokens || *q.PromptTokens != *p.PromptTokens:
				t.Errorf("run %d, request %d: cached %v of %v prompt tokens live, %d of %d predicted", run.Run+1, q.ID,
					fmtPtr(q.CachedTokens), fmtPtr(q.PromptTokens), *p.CachedTokens, *p.PromptTokens)
			}
			got := liveRoute(tl)
			if s.Routing.Policy != deploy.RoundRobin {
				if got != routes[i] {
					t.Errorf("run %d, request %d (session %d): the proxy sent it to %s, the prediction to %s", run.Run+1, q.ID, q.Session, got, routes[i])
				}
				continue
			}
			if want, ok := relabel[routes[i]]; ok && want != got || !ok && taken[got] != "" {
				t.Errorf("run %d, request %d: round robin sent it to %s; the prediction's assignment, relabelled %v, does not map onto the proxy's",
					run.Run+1, q.ID, got, relabel)
			}
			relabel[routes[i]], taken[got] = got, routes[i]
		}
	}
}

func fmtPtr(p *int) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// TestPredictionMatchesLiveEmulator is the agreement check: for 12
// configs on two profiles, each deployed for real (hone sim serve workers
// behind hone's proxy, deploy.Up) at time scale 1 and replayed three
// times with replay.Run, the prediction (Run, virtual time) is within 5%
// of the medians over the valid runs of:
//
//   - p50 TTFT and p50 TPOT by the engines' clocks (engineTiming): from
//     the serving engines' per-request metrics, which the emulator reports
//     as vLLM does, in model time. The client's own TTFT adds what a
//     prediction does not model: the client's dispatch and the HTTP hops
//     client → proxy → worker and back (and, disaggregated, the proxy's
//     hop between the legs), a floor of a few milliseconds at time scale 1
//     that is a large part of a TTFT of a few ms. The table shows the
//     client's p50s beside the engines' and the floor (client − engine
//     TTFT, median over requests), but asserts the engines' figures;
//   - the objective (the largest effective QPS of a passing level, from
//     the client's records: the host's floor moves a window of seconds by
//     milliseconds).
//
// The prompts, arrival schedule, routing and engine decisions are shared;
// checkDecisions asserts that the decisions agree request by request.
// The prediction asserted is made once per valid run with that run's own
// hops (liveHops: the client's lateness and its hop to the proxy, the
// proxy's hop between the legs), which no model of the deployment can
// know in advance and which decide where within a step a request reaches
// its engine; the table shows the prediction from the schedule alone
// beside it. A config whose runs are emulator_bound (this host could not
// carry the modelled link's KV bytes in time, and said so) is deployed
// again at liveRetryScale times the time scale, and the table says at
// which scale each row was measured. The
// engines' step clocks do not drift (a step starts at the previous one's
// modelled end), a step lasts what the profile says, and an engine takes a
// request in the profile's frontend_ms after its receipt in wall and in
// virtual time alike, so TPOT and the serving engine's
// time_to_first_token_ms (first scheduled → first token) carry no host
// time. The engines' TTFT still carries some, wherever a live engine waits
// on the host rather than on the model: the hops' jitter spreads where
// within a step requests reach their engine, which in virtual time, with
// exactly periodic arrivals, is a fixed pattern (a p50 just before a step
// boundary there can move by up to a step: hence the runs' own hops);
// and a KV pull ends when its bytes have really crossed the side channel,
// if that is later than its modelled end (transfer.go), as it can be for
// a fast link's model at time scale 1 (the emulator_bound verdict). Both
// shrink in model time at a larger time scale (-live-scale);
// the table's queue, first and KV columns (the serving engine's
// queue_time_ms, time_to_first_token_ms and kv_transfer_time_ms) show
// where a TTFT difference lies.
//
// Run with -live (make test-consistency): about 25 minutes, sequentially
// (each level spends 16 s of wall time on its warm-up at time scale 1).
func TestPredictionMatchesLiveEmulator(t *testing.T) {
	if !*live {
		t.Skip("run with -live (make test-consistency): 24 live deployments at time scale 1, about 25 minutes")
	}
	type row struct {
		profile, config   string
		qps, scale        float64
		sched, pred, meas liveFigures
	}
	var rows []row
	for _, p := range liveProfiles {
		for _, c := range liveCases {
			t.Run(strings.TrimPrefix(p, "qwen2.5-coder-0.5b-")+"/"+c.name, func(t *testing.T) {
				ports := honetest.FreePorts(t, 10)
				s := liveSpec(t, c, p, *liveScale, ports)
				pred, err := Run(s, Options{Workload: liveWorkload, QPS: []float64{c.qps}, SLO: slo.Default, KeepRequests: true})
				if err != nil {
					t.Fatal(err)
				}
				var rec *schema.Record
				var tls map[string]proxy.Timeline
				for _, scale := range []float64{*liveScale, liveRetryScale * *liveScale} {
					s = liveSpec(t, c, p, scale, ports)
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5*max(1, scale))*time.Minute)
					rec, tls = liveReplay(t, ctx, s, liveWorkload, c.qps, 3)
					cancel()
					if !onlyEmulatorBound(rec) {
						break
					}
					t.Logf("time scale %g: fewer than %d valid runs, every invalid one emulator_bound (%v): this host cannot keep the modelled link",
						scale, replay.MinValidRuns, rec.InvalidLevels())
				}
				checkDecisions(t, s, liveWorkload, c.qps, pred, rec, tls)
				r := row{profile: p, config: c.name, qps: c.qps, scale: rec.TimeScale, sched: predictedFigures(t, pred),
					pred: predictLikeRuns(t, s, liveWorkload, c.qps, rec, tls), meas: measuredFigures(t, rec, tls)}
				rows = append(rows, r)
				for _, f := range []struct {
					name       string
					pred, meas float64
				}{{"p50 TTFT", r.pred.TTFT, r.meas.TTFT}, {"p50 TPOT", r.pred.TPOT, r.meas.TPOT}, {"objective", r.pred.Objective, r.meas.Objective}} {
					if e := relErr(f.pred, f.meas); math.Abs(e) > liveTolerance {
						t.Errorf("%s: predicted %.4g, measured %.4g (median of %d runs): %+.1f%%, beyond %.0f%%",
							f.name, f.pred, f.meas, r.meas.Runs, 100*e, 100*liveTolerance)
					}
				}
				t.Logf("time scale %g; TTFT %.3f (schedule alone %.3f)/%.3f TPOT %.3f/%.3f objective %.3f/%.3f (predicted/measured); client TTFT %.3f TPOT %.3f, host floor %.3f; serving engine queue %.3f/%.3f, first step %.3f/%.3f, KV transfer %.3f/%.3f",
					r.scale, r.pred.TTFT, r.sched.TTFT, r.meas.TTFT, r.pred.TPOT, r.meas.TPOT, r.pred.Objective, r.meas.Objective,
					r.meas.ClientTTFT, r.meas.ClientTPOT, r.meas.HostTTFT, r.pred.Queue, r.meas.Queue, r.pred.First, r.meas.First, r.pred.KV, r.meas.KV)
			})
		}
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "profile\tconfig\treq/s\tscale\truns\tTTFT sched\terr\tTTFT pred\tTTFT engine\terr\tTPOT pred\tTPOT engine\terr\tobj pred\tobj meas\terr\t"+
		"TTFT client\terr\tTPOT client\terr\thost floor\tqueue pred\tqueue engine\tfirst pred\tfirst engine\tKV pred\tKV engine\t")
	maxErr := map[string]float64{}
	for _, r := range rows {
		e := map[string]float64{
			"TTFT": relErr(r.pred.TTFT, r.meas.TTFT), "schedule TTFT": relErr(r.sched.TTFT, r.meas.TTFT), "TPOT": relErr(r.pred.TPOT, r.meas.TPOT), "objective": relErr(r.pred.Objective, r.meas.Objective),
			"client TTFT": relErr(r.pred.TTFT, r.meas.ClientTTFT), "client TPOT": relErr(r.pred.TPOT, r.meas.ClientTPOT),
		}
		for k, v := range e {
			if math.Abs(v) > math.Abs(maxErr[k]) {
				maxErr[k] = v
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%g\t%g\t%d\t%.3f\t%+.1f%%\t%.3f\t%.3f\t%+.1f%%\t%.3f\t%.3f\t%+.1f%%\t%.2f\t%.2f\t%+.1f%%\t%.3f\t%+.1f%%\t%.3f\t%+.1f%%\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n",
			strings.TrimPrefix(r.profile, "qwen2.5-coder-0.5b-"), r.config, r.qps, r.scale, r.meas.Runs,
			r.sched.TTFT, 100*e["schedule TTFT"], r.pred.TTFT, r.meas.TTFT, 100*e["TTFT"], r.pred.TPOT, r.meas.TPOT, 100*e["TPOT"],
			r.pred.Objective, r.meas.Objective, 100*e["objective"],
			r.meas.ClientTTFT, 100*e["client TTFT"], r.meas.ClientTPOT, 100*e["client TPOT"], r.meas.HostTTFT,
			r.pred.Queue, r.meas.Queue, r.pred.First, r.meas.First, r.pred.KV, r.meas.KV)
	}
	tw.Flush()
	t.Logf("predicted vs measured (model ms; errors are (predicted − measured) / measured; engine: by the engines' per-request metrics):\n%s", b.String())
	t.Logf("largest errors: TTFT %+.1f%%, TPOT %+.1f%%, objective %+.1f%% (asserted within %.0f%%); TTFT predicted from the schedule alone %+.1f%%, client TTFT %+.1f%%, client TPOT %+.1f%% (not asserted)",
		100*maxErr["TTFT"], 100*maxErr["TPOT"], 100*maxErr["objective"], 100*liveTolerance, 100*maxErr["schedule TTFT"], 100*maxErr["client TTFT"], 100*maxErr["client TPOT"])
}

// TestLiveEmulatorDecidesAsPredicted is the short form of
// TestPredictionMatchesLiveEmulator that `make test` runs: two configs
// (colocated DP2 with session affinity, 1P1D) on the L4 profile, deployed
// at time scale 1 and replayed once with a small workload, side by side,
// against their predictions. It asserts what holds on a busy host (make
// test-loaded): exactly, what the model decides (checkDecisions: the same
// prompts, full answers, the same cached tokens and the same workers,
// request by request), and that the prediction's own per-request engine
// metrics give its TTFT and TPOT (what the long check compares live
// engine metrics with); one-sidedly, the figures the host's timing moves,
// which host delay only makes later: the live p50 TPOT by the engine's
// clock and the client's p50 TTFT are not below the prediction by more
// than 5%.
func TestLiveEmulatorDecidesAsPredicted(t *testing.T) {
	w := schema.Workload{Seed: 1, Requests: 24, InputTokens: 4096, UncachedTokens: 128, OutputTokens: 64}
	for _, c := range []liveCase{
		{"dp2-tp1-affinity", "{kind: colocated, replicas: 2, tp: 1}", "", deploy.SessionAffinity, 16},
		{"1p1d", "{kind: disaggregated, prefill: {replicas: 1, tp: 1}, decode: {replicas: 1, tp: 1}}", "", deploy.SessionAffinity, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each spends ~17 s of wall time mostly idle, in its warm-up
			s := liveSpec(t, c, "qwen2.5-coder-0.5b-l4", 1, honetest.FreePorts(t, 10))
			pred, err := Run(s, Options{Workload: w, QPS: []float64{c.qps}, SLO: slo.Default, KeepRequests: true})
			if err != nil {
				t.Fatal(err)
			}
			checkPredictedMetrics(t, pred, s.Topology.Kind == deploy.Colocated)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rec, tls := liveReplay(t, ctx, s, w, c.qps, 1)
			checkDecisions(t, s, w, c.qps, pred, rec, tls)
			p, m := predictedFigures(t, pred), levelFigures(t, &rec.Runs[0].Levels[0], tls)
			if m.TPOT < (1-liveTolerance)*p.TPOT {
				t.Errorf("live p50 TPOT %.3f ms by the engine's clock, below the predicted %.3f by more than %.0f%%", m.TPOT, p.TPOT, 100*liveTolerance)
			}
			if m.ClientTTFT < (1-liveTolerance)*p.TTFT {
				t.Errorf("the client's p50 TTFT %.3f ms, below the predicted %.3f by more than %.0f%%", m.ClientTTFT, p.TTFT, 100*liveTolerance)
			}
			t.Logf("p50 TTFT %.3f predicted, %.3f by the engines, %.3f by the client; p50 TPOT %.3f predicted, %.3f by the engine, %.3f by the client",
				p.TTFT, m.TTFT, m.ClientTTFT, p.TPOT, m.TPOT, m.ClientTPOT)
		})
	}
}

// checkPredictedMetrics asserts that a prediction's per-request engine
// metrics are its own timings: generation time / (tokens − 1) is its TPOT
// and, colocated (where the serving engine also received the request),
// e2e − generation time is its TTFT.
func checkPredictedMetrics(t *testing.T, pred *schema.Record, colocated bool) {
	t.Helper()
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	for _, q := range pred.Runs[0].Levels[0].Requests {
		var m emulator.RequestMetrics
		if err := json.Unmarshal(q.EngineMetrics, &m); err != nil {
			t.Fatalf("predicted request %d: engine metrics: %v", q.ID, err)
		}
		if tpot := m.GenerationTimeMs / float64(q.OutputTokens-1); !near(tpot, *q.TPOTMs) {
			t.Errorf("predicted request %d: engine metrics give TPOT %v, the record %v", q.ID, tpot, *q.TPOTMs)
		}
		if ttft := m.E2ETimeMs - m.GenerationTimeMs; colocated && !near(ttft, *q.TTFTMs) {
			t.Errorf("predicted request %d: engine metrics give TTFT %v, the record %v", q.ID, ttft, *q.TTFTMs)
		}
	}
}
