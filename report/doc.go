// Package report renders a live experiment log (hone optimize) as a
// Markdown report with plots: before/after, every level of the baseline and
// the selection, every trial (failed ones too), invalid levels and why,
// ablations, the interaction, the latency attribution, and how to
// reproduce it. A log of the predict-then-measure loop adds every trial's
// prediction against its measurement (table and plot), the calibrations of
// the cost profile, why exploration stopped, and the top of the ranking.
//
// A log measured by capacity (hone optimize --measure capacity) leads with
// the answer to its spec's goal: the goal in words, the selected config's
// capacity with its uncertainty (every run, the search's precision, bounded
// or a lower bound), its GPUs and GPU-seconds per request (at capacity,
// and at the goal's target rate), beside the baseline's and the change.
// Its figures are the Pareto front of capacity against GPUs (measured and
// predicted configs), each trial's capacity, and the compared configs'
// probes against the SLO; every run's search is a table row. Latency is
// compared only at the reference load, where every run measured it, and
// never where that load lies beyond a config's capacity.
//
// Every figure shows the spread over runs, not only the median: each run
// as a point or a min–max bar, the median marked. Medians and ranges are
// over a level's valid runs; invalid runs are drawn hollow and grey and
// listed with their reasons. Value axes are fitted to the data, not to
// the SLO: the SLO is a labelled line where the data keep at least half
// the axis, else a label at the top edge. p99 has one definition
// throughout (nearest rank over a run's measured requests, TTFT from the
// scheduled send), stated once, with which request it is where there are
// fewer than 200.
//
// Every number carries its kind: emulated or device figures are never
// mixed or relabelled, and an unverified endpoint's figures are never
// called device measurements. Predicted figures are labelled predicted
// beside the measured kind they are compared with.
package report
