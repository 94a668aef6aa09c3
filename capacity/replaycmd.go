package capacity

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// ReplaySearch is hone replay --capacity: the search (its settings from
// the --capacity-* flags) whose probes are one-level replays against an
// endpoint, and where its result goes. Its Run is replay.CommandOptions'
// Capacity.
type ReplaySearch struct {
	Search Options   // --capacity-mode, --capacity-precision, --capacity-start, --capacity-max
	Format string    // -o: table or json
	Out    string    // --out: the result, as JSON
	Stdout io.Writer // gets the result as Format says
}

// Run searches the capacity of the endpoint run replays against, each
// probe one level of a one-run replay (ReplayProber), writes the result
// (Write) and judges it: bad input is a usage.Error; an interrupted or
// failed search, or one that found no passing load, a usage.Failed.
func (s ReplaySearch) Run(ctx context.Context, run replay.Options, pp *replay.ProgressPrinter) error {
	var kind schema.Kind
	var header *schema.Record
	probe := ReplayProber(run, s.Search.Mode, func(rec *schema.Record) {
		pp.Close()
		kind = rec.Kind
		if header == nil {
			header = HeaderOf(rec)
		}
	})
	res, err := Search(ctx, probe, s.Search)
	var pe *replay.ParamError
	var me *replay.ModelError
	switch {
	case errors.As(err, &pe):
		return replay.ParamUsage(pe)
	case errors.As(err, &me):
		return usage.Errorf("--model: %v", err)
	}
	if res == nil {
		return usage.Failed{Msg: fmt.Sprintf("capacity: %v", err)}
	}
	if kind == "" {
		kind = schema.KindUnverified
	}
	if werr := Write(s.Stdout, s.Format, s.Out, &Record{Kind: kind, Source: "endpoint " + run.Endpoint, Header: header, Capacity: res}); werr != nil {
		return werr
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return usage.Failed{Msg: fmt.Sprintf("interrupted after %d probes (written to %s)", len(res.Probes), s.Out)}
	case err != nil:
		return usage.Failed{Msg: fmt.Sprintf("capacity: %v (the probes so far are in %s)", err, s.Out)}
	case !res.Bounded && res.Value == 0:
		return usage.Failed{Msg: "capacity: " + res.Note}
	}
	return nil
}
