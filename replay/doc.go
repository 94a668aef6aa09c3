// Package replay owns the workload hone replays and the arithmetic that turns
// per-request timings into the figures every backend reports.
//
// It holds the brief's exact request schedule (Generate), nearest-rank
// percentiles, effective QPS and the objective (stats.go). It knows nothing
// about deployments, engines or eBPF: the simulator, the emulator and real
// vLLM all feed it the same per-request timings.
package replay
