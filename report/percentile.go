package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/slo"
)

// p99Definition is the report's one statement of what p99 means; hone
// computes every p99 this way (slo.NearestRank).
const p99Definition = "**p99**, everywhere in this report, is the nearest-rank 99th percentile over one run's measured requests " +
	"at one level: sorted ascending, the value at rank ceil(0.99·n). TTFT runs from each request's scheduled send time, " +
	"not from when the client got it out, so a late send counts against the config."

// p99Note says which of n requests a p99 is where that is one of the top
// two ("p99 of 40 requests is their largest"), and "" otherwise: below 100
// requests, ceil(0.99·n) = n; below 200, n−1.
func p99Note(n int) string {
	if n <= 0 {
		return ""
	}
	switch n - slo.NearestRankIndex(n, 99) {
	case 0:
		return fmt.Sprintf("p99 of %d requests is their largest", n)
	case 1:
		return fmt.Sprintf("p99 of %d requests is their second largest", n)
	}
	return ""
}

// p99Notes joins the notes for each count in ns.
func p99Notes(ns []int) string {
	var s []string
	for _, n := range ns {
		if note := p99Note(n); note != "" {
			s = append(s, note)
		}
	}
	return strings.Join(s, "; ")
}

// p99Explained is p99Note with its arithmetic, for the report's top.
func p99Explained(n int) string {
	k := slo.NearestRankIndex(n, 99)
	s := fmt.Sprintf("n = %d measured requests per run and level: rank ceil(0.99·%d) = %d", n, n, k)
	if note := p99Note(n); note != "" {
		s += ", so **" + note + "**"
		if k == n {
			s += ": one slow request sets it"
		}
	}
	return s
}

// measuredCounts returns the distinct measured-request counts of the
// trials' levels, ascending; levels that did not log one are left out.
func measuredCounts(ts ...*optimizer.Trial) []int {
	var ns []int
	for _, t := range ts {
		if t == nil {
			continue
		}
		for _, l := range t.Levels {
			if l.Measured > 0 && !slices.Contains(ns, l.Measured) {
				ns = append(ns, l.Measured)
			}
		}
	}
	slices.Sort(ns)
	return ns
}
