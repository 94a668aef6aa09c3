// Package slo is hone's one home for what "meeting the SLO" means and for
// the arithmetic that decides it.
//
// An SLO is a pair of latency objectives, p99 time to first token and p99
// time per output token, that a load level must meet; hone's default, the
// seed workload's SLO, is p99 TTFT <= 2000 ms and p99 TPOT <= 50 ms
// (Default). A Level is one load level judged against it: the offered rate,
// the two p99s, the effective (completed) rate and whether it passed. The
// objective of a scan is the largest effective QPS among the passing levels,
// 0 when none pass (Objective).
//
// Every percentile here is nearest rank: sort ascending and take entry
// ceil(p/100*n) counting from one (NearestRank, NearestRankIndex). With
// fewer than 100 values p99 is the largest, below 200 the second largest;
// nothing is interpolated. Median is the ordinary median, the mean of the
// two middle values when n is even, for summarising repeated runs.
// PercentileCI gives the ranks of the order statistics that bound a
// percentile with a stated confidence, from the binomial distribution and
// nothing else; with too few values there is no upper rank (p99 at 95%
// needs 368 values, MinCountForCI), and a p99 of fewer is only a maximum.
//
// The package knows nothing about where timings come from: replay, the
// exact simulator, the emulator and the optimizer all judge levels with it.
package slo
