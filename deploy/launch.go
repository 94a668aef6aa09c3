package deploy

import (
	"cmp"
	"strings"

	"github.com/hone-llm/hone/engine"
)

// bin is argv[0] for e's workers: RenderOptions.Bins, else the option
// that names it, else the engine's own default.
func (o RenderOptions) bin(e engine.Engine) string {
	named := map[string]string{engine.VLLM: o.VLLM, engine.Emulator: o.Hone}
	return cmp.Or(o.Bins[e.Name()], named[e.Name()], e.Facts().Binary)
}

// launch is what the engine needs to render worker w of a valid spec,
// with the features of the installed release (engine.Adaptation); with
// no worker, what an engine.Adapter checks the spec by.
func (s *Spec) launch(bin string, w Worker, features engine.Features) engine.Launch {
	k := s.Knobs
	l := engine.Launch{
		Bin: bin,
		Worker: engine.Worker{Name: w.Name, Role: w.Role, Host: w.Host, Port: w.Port,
			GPUs: w.GPUs, KVPorts: w.KVPorts},
		Model: engine.Model{ID: s.Model.ID, Path: s.Model.Path, Revision: s.Model.Revision,
			ServedName: s.Model.ServedName, Served: s.ServedName()},
		DType: s.Precision.DType, KVCacheDType: s.Precision.KVCacheDType,
		Knobs: engine.Knobs{PrefixCaching: k.PrefixCaching, MaxNumSeqs: k.MaxNumSeqs,
			MaxNumBatchedTokens: k.MaxNumBatchedTokens, GPUMemoryUtilization: k.GPUMemoryUtilization,
			BlockSize: k.BlockSize, MaxModelLen: k.MaxModelLen, EnforceEager: k.EnforceEager,
			CUDAGraphMode: k.CUDAGraphMode, ExtraArgs: k.ExtraArgs},
		Emulation:      engine.Emulation{Profile: s.Emulator.Profile, TimeScale: s.Emulator.TimeScale},
		ColdStartReset: s.ColdStart == ColdStartReset,
		Features:       features,
	}
	if n := k.SpeculativeNgram; n != nil {
		l.Knobs.SpeculativeNgram = &engine.Ngram{NumSpeculativeTokens: n.NumSpeculativeTokens,
			PromptLookupMax: n.PromptLookupMax, PromptLookupMin: n.PromptLookupMin}
	}
	if s.Topology.Kind == Disaggregated {
		l.KV = &engine.KV{Connector: s.KV.Name, ProxyHost: s.Network.Host, DiscoveryPort: s.KV.DiscoveryPort,
			BufferSize: s.KV.BufferSize, LoadFailurePolicy: s.KV.LoadFailurePolicy}
	}
	if d := s.Emulator.TraceDir; d != "" {
		l.Emulation.TraceFile = engine.TraceFile(d, w.Name)
	}
	for _, f := range s.Emulator.Faults {
		if name, fault, _ := strings.Cut(f, "="); name == w.Name {
			l.Emulation.Faults = append(l.Emulation.Faults, fault)
		}
	}
	return l
}
