// Package optimizer decides which configuration to try next and which to
// keep. It owns the candidates, the proposal rules, the experiment budget,
// the selection rule, the regression rule and the experiment log.
//
// This file set holds the CPU exercise's policy (Exercise): four calls —
// baseline, disaggregated, a prefix-cache ablation and a verification re-run
// — on configs whose key names it does not know in advance. The optimizer
// never talks to engines itself; it calls an Evaluator.
package optimizer
