package diagnose

import (
	"fmt"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// MarkClientBound applies replay's client_bound bounds to the client part
// (the residual: dispatch lag, hops and the proxy's hand-off, first-byte
// delivery) of every level (run, offered rate) that has attributions: a
// level is invalidated with replay.ReasonClientBound when the client
// part's p99 over its measured requests exceeds
// replay.ClientBoundSLOFraction of the TTFT SLO, or its median exceeds
// replay.ClientBoundTTFTFraction of the same requests' median TTFT
// (nearest rank, as replay judges the dispatch lag alone). It then calls
// rec.Judge, so run verdicts and objectives follow, copies the new reason
// codes onto atts (so Summarize leaves those levels out), and returns one
// line per level it marked.
//
// The residual holds the client's time only where attribution split the
// engines' time out: when the record's config names a disaggregated
// topology, requests without a proxy timeline (whose residual holds the
// prefill leg) are left out, and a level with none left is not judged.
func MarkClientBound(rec *schema.Record, atts []Attribution) []string {
	if rec == nil {
		return nil
	}
	type key struct {
		run int
		q   float64
	}
	needTimeline := disaggregated(rec)
	client, ttft := map[key][]float64{}, map[key][]float64{}
	skipped := 0
	for _, a := range atts {
		if needTimeline && !a.Timeline {
			skipped++
			continue
		}
		k := key{a.Run, a.OfferedQPS}
		client[k] = append(client[k], a.Parts[Client])
		ttft[k] = append(ttft[k], a.TTFTMs)
	}
	var out []string
	marked := map[key][]string{}
	for i := range rec.Runs {
		rr := &rec.Runs[i]
		for j := range rr.Levels {
			lr := &rr.Levels[j]
			k := key{rr.Run, lr.OfferedQPS}
			c := client[k]
			if len(c) == 0 {
				continue
			}
			p99, p50 := slo.NearestRank(c, 99), slo.NearestRank(c, 50)
			medTTFT := slo.NearestRank(ttft[k], 50)
			var detail string
			// The scale that would clear both bounds: the residual is the
			// host's (client and hops, wall time), the rest of the median
			// TTFT the engines' (see replay.Reason.Scale).
			lim99 := schema.ClientBoundSLOFraction * rec.SLO.TTFTMillis
			scale := max(p99/lim99, replay.ScaleToShare(p50, p50, medTTFT-p50, schema.ClientBoundTTFTFraction))
			if !(medTTFT-p50 > 0) {
				scale = 0
			}
			if lim := lim99; p99 > lim {
				detail = fmt.Sprintf("p99 client/proxy residual %.3g ms > %g%% of the %g ms TTFT SLO (%.3g ms): the client side, not the engines, moved TTFT",
					p99, 100*schema.ClientBoundSLOFraction, rec.SLO.TTFTMillis, lim)
			} else if lim := schema.ClientBoundTTFTFraction * medTTFT; p50 > lim {
				detail = fmt.Sprintf("median client/proxy residual %.3g ms > %g%% of the median TTFT %.3g ms: the client side, not the engines, moved TTFT",
					p50, 100*schema.ClientBoundTTFTFraction, medTTFT)
			}
			if detail == "" {
				continue
			}
			lr.InvalidateScaled(schema.ReasonClientBound, scale, "%s", detail)
			marked[k] = invalidCodes(lr.Verdict)
			out = append(out, fmt.Sprintf("run %d, %g req/s: %s: %s", rr.Run+1, lr.OfferedQPS, schema.ReasonClientBound, detail))
		}
	}
	if skipped > 0 {
		out = append(out, fmt.Sprintf("%d requests without a proxy timeline were not judged: in a disaggregated deployment their residual holds the prefill leg", skipped))
	}
	if len(marked) == 0 {
		return out
	}
	replay.Judge(rec)
	for i := range atts {
		if c, ok := marked[key{atts[i].Run, atts[i].OfferedQPS}]; ok {
			atts[i].Invalid = c
		}
	}
	return out
}

// RecordEvidence is the evidence a record carries on its own, as `hone
// diagnose report` reads it when given nothing more: no proxy timelines
// and no kernel evidence; the token budget and max-num-seqs from its
// config; the first token's head counted with prefill for the emulator
// (HeadWithFirstToken), apart for vLLM (HeadSeparate).
func RecordEvidence(rec *schema.Record) Evidence {
	ev := Evidence{Source: EvidenceAuto, TokenBudget: RecordTokenBudget(rec), MaxNumSeqs: RecordKnobs(rec).MaxNumSeqs, Head: HeadSeparate}
	if rec.Kind == schema.KindEmulated {
		ev.Head = HeadWithFirstToken
	}
	return ev
}

// JudgeRecord attributes rec from its own evidence (RecordEvidence) and
// marks its client-bound levels (MarkClientBound), so that hone replay
// stores, and prints, the verdict hone diagnose report reaches on the same
// record: a level's verdict is judged once. It returns MarkClientBound's
// lines.
func JudgeRecord(rec *schema.Record) ([]string, error) {
	atts, err := Attribute(rec, RecordEvidence(rec))
	if err != nil {
		return nil, err
	}
	return MarkClientBound(rec, atts), nil
}

// disaggregated reads the record's config for a disaggregated topology
// (hone optimize records its deployment spec there).
func disaggregated(rec *schema.Record) bool {
	t, _, err := rec.Config.Topology()
	return err == nil && t.Kind == "disaggregated"
}
