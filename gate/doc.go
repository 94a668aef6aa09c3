// Package gate decides whether a candidate's run records regress against a
// stored baseline, for CI.
//
// A baseline keeps the raw per-run values of every scenario × load level ×
// metric, with each metric's direction, and an environment fingerprint.
// Check compares a candidate's runs metric by metric and gives each a
// verdict: pass, improved, warn, fail or incomparable.
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
// A candidate whose fingerprint differs from the baseline's in a compared
// field is incomparable (exit 2), never a false fail.
package gate
