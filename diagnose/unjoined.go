package diagnose

import (
	"maps"
	"slices"
)

// SplitUnjoined is Attribution.SplitBy of a request that has neither the
// engines' metrics nor a kernel split although kernel evidence was given.
const SplitUnjoined = "unjoined"

// Why a request got no kernel split (Attribution.KernelUnjoined).
const (
	UnjoinedNoWindow          = "no send time in the record to join by"
	UnjoinedNoExchange        = "no HTTP exchange on its engine's API socket fits it (is its port in hone daemon --http-ports?)"
	UnjoinedNoPrefillExchange = "no HTTP exchange on the prefill worker's API socket fits its prefill leg"
	UnjoinedNoStep            = "no CUDA step of its engine began after the receipt and ended by the first token (libcuda and kernel launches probed? hone daemon --cuda-launches)"
	UnjoinedNoKV              = "no KV connection joined inside the decode worker's span"
)

// UnjoinedLevel counts one level's (run, offered rate) requests that
// kernel evidence was given for and that got no split (SplitUnjoined, or
// with --evidence kernel any request without a kernel split), by reason.
type UnjoinedLevel struct {
	Run        int            `json:"run"`
	OfferedQPS float64        `json:"offered_qps"`
	Requests   int            `json:"requests"` // the level's measured requests
	Unjoined   int            `json:"unjoined"`
	Reasons    map[string]int `json:"reasons"`
	IDs        []string       `json:"request_ids"`
}

// Joined keeps the attributions that were split (by the engines' metrics,
// the kernel evidence or, with no kernel evidence given, client timing)
// and counts the rest per level: those SplitUnjoined, and with kernelOnly
// every one not split by kernel evidence (--evidence kernel). Levels are
// in the attributions' order; a level with none left out is not listed.
func Joined(atts []Attribution, kernelOnly bool) ([]Attribution, []UnjoinedLevel) {
	type key struct {
		run int
		qps float64
	}
	var kept []Attribution
	levels := map[key]*UnjoinedLevel{}
	var order []key
	for _, a := range atts {
		k := key{a.Run, a.OfferedQPS}
		l := levels[k]
		if l == nil {
			l = &UnjoinedLevel{Run: a.Run, OfferedQPS: a.OfferedQPS, Reasons: map[string]int{}}
			levels[k] = l
			order = append(order, k)
		}
		l.Requests++
		if a.SplitBy == "kernel" || !kernelOnly && a.SplitBy != SplitUnjoined {
			kept = append(kept, a)
			continue
		}
		why := a.KernelUnjoined
		if why == "" {
			why = "no kernel evidence given for it"
		}
		l.Unjoined++
		l.Reasons[why]++
		l.IDs = append(l.IDs, a.RequestID)
	}
	var out []UnjoinedLevel
	for _, k := range order {
		if l := levels[k]; l.Unjoined > 0 {
			out = append(out, *l)
		}
	}
	return kept, out
}

// ReasonsByCount lists l's reasons, the most frequent first.
func (l UnjoinedLevel) ReasonsByCount() []string {
	rs := slices.Sorted(maps.Keys(l.Reasons))
	slices.SortStableFunc(rs, func(a, b string) int { return l.Reasons[b] - l.Reasons[a] })
	return rs
}
