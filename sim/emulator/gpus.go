package emulator

import (
	"fmt"
	"sort"
	"strings"
)

// GPUs are the datasheet figures of the GPUs hone's measured and derived
// profiles name, keyed as ai-dynamo/aiconfigurator's systems/ files are
// (testdata/aiconfigurator/systems/*.yaml: mem_capacity, bfloat16_tc_flops,
// mem_bw, intra_node_bw, p2p_latency). LinkBytesSec is the KV-transfer
// link, taken as two thirds of NVLink's per-direction bandwidth, as the
// hand-made H200 profile does.
var GPUs = map[string]GPU{
	"b300_sxm": {Name: "NVIDIA B300 SXM", MemoryBytes: 288400343040, PeakFLOPS: 2250e12, MemBandwidth: 7.75e12,
		LinkBytesSec: 600e9, InterconnectBytesSec: 900e9, InterconnectLatencyUs: 10},
	"h100_sxm": {Name: "NVIDIA H100 SXM", MemoryBytes: 85899345920, PeakFLOPS: 989e12, MemBandwidth: 3.35e12,
		LinkBytesSec: 300e9, InterconnectBytesSec: 450e9, InterconnectLatencyUs: 10},
	"h200_sxm": {Name: "NVIDIA H200 SXM", MemoryBytes: 151397597184, PeakFLOPS: 989e12, MemBandwidth: 4.8e12,
		LinkBytesSec: 300e9, InterconnectBytesSec: 450e9, InterconnectLatencyUs: 10},
}

// LookupGPU returns the named GPU's figures; the error lists the known names.
func LookupGPU(name string) (GPU, error) {
	g, ok := GPUs[strings.ToLower(name)]
	if !ok {
		var names []string
		for n := range GPUs {
			names = append(names, n)
		}
		sort.Strings(names)
		return GPU{}, fmt.Errorf("unknown GPU %q: want one of %s", name, strings.Join(names, ", "))
	}
	return g, nil
}

// ServingDefaults are the max_num_seqs and max_num_batched_tokens vLLM's
// OpenAI server picks on a GPU when none is given (EngineArgs.
// get_batch_defaults): 1024 and 8192 on GPUs of 70 GiB or more other than
// the A100, 256 and 2048 on the rest.
func ServingDefaults(g GPU) (maxNumSeqs, maxNumBatchedTokens int) {
	if g.MemoryBytes >= 70*gib && !strings.Contains(strings.ToLower(g.Name), "a100") {
		return 1024, 8192
	}
	return 256, 2048
}
