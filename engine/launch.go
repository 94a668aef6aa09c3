package engine

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Roles of a worker.
const (
	RoleColocated = "colocated"
	RolePrefill   = "prefill"
	RoleDecode    = "decode"
)

// KV connectors of disaggregated topologies (vLLM's names; the emulator
// speaks NixlConnector's protocol).
const (
	NixlConnector    = "NixlConnector"
	P2pNcclConnector = "P2pNcclConnector"
)

// Launch is what Render needs to spell one worker: a validated
// deployment (deploy.Spec, flattened) and the worker's place in it.
type Launch struct {
	Bin    string // argv[0]
	Worker Worker
	Model  Model
	// DType and KVCacheDType are spec.precision's; "": the engine's default.
	DType, KVCacheDType string
	Knobs               Knobs
	// KV is the disaggregated topology's KV transfer; nil when colocated.
	KV *KV
	// Emulation is spec.emulator, for emulated engines.
	Emulation Emulation
	// ColdStartReset: the spec's cold start is a cache reset, so the
	// worker must serve Facts().Cache.ResetRoute.
	ColdStartReset bool
	// Features are what the installed release has (Facts.Versioned
	// engines: Adapter.Adapt decides them).
	Features Features
}

// Worker is the worker's place: its name, role, address, GPUs and KV ports.
type Worker struct {
	Name, Role string
	Host       string
	Port       int
	GPUs       []int
	// KVPorts are the ports it may bind for KV transfer, one per rank.
	KVPorts []int
}

// Model names the weights: ID (hub) or Path (local), the pinned
// Revision, ServedName as the spec gives it and Served, the name clients
// send.
type Model struct {
	ID, Path, Revision string
	ServedName, Served string
}

// Knobs are spec.knobs.
type Knobs struct {
	PrefixCaching        *bool
	MaxNumSeqs           int
	MaxNumBatchedTokens  int
	GPUMemoryUtilization float64
	BlockSize            int
	MaxModelLen          int
	EnforceEager         bool
	CUDAGraphMode        string
	SpeculativeNgram     *Ngram
	ExtraArgs            []string
}

// Ngram is n-gram speculative decoding.
type Ngram struct {
	NumSpeculativeTokens, PromptLookupMax, PromptLookupMin int
}

// KV is a disaggregated topology's KV transfer.
type KV struct {
	Connector string
	// ProxyHost and DiscoveryPort are where P2pNcclConnector workers
	// find the proxy.
	ProxyHost         string
	DiscoveryPort     int
	BufferSize        string
	LoadFailurePolicy string
}

// Emulation is spec.emulator for this worker.
type Emulation struct {
	Profile   string
	TimeScale float64
	// TraceFile is this worker's trace file; "": none.
	TraceFile string
	// Faults are the faults injected into this worker.
	Faults []string
}

// Features are what an installed, versioned engine has.
type Features struct {
	PerRequestMetrics bool // it reports per-request metrics when asked
	StableRequestIDs  bool // it must be told to keep the request ids it is sent
}

// SizeArgs spells the knobs vLLM and the emulator take under the same
// flags (batch, memory and length limits); zero leaves the engine's
// default.
func SizeArgs(argv []string, k Knobs) []string {
	if k.MaxNumSeqs > 0 {
		argv = append(argv, "--max-num-seqs", strconv.Itoa(k.MaxNumSeqs))
	}
	if k.MaxNumBatchedTokens > 0 {
		argv = append(argv, "--max-num-batched-tokens", strconv.Itoa(k.MaxNumBatchedTokens))
	}
	if k.GPUMemoryUtilization > 0 {
		argv = append(argv, "--gpu-memory-utilization", strconv.FormatFloat(k.GPUMemoryUtilization, 'f', -1, 64))
	}
	if k.BlockSize > 0 {
		argv = append(argv, "--block-size", strconv.Itoa(k.BlockSize))
	}
	if k.MaxModelLen > 0 {
		argv = append(argv, "--max-model-len", strconv.Itoa(k.MaxModelLen))
	}
	return argv
}

// VisibleDevices is CUDA_VISIBLE_DEVICES for the worker's GPUs.
func (w Worker) VisibleDevices() string {
	s := make([]string, len(w.GPUs))
	for i, x := range w.GPUs {
		s[i] = strconv.Itoa(x)
	}
	return "CUDA_VISIBLE_DEVICES=" + strings.Join(s, ",")
}

// P2PHost is the address a P2pNcclConnector worker binds its KV socket
// on and the proxy writes into request ids. The engine binds
// f"{get_ip()}:{kv_port + rank}" (p2p_nccl_engine.py P2pNcclEngine.__init__,
// hostname "" from p2p_nccl_connector.py) and get_ip() returns VLLM_HOST_IP
// when set (vllm/utils/network_utils.py get_ip), else the default-route
// address; kv_ip is not read. ZMQ binds an IP, so localhost becomes
// 127.0.0.1.
func P2PHost(h string) string {
	if h == "localhost" {
		return "127.0.0.1"
	}
	return h
}

func mustJSON(v any) string {
	b, err := json.Marshal(v) // maps marshal with sorted keys: stable output
	if err != nil {
		panic(err)
	}
	return string(b)
}
