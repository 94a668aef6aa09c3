package replay

import (
	"fmt"
	"io"

	"github.com/hone-llm/hone/schema"
)

// WriteTraceHitRates prints the trace's implied and measured hit rates.
func WriteTraceHitRates(w io.Writer, rec *schema.Record) {
	t := rec.Workload.Trace
	if t == nil {
		return
	}
	fmt.Fprintf(w, "trace (%s, sha256 %.12s, %d requests, speed %g, %d-token blocks): prefix-cache hit rate implied %.2f%% (%d-token engine blocks), ",
		traceName(t), t.SHA256, t.Requests, t.Speed, t.BlockSize, 100*t.ImpliedHitRate, t.EngineBlockSize)
	if t.MeasuredHitRate != nil {
		what := "measured"
		if rec.Kind == schema.KindPredicted {
			what = string(schema.KindPredicted)
		}
		fmt.Fprintf(w, "%s %.2f%%\n", what, 100**t.MeasuredHitRate)
	} else {
		fmt.Fprintln(w, "measured: not reported by the engine")
	}
	if t.FirstTokenReuses > 0 {
		fmt.Fprintf(w, "trace: %d blocks followed a chain with more successors than the vocabulary has first-token ids: each shares one token more than its hash ids say\n", t.FirstTokenReuses)
	}
}

func traceName(t *schema.TraceInfo) string {
	if t.Format == TraceRecord {
		return "a run record's requests"
	}
	return "Mooncake JSONL"
}
