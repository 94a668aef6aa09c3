package optimizer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/dirlock"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// regretAxes is the grid the regret check measures whole: topology (every
// DP × TP and xPyD within the budget), prefix caching and routing, at the
// engine's defaults otherwise (a full default grid is 80 configs at 2 GPUs
// and 464 at 4: hours of a small host per scenario, live).
func regretAxes() predict.Axes {
	return predict.Axes{MaxNumSeqs: []int{0}, MaxNumBatchedTokens: []int{0}, PrefixCaching: []bool{true, false},
		Routing: []string{deploy.SessionAffinity, deploy.RoundRobin}, EnforceEager: []bool{false}, GPUMemoryUtilization: []float64{0}}
}

// regretScenario is one of the three: a base spec (the loop's
// baseline), its workload, rates and SLO.
type regretScenario struct {
	name   string
	budget int
	w      schema.Workload
	qps    []float64
}

var regretScenarios = []regretScenario{
	{"2x24GiB-brief", 2, schema.Workload{Seed: 1, Requests: 40, InputTokens: 4096, UncachedTokens: 128, OutputTokens: 128}, []float64{4, 8, 16, 32}},
	{"4gpu-8k-inputs", 4, schema.Workload{Seed: 1, Requests: 40, InputTokens: 8192, UncachedTokens: 1024, OutputTokens: 128}, []float64{4, 8, 16, 32}},
	{"2x24GiB-256-out", 2, schema.Workload{Seed: 1, Requests: 40, InputTokens: 4096, UncachedTokens: 128, OutputTokens: 256}, []float64{4, 8, 16, 32}},
}

var regretSLO = slo.SLO{TTFTMillis: 500, TPOTMillis: 30}

