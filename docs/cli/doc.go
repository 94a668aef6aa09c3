// Package cli holds the long help of hone's commands: one Markdown page per
// command (hone-gate-check is gate-check.md), embedded into the binary so
// that `hone X --help` prints the page's description and examples
// verbatim. A page states a rule that lives in Go (a package's rule text or
// threshold) as a {{placeholder}} that the command fills in, so that the
// rule is stated once.
//
// A page's layout:
//
//	# hone gate check
//	(free text)
//	## Description
//	```text            cobra's Long
//	## Examples
//	```sh              cobra's Example: every example block, joined by newlines;
//	                    the test runs the hone commands of a plain sh block
//	```sh skip: WHY    shown in --help, not run (needs a GPU, root, a live endpoint, ...)
//	```output          not shown: what the preceding sh block's last command prints
//	## Checked examples  (optional) sh and output blocks the test runs, not shown:
//	                    examples on the repository's own files where --help's
//	                    need the reader's
package cli
