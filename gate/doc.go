// Package gate decides whether a candidate's run records regress against a
// stored baseline, for CI.
//
// A baseline keeps the raw per-run values of every scenario × load level ×
// metric, with each metric's direction, and an environment fingerprint;
// for the tail metrics (p99 TTFT, p99 TPOT) also each run's per-request
// values.
// Check compares a candidate's runs metric by metric and gives each a
// verdict: pass, improved, warn, fail, suspect or invalid; the check as a
// whole can also be incomparable or unusable.
//
// The statistics, plainly:
//
//   - A metric other than a tail (below) fails only when its change is
//     significant AND larger than max(the metric's threshold, the noise
//     floor). Significance is one-sided at α (0.05): with at least 4 runs
//     on each side, the Mann–Whitney U test on the raw values
//     (benchmath.AssumeNothing); with fewer, Welch's t test on the
//     logarithms (benchmath.AssumeNormal), because U cannot reach 0.05
//     with 3 runs a side. benchmath's tests are two-sided; their p is
//     halved when the change points the way being tested (both statistics
//     are symmetric under the null hypothesis). The output names the test.
//   - The noise floor is twice the baseline's own run-to-run coefficient of
//     variation (sample standard deviation / mean).
//   - Many metrics are tested at once, so p-values are adjusted with Holm's
//     step-down method over all tested metrics of one check, which keeps the
//     family-wise false-alarm rate at α.
//   - Hard failures need no statistics: an SLO violation at a level the
//     baseline passed in every run; more failed requests than the baseline's
//     worst run; the highest passing load level (where the objective comes
//     from) dropping.
//   - Tails are compared apart. A level's p99 over its own few dozen
//     requests is their maximum, which one slow request sets (between two
//     replays of one deployment a level's per-run p99 TTFT spanned 18–101
//     ms). When both sides carry per-request values — replay records do,
//     and a baseline (schema 3) keeps each run's, sorted, rounded to 0.01
//     ms — p99 TTFT and p99 TPOT are computed on the measured requests
//     pooled over the runs valid at the level: the runs are exchangeable
//     (one deployment, one schedule). Each side's p99 (nearest rank) gets a
//     distribution-free 95% confidence interval [x(lo), x(hi)] from its
//     order statistics (slo.PercentileCI: the number of requests below the
//     true p99 is binomial(n, 0.99)). A tail fails only when the
//     candidate's interval lies wholly above the baseline's (candidate's
//     lower bound > baseline's upper bound) AND its p99 is worse by more
//     than the metric's fail threshold; intervals apart and a change
//     between the warn and fail thresholds warn; overlapping intervals
//     pass, however far the point figures moved. Each bound misses on its
//     side with probability at most 2.5%, so one deployment checked
//     against itself fails a tail with probability at most 5%, in
//     practice far less; no noise floor or Holm adjustment applies (there
//     is no p-value). Pooling treats requests as independent: a host stall
//     that slows a whole run makes the interval narrower than the truth,
//     which is what the threshold is for.
//   - An upper rank for p99 at 95% needs 368 pooled requests
//     (0.99^n <= 0.025). With fewer on either side, both figures are the
//     pooled maximum, reported "max of n", which fails only when worse by
//     more than max(the fail threshold, LooseTailChange = 300%) and never
//     warns or improves: a maximum says little more than that nothing was
//     grossly slower (two replays of one emulated deployment, 3 runs of 40
//     measured requests a level, had TTFT maxima up to 2.4× apart).
//   - A side without per-request values (a schema-2 baseline, a
//     simulation record) has its tails compared per run, as every other
//     metric; the check says so in a note. TailRule states the rule in
//     words; the check prints it.
//   - simulation_only records are deterministic and compare exactly.
//   - Too few runs for a test (one on either side) or zero spread on both
//     sides: the comparison is by threshold alone, and the output says so.
//
// What is compared, and whether to believe it:
//
//   - Valid levels only. A replay record marks every level valid or
//     invalid (replay.VerdictRule); the baseline stores that per run and
//     level. A metric is compared on the runs whose level is valid on each
//     side; a level with no valid run on a side is invalid — reported with
//     its reasons, never pass or fail. A side of several runs needs at
//     least replay.MinValidRuns (2) valid ones: runs the host made invalid
//     cast doubt on those it spared, and one run cannot show its noise (a
//     one-run candidate by design is judged on it by threshold alone). The
//     objective (and the highest passing level) is compared only on runs
//     whose every level is valid.
//     No level valid on both sides: unusable (exit 2).
//   - Plausibility. A compared metric is suspect when its figures are
//     physically implausible (PlausibilityRule): a TPOT below
//     DefaultTPOTFloorMs, a served rate above the offered one, or an
//     objective that changed more than ObjectiveFactor either way. Suspect
//     fails CI (exit 1) under its own label: the measurement, not the
//     deployment, is the likely cause. simulation_only records come from
//     the exact queueing model (package sim), not a measurement, and are
//     not judged for it.
//   - A candidate whose fingerprint differs from the baseline's in a
//     compared field is incomparable (exit 2), never a false fail. The
//     cold-start procedure (the record's cache.procedure), the time
//     scale and the load mode (open or closed loop) are always compared
//     (ProcedureCompared), and a record of one kind is never compared
//     with a baseline of another. Closed-loop records (levels by clients,
//     not offered rates) are refused for now (exit 2, workload.load).
//
// Capacities. A capacity result (hone replay --capacity, hone predict
// --capacity; capacity.Record) is one run with one metric, CapacityMetric:
// the largest load that met the SLO at steady state and, beside it
// (Series.Upper), the next load the search measured, which failed. Runs
// of one deployment report different figures because each search's probes
// sit on its own grid (anchored at its start), so the gate compares
// brackets, not points (CapacityRule): the candidate is worse only when
// every candidate run failed at a load every baseline run met, and then
// fails beyond the fail threshold (5%) and warns beyond the warn one (3%);
// overlapping brackets pass, the runs being unable to tell the capacities
// apart at the search's precision. Like the tails' intervals, this needs
// no p-value and no noise floor. A search that did not finish is invalid.
// Its fingerprint is the first probe's record's with load "capacity/MODE"
// and a workload without the probes' rates and request counts, so a
// capacity is never compared with a level scan.
//
// The commands: CreateBaseline and UpdateBaseline (cli.go) carry out `hone
// gate baseline create` and `update`; ReadRunFiles reads the record files
// those and `hone gate check` are given.
package gate
