package predict

import (
	"context"
	"fmt"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// Capacity searches spec's capacity in virtual time (capacity.Search):
// each probe is one level on fresh engines, as long as the window rule
// asks, of opts.Workload's shape (its Requests is only a floor:
// copts.MinRequests). opts.QPS and opts.Concurrency are not read.
func Capacity(ctx context.Context, spec *deploy.Spec, opts Options, copts capacity.Options) (*capacity.Result, error) {
	probe, err := Prober(spec, opts, copts.Mode)
	if err != nil {
		return nil, err
	}
	return capacity.Search(ctx, probe, copts)
}

// CapacityRecord is Capacity's result as hone writes it: with the
// predicted record's header (deployment, workload, SLO, procedure), so
// that hone gate can compare it.
func CapacityRecord(ctx context.Context, spec *deploy.Spec, opts Options, copts capacity.Options) (*capacity.Record, error) {
	res, err := Capacity(ctx, spec, opts, copts)
	if err != nil {
		return nil, err
	}
	prof, err := profileFor(spec, opts)
	if err != nil {
		return nil, err
	}
	prompts, err := promptsFor(opts.Workload)
	if err != nil {
		return nil, err
	}
	o := opts
	o.QPS, o.Concurrency = nil, nil
	return &capacity.Record{Kind: Kind, Source: "profile " + prof.Name, Header: capacity.HeaderOf(header(spec, prof, o, prompts)), Capacity: res}, nil
}

// Prober is a capacity.Prober in virtual time for spec: one cold level per
// probe, open loop at the planned rate or closed loop of the planned
// clients (mode), with every request's record.
func Prober(spec *deploy.Spec, opts Options, mode string) (capacity.Prober, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	prof, err := profileFor(spec, opts)
	if err != nil {
		return nil, err
	}
	if err := replay.ParamsOf(opts.Workload, 1).Validate(); err != nil {
		return nil, err
	}
	cl, err := clusterOf(spec, prof)
	if err != nil {
		return nil, err
	}
	gpus := spec.GPUsNeeded()
	var bufs []promptBuf
	return func(ctx context.Context, p capacity.Plan) (*schema.LevelRecord, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w := opts.Workload
		w.Requests = p.Requests
		prompts, err := promptsFor(w)
		if err != nil {
			return nil, err
		}
		key := p.Load
		if mode == capacity.Closed {
			key = replay.ClosedLevelKey(int(p.Load))
		}
		o := opts
		o.KeepRequests = false // the records' timings are kept; engine metrics are not needed
		lr, err := cl.level(prompts, key, o, gpus, &bufs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", replay.LevelOf(key).Name(), err)
		}
		return &lr, nil
	}, nil
}
