// Package optimizer decides which deployment to try next and which to keep:
// the live loop (Live) owns the candidates (Propose, Ablations), the trial
// budget, the selection rule, the regression rule and the experiment log.
//
// The loop never talks to engines itself; it calls an Evaluator, one
// interface for every backend: ModelEvaluator (the exact queueing model,
// kind simulation_only) and DeployEvaluator (deploy + replay on the
// emulator, kind emulated, or on vLLM, kind device).
//
// Run carries out hone optimize (cli.go): it claims the output directory
// (outdir.go: one run at a time, an earlier run's leftovers stopped and its
// files kept aside), measures the host's floor, and runs Live.
//
// The CPU exercise's four-call policy over opaque configs is package
// exercise.
package optimizer
