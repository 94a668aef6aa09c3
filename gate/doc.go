// Package gate decides whether a candidate's run records regress against a
// stored baseline, for CI.
//
// A baseline keeps the raw per-run values of every scenario × load level ×
// metric, with each metric's direction, and an environment fingerprint.
// Check compares a candidate's runs metric by metric and gives each a
// verdict: pass, improved, warn, fail, suspect or invalid; the check as a
// whole can also be incomparable or unusable.
//
// The statistics, plainly:
//
//   - A metric fails only when its change is significant AND larger than
//     max(the metric's threshold, the noise floor). Significance is one-sided
//     at α (0.05): with at least 4 runs on each side, the Mann–Whitney U
//     test on the raw values (benchmath.AssumeNothing); with fewer, Welch's t
//     test on the logarithms (benchmath.AssumeNormal), because U cannot reach
//     0.05 with 3 runs a side. benchmath's tests are two-sided; their p is
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
//     deployment, is the likely cause. simulation_only records are the
//     brief's model, not a measurement, and are not judged for it.
//   - A candidate whose fingerprint differs from the baseline's in a
//     compared field is incomparable (exit 2), never a false fail. The
//     cold-start procedure (the record's cache.procedure), the time
//     scale and the load mode (open or closed loop) are always compared
//     (ProcedureCompared), and a record of one kind is never compared
//     with a baseline of another. Closed-loop records (levels by clients,
//     not offered rates) are refused for now (exit 2, workload.load).
package gate