func regretBase(t *testing.T, sc regretScenario, scale float64, ports int) *deploy.Spec {
	t.Helper()
	s, err := deploy.ParseSpec([]byte(fmt.Sprintf(`name: base
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct, revision: emulated}
gpus: {budget: %d}
topology: {kind: colocated, replicas: %d, tp: 1}
knobs: {prefix_caching: true}
routing: {policy: session_affinity}
network: {proxy_port: %d, worker_port: %d}
emulator: {profile: qwen2.5-coder-0.5b-l4, time_scale: %g}
`, sc.budget, sc.budget, ports, ports+1, scale)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFixtureEvaluator: MeasureGrid measures each config once into the
// fixture and resumes (a second pass measures nothing); the evaluator
// serves a config's first trial from it and sends a second trial of the
// same config to the live evaluator; the loop run against the fixture,
// whose "deployments" run the optimizer's own profile (hiddenEvaluator
// with nothing hidden: the predictions are exact), selects the grid's
// best or keeps a baseline within the 2% a win needs.
func TestFixtureEvaluator(t *testing.T) {
	start, _ := hiddenProfile(t)
	hidden := start
	sc := regretScenarios[0]
	w := schema.Workload{Seed: 1, Requests: 24, InputTokens: 4096, UncachedTokens: 128, OutputTokens: 32}
	qps := []float64{4, 16, 48}
	target := slo.SLO{TTFTMillis: 250, TPOTMillis: 20}
	base := regretBase(t, sc, 1, 18400)
	grid, err := predict.Grid(base, regretAxes())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	live := &hiddenEvaluator{prof: hidden, w: w, qps: qps, slo: target, dir: t.TempDir()}
	n, err := MeasureGrid(context.Background(), grid, live, dir, nil)
	if err != nil || n != len(grid) || live.calls != len(grid) {
		t.Fatalf("measured %d of %d (%d calls): %v", n, len(grid), live.calls, err)
	}
	if n, err := MeasureGrid(context.Background(), grid, live, dir, nil); err != nil || n != 0 || live.calls != len(grid) {
		t.Fatalf("resume measured %d again (%v)", n, err)
	}
	live.calls = 0
	fx := &FixtureEvaluator{Dir: dir, Live: live}
	lg, err := Live(context.Background(), LiveOptions{Base: base, Evaluator: fx, Budget: max(4, len(grid)/4), Runs: 3, Workload: w, QPS: qps,
		SLO: target, Predictor: &Predictor{Profile: start, Axes: regretAxes(), ProfileDir: filepath.Join(t.TempDir(), "profiles")}})
	if err != nil {
		t.Fatal(err)
	}
	if fx.Remeasured != live.calls || fx.Remeasured > 1 || fx.Served+fx.Remeasured != len(lg.Trials) {
		t.Errorf("served %d, remeasured %d (live calls %d), %d trials", fx.Served, fx.Remeasured, live.calls, len(lg.Trials))
	}
	best, bestKey := 0.0, ""
	for _, s := range grid {
		if tr := fx.peek(t, s); tr.Eligible && tr.Objective > best {
			best, bestKey = tr.Objective, SpecKey(s)
		}
	}
	if lg.Selected == 0 {
		t.Fatalf("nothing selected: %s", strings.Join(lg.Decision, "\n"))
	}
	sel := lg.Trials[lg.Selected-1]
	regret := (best - sel.Objective) / best
	t.Logf("grid %d, %d trials (%d served, %d re-measured); selected %s (%.3f), the fixture's best %s (%.3f): regret %.1f%%",
		len(grid), len(lg.Trials), fx.Served, fx.Remeasured, sel.Key, sel.Objective, bestKey, best, 100*regret)
	if regret > MinWin {
		t.Errorf("regret %.1f%% > %.0f%%", 100*regret, 100*MinWin)
	}
	// The fixture keeps the record without its chunks, and what the loop
	// reads of it is what it read of the whole record.
	rec, err := replay.ReadRecord(FixturePath(dir, grid[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !rec.ChunksDropped {
		t.Error("the fixture record kept its chunks")
	}
	var whole, kept Trial
	full, err := replay.ReadRecord(filepath.Join(live.dir, "grid-000.json"))
	if err != nil {
		t.Fatal(err)
	}
	summarizeRecord(&whole, full)
	summarizeRecord(&kept, rec)
	if !reflect.DeepEqual(whole, kept) {
		t.Errorf("fixture trial %+v, whole record's %+v", kept, whole)
	}
}

// failFirst fails the first trial of each config, then asks inner.
type failFirst struct {
	inner Evaluator
	seen  map[string]bool
}

func (f *failFirst) Evaluate(ctx context.Context, spec *deploy.Spec, tag string) Trial {
	if k := SpecKey(spec); !f.seen[k] {
		f.seen[k] = true
		return Trial{Kind: schema.KindUnverified, Error: "deploy: worker 0 did not become healthy\nwithin 1m"}
	}
	return f.inner.Evaluate(ctx, spec, tag)
}

// A config whose trial failed is noted beside the records (its error,
// one line), served as that failure, and measured again by a rerun,
// which replaces the note with the record.
func TestMeasureGridFailed(t *testing.T) {
	start, _ := hiddenProfile(t)
	w := schema.Workload{Seed: 1, Requests: 16, InputTokens: 4096, UncachedTokens: 128, OutputTokens: 16}
	base := regretBase(t, regretScenarios[0], 1, 18450)
	grid, err := predict.Grid(base, regretAxes())
	if err != nil {
		t.Fatal(err)
	}
	grid = grid[:2]
	dir := t.TempDir()
	ev := &failFirst{inner: &hiddenEvaluator{prof: start, w: w, qps: []float64{4}, slo: regretSLO, dir: t.TempDir()}, seen: map[string]bool{}}
	if n, err := MeasureGrid(context.Background(), grid, ev, dir, nil); err != nil || n != 0 {
		t.Fatalf("measured %d: %v", n, err)
	}
	b, err := os.ReadFile(FailedPath(dir, grid[0]))
	if want := "deploy: worker 0 did not become healthy within 1m\n"; err != nil || string(b) != want {
		t.Fatalf("failure note %q (%v), want %q", b, err, want)
	}
	fx := &FixtureEvaluator{Dir: dir}
	tr := fx.Evaluate(context.Background(), grid[0], "x")
	if want := "fixture: " + SpecKey(grid[0]) + " failed when measured: deploy: worker 0 did not become healthy within 1m"; tr.Error != want || fx.Served != 0 {
		t.Errorf("served %q (%d served), want %q", tr.Error, fx.Served, want)
	}
	if n, err := MeasureGrid(context.Background(), grid, ev, dir, nil); err != nil || n != 2 {
		t.Fatalf("rerun measured %d: %v", n, err)
	}
	for _, s := range grid {
		if _, err := os.Stat(FailedPath(dir, s)); !os.IsNotExist(err) {
			t.Errorf("%s: failure note left beside the record (%v)", SpecKey(s), err)
		}
		if _, err := os.Stat(FixturePath(dir, s)); err != nil {
			t.Error(err)
		}
	}
}

// peek reads a config's fixture trial without counting it as served.
func (e *FixtureEvaluator) peek(t *testing.T, s *deploy.Spec) Trial {
	t.Helper()
	f := &FixtureEvaluator{Dir: e.Dir}
	tr := f.Evaluate(context.Background(), s, "peek")
	judge(&tr, regretSLO)
	return tr
}

var (
	regretLive  = flag.String("regret-live", "", "run TestRegretLive: measure each scenario's grid live into this directory (resumable), then score the loop against it")
	regretScale = flag.Float64("regret-scale", 1, "TestRegretLive's emulator time scale (wall seconds per model second): at 0.25 this 2-core host was client_bound on nearly every config")
	regretMax   = flag.Float64("regret-max-scale", 2, "TestRegretLive: a config the host made invalid is measured again at a larger time scale up to this (Rescaler; 0: never)")
	regretRedo  = flag.String("regret-remeasure", "", "TestRegretLive: first measure again the configs whose key matches this regexp and whose record decided nothing only because of the measuring host (client_bound, emulator_bound: for instance measured side by side by shards); the old record is kept when the new measurement fails; it takes the grid to itself (no shard may run meanwhile)")
	regretOnly  = flag.String("regret-only", "", "TestRegretLive: measure only the configs whose key matches this regexp (a grid left incomplete is not scored)")
	regretShard = flag.String("regret-shard", "", "TestRegretLive: measure only shard K/N of each grid (its configs whose index is K mod N), so that N processes measure a grid side by side; a shard scores nothing: run once more without it to score")
)

// parseShard reads -regret-shard "K/N" (0 <= K < N); "" is the whole grid,
// 0/1.
func parseShard(s string) (k, n int, err error) {
	if s == "" {
		return 0, 1, nil
	}
	if _, err := fmt.Sscanf(s, "%d/%d", &k, &n); err != nil || n < 1 || k < 0 || k >= n || fmt.Sprintf("%d/%d", k, n) != s {
		return 0, 0, fmt.Errorf("-regret-shard %q: want K/N with 0 <= K < N", s)
	}
	return k, n, nil
}

// TestRegretLive (with -regret-live DIR; make regret-live) is the issue's
// regret check: for each of three emulated scenarios, every config of the
// grid (regretAxes) is deployed and measured live once into DIR (3 runs ×
// 4 levels at -regret-scale; a rerun resumes), then the predict-then-
// measure loop runs against those measurements (FixtureEvaluator; its
// verification re-run measured live again), with a budget of a quarter
// of the grid; its verified selection must be within 2% of the grid's
// best measured objective.
func TestRegretLive(t *testing.T) {
	if *regretLive == "" {
		t.Skip("run with -regret-live DIR (make regret-live): hours of live measurement")
	}
	shard, shards, err := parseShard(*regretShard)
	if err != nil {
		t.Fatal(err)
	}
	only := regexp.MustCompile("")
	if *regretOnly != "" {
		if only, err = regexp.Compile(*regretOnly); err != nil {
			t.Fatalf("-regret-only: %v", err)
		}
	}
	var redo *regexp.Regexp
	if *regretRedo != "" {
		if redo, err = regexp.Compile(*regretRedo); err != nil {
			t.Fatalf("-regret-remeasure: %v", err)
		}
		if shards > 1 {
			t.Fatal("-regret-remeasure measures on a host to itself: not with -regret-shard")
		}
	}
	hone := honetest.Binary(t)
	for _, sc := range regretScenarios {
		t.Run(sc.name, func(t *testing.T) {
			base := regretBase(t, sc, *regretScale, honetest.FreePorts(t, 3*sc.budget+4))
			axes := regretAxes()
			grid, err := predict.Grid(base, axes)
			if err != nil {
				t.Fatal(err)
			}
			// Each process's P/D configs get KV side-channel ports of
			// their own (not the default 5600), so that shards measure
			// them side by side. Ports are not part of a config's key.
			kv := honetest.FreePorts(t, sc.budget)
			for _, s := range grid {
				switch s.KV.Name {
				case deploy.NixlConnector:
					s.KV.SideChannelPort = kv
				case deploy.P2pNcclConnector:
					s.KV.KVPort = kv
				}
			}
			dir := filepath.Join(*regretLive, sc.name)
			trials := filepath.Join(dir, "trials")
			if shards > 1 || *regretOnly != "" { // trial names are grid-<index in the part>
				trials = filepath.Join(trials, fmt.Sprintf("part-%d-of-%d-%s", shard, shards, time.Now().UTC().Format("20060102T150405")))
			}
			// Shards measure a grid side by side (shared locks); a process
			// that moves records aside to measure them again has it to
			// itself, so that the records another process finds aside are
			// only ever a killed run's.
			if err := os.MkdirAll(filepath.Join(dir, "grid"), 0o755); err != nil {
				t.Fatal(err)
			}
			unlock, err := dirlock.Lock(filepath.Join(dir, "grid"), redo != nil)
			if errors.Is(err, dirlock.ErrBusy) {
				t.Fatalf("%v: -regret-remeasure needs the grid to itself, and no other process may measure it meanwhile", err)
			} else if err != nil {
				t.Logf("warning: %v: nothing keeps another process from this grid", err)
			} else {
				defer unlock()
			}
			// A run killed while measuring again left its records aside.
			stale, err := filepath.Glob(filepath.Join(dir, "grid", "*.host-invalid"))
			if err != nil {
				t.Fatal(err)
			}
			for i := range stale {
				stale[i] = strings.TrimSuffix(stale[i], ".host-invalid")
			}
			restoreAside(t, stale)
			var aside []string // host-invalid records moved aside to be measured again
			if redo != nil {
				trials = filepath.Join(trials, "remeasure-"+time.Now().UTC().Format("20060102T150405"))
				aside = hostInvalidAside(t, grid, filepath.Join(dir, "grid"), redo)
				defer restoreAside(t, aside)
			}
			var ev Evaluator = &DeployEvaluator{Up: deploy.UpOptions{StateDir: t.TempDir(), Hone: hone, HealthTimeout: time.Minute, Grace: 2 * time.Second},
				Workload: sc.w, QPS: sc.qps, Runs: 3, SLO: regretSLO, OutDir: trials, Log: os.Stderr}
			if *regretMax > 0 {
				ev = &Rescaler{Inner: ev, MaxScale: *regretMax, Log: os.Stderr}
			}
			checkFixture(t, sc, filepath.Join(dir, "grid"), grid)
			t.Logf("%s: grid of %d configs", sc.name, len(grid))
			var mine []*deploy.Spec
			for i, s := range grid {
				if i%shards == shard && only.MatchString(SpecKey(s)) {
					mine = append(mine, s)
				}
			}
			if len(mine) < len(grid) {
				t.Logf("shard %d/%d, configs matching %q: %d of them", shard, shards, only, len(mine))
			}
			if _, err := MeasureGrid(context.Background(), mine, ev, filepath.Join(dir, "grid"), os.Stderr); err != nil {
				t.Fatal(err)
			}
			if len(mine) < len(grid) {
				t.Skipf("%d of the grid's %d configs measured: run once more without -regret-shard and -regret-only to score the grid", len(mine), len(grid))
			}
			fx := &FixtureEvaluator{Dir: filepath.Join(dir, "grid"), Live: ev}
			prof, err := emulator.LookupProfile(base.Emulator.Profile)
			if err != nil {
				t.Fatal(err)
			}
			budget := max(4, len(grid)/4)
			lg, err := Live(context.Background(), LiveOptions{Base: base, Evaluator: fx, Budget: budget, Runs: 3, Workload: sc.w, QPS: sc.qps,
				SLO: regretSLO, LogPath: filepath.Join(dir, "log.json"), Predictor: &Predictor{Profile: prof, Axes: axes, ProfileDir: filepath.Join(dir, "profiles")}})
			if err != nil {
				t.Fatal(err)
			}
			scoreRegret(t, sc, grid, fx, lg, budget, "re-measured")
		})
	}
}

// hostInvalidAside moves aside (to <record>.host-invalid) the records in
// dir of grid's configs whose key matches re and whose measurement decided
// nothing only because of the measuring host (hostOnly), so that
// MeasureGrid measures them again; restoreAside puts back those it did
// not replace.
func hostInvalidAside(t *testing.T, grid []*deploy.Spec, dir string, re *regexp.Regexp) []string {
	t.Helper()
	var aside []string
	for _, s := range grid {
		if !re.MatchString(SpecKey(s)) {
			continue
		}
		tr := (&FixtureEvaluator{Dir: dir}).serve(s)
		if tr.Error != "" {
			continue
		}
		_, why, ok := hostOnly(tr)
		if !ok {
			continue
		}
		path := FixturePath(dir, s)
		if err := os.Rename(path, path+".host-invalid"); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: measured again (its record: %s)", SpecKey(s), why)
		aside = append(aside, path)
	}
	return aside
}

func restoreAside(t *testing.T, aside []string) {
	t.Helper()
	for _, path := range aside {
		var err error
		if _, serr := os.Stat(path); serr == nil {
			err = os.Remove(path + ".host-invalid")
		} else if err = os.Rename(path+".host-invalid", path); err == nil {
			// the record stands for the config again, not the failure
			err = os.Remove(failedBeside(path))
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		}
		if err != nil {
			t.Error(err)
		}
	}
}

// checkFixture fails when a record in the scenario's fixture measured
// another workload, rates or SLO than the scenario's now: a committed grid
// outlives the code that measured it, and its objectives were judged
// against its own SLO.
func checkFixture(t *testing.T, sc regretScenario, dir string, grid []*deploy.Spec) {
	t.Helper()
	for _, s := range grid {
		path := FixturePath(dir, s)
		rec, err := replay.ReadRecord(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Workload.Workload != sc.w || !reflect.DeepEqual(rec.Workload.QPS, sc.qps) || rec.SLO != regretSLO || rec.Workload.Runs != 3 {
			t.Fatalf("%s measured workload %+v at %v req/s, %d runs, SLO %+v; the scenario is %+v at %v req/s, 3 runs, SLO %+v: delete the stale records and measure again",
				path, rec.Workload.Workload, rec.Workload.QPS, rec.Workload.Runs, rec.SLO, sc.w, sc.qps, regretSLO)
		}
	}
}

// fixtureAgain serves a config's fixture record once more, as the
// verification re-run of TestRegretFixture: not a measurement, so the
// re-run there confirms what it served.
type fixtureAgain struct{ dir string }

func (a fixtureAgain) Evaluate(ctx context.Context, spec *deploy.Spec, tag string) Trial {
	return (&FixtureEvaluator{Dir: a.dir}).Evaluate(ctx, spec, tag)
}

// scoreRegret checks the loop's verified selection against the best
// objective of the grid's fixture (regret at most MinWin) and that it took
// at most a quarter of the grid from the fixture, and logs the regret row.
func scoreRegret(t *testing.T, sc regretScenario, grid []*deploy.Spec, fx *FixtureEvaluator, lg *Log, budget int, rerun string) {
	t.Helper()
	best, bestKey, valid := 0.0, "", 0
	var unmeasured []string
	for _, s := range grid {
		tr := fx.peek(t, s)
		if measured(&tr) {
			valid++
		} else {
			why := tr.Error
			if why == "" {
				why = fmt.Sprintf("%d of %d runs valid (%s)", len(tr.Objectives), len(tr.Objectives)+tr.InvalidRuns, tr.Reason)
			}
			unmeasured = append(unmeasured, SpecKey(s)+": "+why)
		}
		if tr.Eligible && tr.Objective > best {
			best, bestKey = tr.Objective, SpecKey(s)
		}
	}
	if lg.Selected == 0 || !lg.Verified {
		t.Fatalf("selected %d verified %v: %s", lg.Selected, lg.Verified, strings.Join(lg.Decision, "\n"))
	}
	sel := lg.Trials[lg.Selected-1]
	regret := (best - sel.Objective) / best
	for _, u := range unmeasured {
		t.Logf("not measured validly: %s", u)
	}
	outside := outsideGrid(grid, lg)
	for _, o := range outside {
		t.Logf("a trial outside the grid, not measured (the fixture has no record for it): %s", o)
	}
	t.Logf("| %s | %d (%d measured validly) | %d of %d budget (%d served, %d %s, %d outside the grid) | %s %.3f | %s %.3f | %.1f%% |", sc.name, len(grid), valid,
		len(lg.Trials), budget, fx.Served, fx.Remeasured, rerun, len(outside), sel.Key, sel.Objective, bestKey, best, 100*regret)
	if regret > MinWin {
		t.Errorf("regret %.1f%% > %.0f%%", 100*regret, 100*MinWin)
	}
	if fx.Served > len(grid)/4 {
		t.Errorf("served %d configs of %d: more than a quarter", fx.Served, len(grid))
	}
}

// outsideGrid names the loop's trials that failed because their config is
// not in the grid (an ablation of an axis the grid leaves out), so that
// the fixture had nothing to serve for them.
func outsideGrid(grid []*deploy.Spec, lg *Log) []string {
	in := map[string]bool{}
	for _, s := range grid {
		in[SpecKey(s)] = true
	}
	var out []string
	for i, tr := range lg.Trials {
		if tr.Error != "" && !in[tr.Key] {
			out = append(out, fmt.Sprintf("trial %d (%s)", i+1, tr.Key))
		}
	}
	return out
}

// regretFixture is where make regret-live keeps the scenarios' grids, one
// record per config without chunks (MeasureGrid), committed so that a
// grid measured over hours outlives the host that measured it.
const regretFixture = "testdata/regret"

// TestRegretFixture runs the predict-then-measure loop against each
// scenario's committed grid (the records make regret-live measured live,
// emulated, time scale 1) offline: every trial is served from the
// fixture, and the verification re-run serves the selection's record
// once more (fixtureAgain), so this checks the loop's choices on measured
// data (regret at most 2%, at most a quarter of the grid), not that a
// re-measurement confirms them (TestRegretLive does). A scenario whose
// grid is not measured whole is skipped, saying how much is missing.
func TestRegretFixture(t *testing.T) {
	skipped := 0
	defer func() {
		if skipped == len(regretScenarios) {
			t.Error("no scenario's grid is complete in " + regretFixture + ": nothing was checked")
		}
	}()
	for _, sc := range regretScenarios {
		t.Run(sc.name, func(t *testing.T) {
			base := regretBase(t, sc, 1, 18500)
			axes := regretAxes()
			grid, err := predict.Grid(base, axes)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(regretFixture, sc.name, "grid")
			missing := 0
			for _, s := range grid {
				_, err := os.Stat(FixturePath(dir, s))
				if _, ferr := os.Stat(FailedPath(dir, s)); err != nil && ferr != nil {
					missing++
				}
			}
			if missing > 0 {
				skipped++
				t.Skipf("%d of %d configs not in %s (make regret-live REGRET_SCENARIOS=%s measures them, hours)", missing, len(grid), dir, sc.name)
			}
			prof, err := emulator.LookupProfile(base.Emulator.Profile)
			if err != nil {
				t.Fatal(err)
			}
			checkFixture(t, sc, dir, grid)
			fx := &FixtureEvaluator{Dir: dir, Live: fixtureAgain{dir}}
			budget := max(4, len(grid)/4)
			lg, err := Live(context.Background(), LiveOptions{Base: base, Evaluator: fx, Budget: budget, Runs: 3, Workload: sc.w, QPS: sc.qps,
				SLO: regretSLO, Predictor: &Predictor{Profile: prof, Axes: axes, ProfileDir: filepath.Join(t.TempDir(), "profiles")}})
			if err != nil {
				t.Fatal(err)
			}
			// An ablation of an axis the grid leaves out (CUDA graphs off,
			// say) has no record to serve: it fails, saying so, and is
			// counted apart.
			if outside := outsideGrid(grid, lg); fx.Remeasured > 1 || fx.Served+fx.Remeasured+len(outside) != len(lg.Trials) {
				var errs []string
				for i, tr := range lg.Trials {
					if tr.Error != "" {
						errs = append(errs, fmt.Sprintf("trial %d (%s): %s", i+1, tr.Key, tr.Error))
					}
				}
				t.Errorf("served %d, again %d, outside the grid %d: %d trials; failed: %s", fx.Served, fx.Remeasured, len(outside), len(lg.Trials), strings.Join(errs, "; "))
			}
			scoreRegret(t, sc, grid, fx, lg, budget, "served again, not re-measured")
		})
	}
}

func TestParseShard(t *testing.T) {
	for in, want := range map[string][2]int{"": {0, 1}, "0/1": {0, 1}, "2/4": {2, 4}} {
		if k, n, err := parseShard(in); err != nil || k != want[0] || n != want[1] {
			t.Errorf("parseShard(%q) = %d, %d, %v; want %v", in, k, n, err, want)
		}
	}
	for _, in := range []string{"4/4", "-1/2", "1/0", "1", "1/2x", "a/b", " 1/2"} {
		if _, _, err := parseShard(in); err == nil || !strings.Contains(err.Error(), "-regret-shard") {
			t.Errorf("parseShard(%q): err %v, want one naming -regret-shard", in, err)
		}
	}
}

// hostInvalidAside moves aside exactly the matching records that the host
// alone made invalid; MeasureGrid measures those again, and restoreAside
// drops the old record where a new one replaced it and puts it back where
// the new measurement failed.
func TestRemeasureHostInvalid(t *testing.T) {
	dir := t.TempDir()
	a, b, c := rescaleSpec(t, 1), rescaleSpec(t, 1), rescaleSpec(t, 1)
	b.Knobs.PrefixCaching = boolp(false)
	c.Routing.Policy = deploy.RoundRobin
	grid := []*deploy.Spec{a, b, c}
	bound := &hostBoundEvaluator{t: t, dir: t.TempDir(), need: 2, code: schema.ReasonClientBound}
	if n, err := MeasureGrid(context.Background(), grid[:2], bound, dir, nil); err != nil || n != 2 {
		t.Fatalf("MeasureGrid: %d, %v", n, err)
	}
	fine := &hostBoundEvaluator{t: t, dir: t.TempDir(), need: 1, code: schema.ReasonClientBound}
	if n, err := MeasureGrid(context.Background(), grid[2:], fine, dir, nil); err != nil || n != 1 {
		t.Fatalf("MeasureGrid: %d, %v", n, err)
	}
	// a matches and is host-invalid; b is host-invalid but does not match;
	// c matches but is valid.
	re := regexp.MustCompile("^(" + regexp.QuoteMeta(SpecKey(a)) + "|" + regexp.QuoteMeta(SpecKey(c)) + ")$")
	aside := hostInvalidAside(t, grid, dir, re)
	if len(aside) != 1 || aside[0] != FixturePath(dir, a) {
		t.Fatalf("moved aside %v, want only %s", aside, FixturePath(dir, a))
	}
	if n, err := MeasureGrid(context.Background(), grid, fine, dir, nil); err != nil || n != 1 || len(fine.scales) != 2 {
		t.Fatalf("MeasureGrid after: %d measured (%d calls), %v; want a alone", n, len(fine.scales), err)
	}
	restoreAside(t, aside)
	if _, err := os.Stat(FixturePath(dir, a) + ".host-invalid"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the replaced record is still aside: %v", err)
	}
	if tr := (&FixtureEvaluator{Dir: dir}).serve(a); tr.Error != "" || len(tr.Objectives) != 3 {
		t.Errorf("a's new record: %d valid runs (%s), want 3", len(tr.Objectives), tr.Error)
	}
	// A failed re-measurement puts the old record back.
	aside = hostInvalidAside(t, grid, dir, regexp.MustCompile(regexp.QuoteMeta(SpecKey(b))))
	if _, err := MeasureGrid(context.Background(), grid, failingEvaluator{}, dir, nil); err != nil {
		t.Fatal(err)
	}
	restoreAside(t, aside)
	if tr := (&FixtureEvaluator{Dir: dir}).serve(b); tr.Error != "" || len(tr.Objectives) != 0 {
		t.Errorf("b after a failed re-measurement: %d valid runs (%s), want its old record back (0)", len(tr.Objectives), tr.Error)
	}
	if _, err := os.Stat(FailedPath(dir, b)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed re-measurement's note outlived the restored record: %v", err)
	}
}

// failingEvaluator fails every trial.
type failingEvaluator struct{}

func (failingEvaluator) Evaluate(context.Context, *deploy.Spec, string) Trial {
	return Trial{Kind: schema.KindEmulated, Error: "deploy: planted failure"}
}
