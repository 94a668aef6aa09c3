package calibrate

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hone-llm/hone/slo"
)

// Where the predictions of measured rows miss: hone validate silicon --by.

// SiliconByKeys are the row fields --by groups on, in the order a group's
// key prints.
var SiliconByKeys = []string{"model", "precision", "mode", "tp", "isl", "osl", "clients"}

// ParseSiliconBy checks a --by list (comma-separated SiliconByKeys) and
// returns its keys in SiliconByKeys' order.
func ParseSiliconBy(s string) ([]string, error) {
	var keys []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if !slices.Contains(SiliconByKeys, k) {
			return nil, fmt.Errorf("--by %q: want a comma-separated list of %s", k, strings.Join(SiliconByKeys, ", "))
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return slices.Index(SiliconByKeys, a) - slices.Index(SiliconByKeys, b) })
	return keys, nil
}

// SiliconErrors are one figure's errors over a group of rows: the
// median and p90 of the absolute errors and the median signed error
// ((predicted − measured) / measured, %: negative is predicted low).
type SiliconErrors struct {
	MedianAPE   float64 `json:"median_ape"`
	P90APE      float64 `json:"p90_ape"`
	MedianError float64 `json:"median_error"`
}

// SiliconGroup is the errors of the rows that share a --by key.
type SiliconGroup struct {
	By   map[string]string `json:"by"`
	Rows int               `json:"rows"`
	TTFT SiliconErrors     `json:"ttft"`
	TPOT SiliconErrors     `json:"tpot"`
}

// siliconKey is row r's value of --by key k.
func siliconKey(r SiliconPrediction, k string) string {
	switch k {
	case "model":
		return r.Model
	case "precision":
		return orDash(r.Precision)
	case "mode":
		return r.Mode
	case "tp":
		if r.Prefill != nil && r.Decode != nil {
			return fmt.Sprintf("P%d×%d D%d×%d", r.Prefill.Workers, r.Prefill.TP, r.Decode.Workers, r.Decode.TP)
		}
		return strconv.Itoa(r.TP)
	case "isl":
		return strconv.Itoa(r.ISL)
	case "osl":
		return strconv.Itoa(r.OSL)
	default: // clients
		return strconv.Itoa(r.Concurrency)
	}
}

// GroupSilicon groups the predicted rows by keys (in the order each key
// first appears) and summarises each group's errors.
func GroupSilicon(rows []SiliconPrediction, keys []string) []SiliconGroup {
	groups, order := groupBy(rows, func(r SiliconPrediction) string {
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = siliconKey(r, k)
		}
		return strings.Join(parts, "\x00")
	})
	out := make([]SiliconGroup, 0, len(order))
	for _, id := range order {
		rs := groups[id]
		g := SiliconGroup{By: map[string]string{}, Rows: len(rs)}
		for _, k := range keys {
			g.By[k] = siliconKey(rs[0], k)
		}
		g.TTFT = siliconErrors(rs, func(r SiliconPrediction) SiliconStat { return r.TTFT })
		g.TPOT = siliconErrors(rs, func(r SiliconPrediction) SiliconStat { return r.TPOT })
		out = append(out, g)
	}
	return out
}

func siliconErrors(rs []SiliconPrediction, stat func(SiliconPrediction) SiliconStat) SiliconErrors {
	apes := make([]float64, len(rs))
	signed := make([]float64, len(rs))
	for i, r := range rs {
		s := stat(r)
		apes[i] = s.APE
		signed[i] = 100 * (s.Predicted - s.Measured) / s.Measured
	}
	a := apeSummary(apes)
	slices.Sort(signed)
	return SiliconErrors{MedianAPE: a.MedianAPE, P90APE: a.P90APE, MedianError: round4(slo.Median(signed))}
}

func writeSiliconGroups(w io.Writer, keys []string, groups []SiliconGroup) {
	fmt.Fprintf(w, "\nby %s (median_err: the median of (predicted − measured)/measured, %%; negative is predicted low):\n", strings.Join(keys, ", "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\trows\tttft_ape%%_med\tttft_ape%%_p90\tttft_err%%_med\ttpot_ape%%_med\ttpot_ape%%_p90\ttpot_err%%_med\t\n", strings.Join(keys, "\t"))
	for _, g := range groups {
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t", g.By[k])
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%+.1f\t%.1f\t%.1f\t%+.1f\t\n", g.Rows, g.TTFT.MedianAPE, g.TTFT.P90APE, g.TTFT.MedianError,
			g.TPOT.MedianAPE, g.TPOT.P90APE, g.TPOT.MedianError)
	}
	tw.Flush()
}
