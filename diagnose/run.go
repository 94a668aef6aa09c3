package diagnose

import (
	"errors"
	"fmt"

	"github.com/hone-llm/hone/schema"
)

// Result is a record's diagnosis, with what it was made of.
type Result struct {
	// Diagnosis names the bottleneck (SummarizeKnobs).
	Diagnosis Diagnosis
	// ClientBound are the levels the client/proxy residual made invalid
	// (MarkClientBound).
	ClientBound []string
	// Attributions are the split requests, Unjoined those left out per
	// level (Joined); Measured counts both.
	Attributions []Attribution
	Unjoined     []UnjoinedLevel
	Measured     int
}

// errNoneJoined: kernel evidence alone was asked for, and none of the
// measured requests joined theirs.
var errNoneJoined = errors.New("no measured request joined its kernel evidence")

// Diagnose attributes each measured request of rec by ev (Attribute),
// leaves out those without a split (Joined; with ev.Source EvidenceKernel,
// those without the kernel's), re-judges rec's levels by their client/proxy
// residual (MarkClientBound: it marks rec and the attributions in place),
// and names the bottleneck by the valid levels with knobs (SummarizeRecord). It is
// what hone diagnose report and the optimizer's trials both diagnose by.
func Diagnose(rec *schema.Record, ev Evidence, knobs Knobs) (Result, error) {
	atts, err := Attribute(rec, ev)
	if err != nil {
		return Result{}, err
	}
	r := Result{Measured: len(atts)}
	if r.Attributions, r.Unjoined = Joined(atts, ev.Source == EvidenceKernel); len(r.Attributions) == 0 {
		return r, errNoneJoined
	}
	r.ClientBound = MarkClientBound(rec, r.Attributions)
	r.Diagnosis = SummarizeRecord(rec, r.Attributions, knobs)
	return r, nil
}

// SummarizeRecord names the bottleneck of rec's attributions (SummarizeKnobs):
// p99 TPOT from the valid levels only, since an invalid level decides
// nothing.
func SummarizeRecord(rec *schema.Record, atts []Attribution, knobs Knobs) Diagnosis {
	tpot := map[float64]float64{}
	for _, run := range rec.Runs {
		for _, l := range run.Levels {
			if l.Verdict.Valid {
				tpot[l.OfferedQPS] = max(tpot[l.OfferedQPS], l.P99TPOTMs)
			}
		}
	}
	return SummarizeKnobs(rec.Kind, atts, rec.SLO, tpot, knobs)
}

// noneJoined words errNoneJoined for --evidence source.
func noneJoined(source string, measured int) error {
	return fmt.Errorf("--evidence %s: none of the %d measured requests joined its kernel evidence "+
		"(the snapshot's exchanges, steps and, disaggregated, KV connections; was the daemon tracing the engines "+
		"with their API ports in --http-ports and libcuda probed, on this host, during the run?)", source, measured)
}
