// Package report renders a live experiment log (hone optimize) as a
// Markdown report with plots: before/after, every trial (failed ones too),
// ablations, the interaction, the latency attribution, and how to
// reproduce it. Every number carries its kind: emulated or device figures
// are never mixed or relabelled.
package report
