package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/slo"
)

// capacityFlags are --capacity and its settings (hone predict, hone
// replay).
type capacityFlags struct {
	on        bool
	mode      string
	precision float64
	start     float64
	max       float64
}

func (cf *capacityFlags) register(c *cobra.Command) {
	f := c.Flags()
	f.BoolVar(&cf.on, "capacity", false, "find the capacity instead of scanning --qps: the largest load that meets the SLO at steady state, by bracketing and bisection (see --help)")
	f.StringVar(&cf.mode, "capacity-mode", capacity.Open, "with --capacity: open (offered rate, req/s) or closed (clients in flight)")
	f.Float64Var(&cf.precision, "capacity-precision", capacity.DefaultPrecision, "with --capacity: relative precision of the result (0.05: the capacity and the lowest failing load are within 5%)")
	f.Float64Var(&cf.start, "capacity-start", 0, "with --capacity: the first load probed, e.g. a predicted capacity (0: 1 req/s or 1 client)")
	f.Float64Var(&cf.max, "capacity-max", 0, "with --capacity: the largest load probed (0: 4096); a pass there is reported as a lower bound")
}

// check validates the flags: the --capacity-* settings only with
// --capacity, and --capacity never with a fixed set of levels.
func (cf *capacityFlags) check(c *cobra.Command, levelFlags ...string) error {
	f := c.Flags()
	if !cf.on {
		for _, n := range []string{"capacity-mode", "capacity-precision", "capacity-start", "capacity-max"} {
			if f.Changed(n) {
				return badInput("--%s: only with --capacity", n)
			}
		}
		return nil
	}
	for _, n := range levelFlags {
		if f.Changed(n) {
			return badInput("--%s: --capacity chooses its own loads; give one or the other", n)
		}
	}
	switch {
	case cf.mode != capacity.Open && cf.mode != capacity.Closed:
		return badInput("--capacity-mode: %q: want open (offered rate) or closed (clients in flight)", cf.mode)
	case !(cf.precision > 0 && cf.precision < 1):
		return badInput("--capacity-precision: want a fraction in (0, 1), e.g. 0.05, got %v", cf.precision)
	case !(cf.start >= 0) || cf.start > 1e6:
		return badInput("--capacity-start: want 0 (start at 1) or a positive load, got %v", cf.start)
	case !(cf.max >= 0) || cf.max > 1e6 || cf.max > 0 && cf.max < cf.start:
		return badInput("--capacity-max: want 0 (4096) or a load at least --capacity-start, got %v", cf.max)
	}
	return nil
}

// options are the search's settings for target with at least minMeasured
// window requests per probe.
func (cf *capacityFlags) options(target slo.SLO, minMeasured int, progress io.Writer) capacity.Options {
	o := capacity.Options{Mode: cf.mode, SLO: target, Precision: cf.precision, Start: cf.start, Max: cf.max, MinRequests: minMeasured}
	if progress != nil {
		o.Progress = func(p capacity.Probe) { fmt.Fprintln(progress, capacity.ProgressLine(cf.mode, p)) }
	}
	return o
}
