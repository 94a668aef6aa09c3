// Package exercise is hone's answer to the CPU exercise, which asks for the
// best config (deployment mode, prefix cache) of a queueing model with fixed
// rates (package sim) within four evaluate calls: the policy behind
// exercise/submission.py's optimize(baseline, evaluate), reached through
// `hone exercise bridge` (ServeBridge).
//
// Optimize spends four calls — baseline, disaggregated, a prefix-cache
// ablation and a verification re-run — on configs whose key names it does
// not know in advance (FindKnobs), diagnoses each result, and selects by
// SelectionRule and RegressionRule. It never talks to engines itself; it
// calls an Evaluator, which the bridge answers from the Python driver.
//
// The live loop over deployment specs is package optimizer; the two share
// one rule, the distance to the baseline (optimizer.Distance), and the
// settings vocabulary it is stated in (optimizer.Path, Walk, Get).
package exercise
