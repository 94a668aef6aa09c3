package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hone-llm/hone/schema"

	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/sim/emulator"
)

// Engines a spec can name: engine.Names(); these two are always there.
const (
	EngineVLLM     = engine.VLLM
	EngineEmulator = engine.Emulator
)

// Topology kinds.
const (
	Colocated     = "colocated"
	Disaggregated = "disaggregated"
)

// KV connectors for disaggregated topologies.
const (
	NixlConnector    = engine.NixlConnector
	P2pNcclConnector = engine.P2pNcclConnector
)

// Routing policies of the proxy.
const (
	SessionAffinity = "session_affinity"
	RoundRobin      = "round_robin"
)

// Spec is a deployment: which engine serves which model on which GPUs, split
// how, with which knobs, behind which routing. It is the unit the optimizer
// compares; a YAML file holds one.
type Spec struct {
	Name      string      `yaml:"name" json:"name"`
	Engine    string      `yaml:"engine" json:"engine"`
	Model     Model       `yaml:"model" json:"model"`
	Precision Precision   `yaml:"precision" json:"precision"`
	GPUs      GPUs        `yaml:"gpus" json:"gpus"`
	Topology  Topology    `yaml:"topology" json:"topology"`
	KV        KVConnector `yaml:"kv_connector" json:"kv_connector"`
	Knobs     Knobs       `yaml:"knobs" json:"knobs"`
	Routing   Routing     `yaml:"routing" json:"routing"`
	Network   Network     `yaml:"network" json:"network"`
	Emulator  Emulator    `yaml:"emulator" json:"emulator"`
	// EngineEnv is added to the environment of every engine process
	// (vLLM or the emulator), e.g. VLLM_LOGGING_LEVEL or HF_HUB_OFFLINE.
	// Keys are environment variable names; those hone sets itself
	// (reservedEngineEnv) are refused, naming the key.
	EngineEnv map[string]string `yaml:"engine_env" json:"engine_env,omitempty"`
	// ColdStart is how a measurement of this deployment empties the
	// prefix cache before every level: ColdStartReset, ColdStartFresh, or
	// "" to leave it to hone replay --cache (which probes). Reset renders
	// VLLM_SERVER_DEV_MODE=1 into every vLLM worker, because vLLM serves
	// POST /reset_prefix_cache only in development mode.
	ColdStart string `yaml:"cold_start" json:"cold_start,omitempty"`
	// Objective is what hone optimize selects for; empty: the most
	// capacity within the GPU budget.
	Objective Objective `yaml:"objective" json:"objective,omitzero"`
}

// Objective is a selection's goal (spec.objective): GoalCapacity (the
// most capacity within the budget), GoalCheapest (the fewest GPUs whose
// capacity meets TargetQPS, then the most capacity) or GoalPerGPU (the
// most capacity per GPU).
type Objective struct {
	Goal      string  `yaml:"goal" json:"goal,omitempty"`
	TargetQPS float64 `yaml:"target_qps" json:"target_qps,omitempty"`
}

// Goals of spec.objective.goal.
const (
	GoalCapacity = "capacity"
	GoalCheapest = "cheapest"
	GoalPerGPU   = "capacity_per_gpu"
)

// Cold-start procedures a spec can ask for (spec.cold_start), as hone
// replay records them (replay.CacheReset, replay.CacheFreshPrefixes).
const (
	ColdStartReset = "reset_prefix_cache"
	ColdStartFresh = "fresh_prefixes"
)

// EnvServerDevMode is vLLM's development mode switch (vllm/envs.py): with
// it set to 1 the API server also serves POST /reset_prefix_cache, and
// with it /sleep, /wake_up, /collective_rpc and other admin routes, none
// of them authenticated (engine.FeatureServerDevMode).
const EnvServerDevMode = engine.EnvServerDevMode

// reservedEngineEnv is the variable Render sets itself, from spec.%s, for
// every engine, where spec.engine_env may not set it; the engine's own
// are its Facts.ReservedEnv.
func (s *Spec) reservedEngineEnv(k string) (string, bool) {
	if k == "CUDA_VISIBLE_DEVICES" {
		return "gpus.ids", true
	}
	from, ok := s.facts().ReservedEnv[k]
	return from, ok
}

// Model names the weights. Exactly one of ID (a hub id, with a pinned
// Revision) and Path (a local directory, whose file hashes are recorded at
// deploy time) is set.
type Model struct {
	ID         string `yaml:"id" json:"id,omitempty"`
	Revision   string `yaml:"revision" json:"revision,omitempty"`
	Path       string `yaml:"path" json:"path,omitempty"`
	ServedName string `yaml:"served_name" json:"served_name,omitempty"`
}

// Precision of weights and KV cache.
type Precision struct {
	DType        string `yaml:"dtype" json:"dtype,omitempty"`
	KVCacheDType string `yaml:"kv_cache_dtype" json:"kv_cache_dtype,omitempty"`
}

// GPUs is the budget: how many GPUs the deployment may use and which.
type GPUs struct {
	Budget int   `yaml:"budget" json:"budget"`
	IDs    []int `yaml:"ids" json:"ids,omitempty"`
}

// KVConnector configures KV transfer between prefill and decode workers.
type KVConnector struct {
	Name string `yaml:"name" json:"name,omitempty"`
	// SideChannelPort is the first VLLM_NIXL_SIDE_CHANNEL_PORT. Each
	// worker gets one port per tensor-parallel rank: worker i's is
	// SideChannelPort plus the TP of the workers before it (prefill
	// workers first, then decode), so no two workers on a host share one.
	SideChannelPort int `yaml:"side_channel_port" json:"side_channel_port,omitempty"`
	// KVPort is P2pNcclConnector's first kv_port, laid out like
	// SideChannelPort: the engine binds kv_port + rank.
	KVPort int `yaml:"kv_port" json:"kv_port,omitempty"`
	// DiscoveryPort is where P2pNcclConnector workers announce themselves
	// over ZMQ (its proxy_port). hone's proxy knows every address from the
	// spec and needs no announcements, so nothing has to listen there; it
	// only must not be the HTTP proxy's port.
	DiscoveryPort int `yaml:"discovery_port" json:"discovery_port,omitempty"`
	// BufferSize is P2pNcclConnector's kv_buffer_size in bytes ("1e9").
	BufferSize string `yaml:"buffer_size" json:"buffer_size,omitempty"`
	// LoadFailurePolicy is vLLM's kv_load_failure_policy (recompute | fail);
	// empty leaves vLLM's default.
	LoadFailurePolicy string `yaml:"load_failure_policy" json:"load_failure_policy,omitempty"`
}

// The topology and knobs sections are stated in package schema, since a
// run record's config carries them (schema.Config.Topology, Knobs).
type (
	Topology = schema.Topology
	Pool     = schema.Pool
	Knobs    = schema.Knobs
	Ngram    = schema.Ngram
)

// Routing configures the proxy in front of the workers.
type Routing struct {
	Policy string `yaml:"policy" json:"policy"`
	// SessionHeader, when a request carries it, is the affinity key;
	// otherwise the prompt's leading AffinityTokens tokens are.
	SessionHeader  string `yaml:"session_header" json:"session_header,omitempty"`
	AffinityTokens int    `yaml:"affinity_tokens" json:"affinity_tokens,omitempty"`
	// Per-leg timeouts: a prefill answer; a decode worker's first byte; the
	// longest silence inside a decode stream.
	PrefillTimeout    Duration `yaml:"prefill_timeout" json:"prefill_timeout,omitempty"`
	DecodeTimeout     Duration `yaml:"decode_timeout" json:"decode_timeout,omitempty"`
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout" json:"stream_idle_timeout,omitempty"`
	HealthInterval    Duration `yaml:"health_interval" json:"health_interval,omitempty"`
}

// Network places the proxy and workers.
type Network struct {
	Host       string `yaml:"host" json:"host"`
	ProxyPort  int    `yaml:"proxy_port" json:"proxy_port"`
	WorkerPort int    `yaml:"worker_port" json:"worker_port"` // first worker's; worker i gets WorkerPort+i
}

// Emulator settings, for engine: emulator.
type Emulator struct {
	Profile   string   `yaml:"profile" json:"profile,omitempty"`
	TimeScale float64  `yaml:"time_scale" json:"time_scale,omitempty"`
	TraceDir  string   `yaml:"trace_dir" json:"trace_dir,omitempty"`
	Faults    []string `yaml:"faults" json:"faults,omitempty"` // per worker name: "prefill-0=crash-after=5"
}

// Duration is a time.Duration written as "30s" in YAML and JSON.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: want a duration like 30s, got %q", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Defaults filled in by Parse when a field is absent.
const (
	DefaultHost            = "127.0.0.1"
	DefaultProxyPort       = 8000
	DefaultWorkerPort      = 8100
	DefaultSideChannelPort = 5600
	DefaultKVPort          = 21001
	DefaultDiscoveryPort   = 30001
	DefaultAffinityTokens  = 256
	DefaultSessionHeader   = "X-Session-Id"
)

// MaxTimeScale is the largest emulator.time_scale (wall seconds per model
// second).
const MaxTimeScale = 1000

// MaxGPUBudget is the largest spec.gpus.budget: far above any host's GPUs,
// small enough that default ids and the topology's GPU count stay cheap
// and cannot overflow.
const MaxGPUBudget = 1024

// LoadSpec reads and validates a spec file.
func LoadSpec(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	s, err := parseSpec(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseSpec decodes YAML strictly (an unknown field is an error), fills
// defaults and validates.
// A relative model.path is taken from the current directory.
func ParseSpec(b []byte) (*Spec, error) { return parseSpec(b, "") }

// parseSpec resolves a relative model.path against dir (the spec file's).
func parseSpec(b []byte, dir string) (*Spec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("spec: empty document")
		}
		return nil, fmt.Errorf("spec: %w", specYAMLError(err))
	}
	if p := s.Model.Path; p != "" && dir != "" && !filepath.IsAbs(p) {
		s.Model.Path = filepath.Join(dir, p)
	}
	s.fillDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Spec) fillDefaults() {
	n := &s.Network
	if n.Host == "" {
		n.Host = DefaultHost
	}
	if n.ProxyPort == 0 {
		n.ProxyPort = DefaultProxyPort
	}
	if n.WorkerPort == 0 {
		n.WorkerPort = DefaultWorkerPort
	}
	if s.Topology.Kind == Disaggregated {
		if s.KV.Name == "" {
			s.KV.Name = NixlConnector
		}
		if s.KV.Name == NixlConnector && s.KV.SideChannelPort == 0 {
			s.KV.SideChannelPort = DefaultSideChannelPort
		}
		if s.KV.Name == P2pNcclConnector && s.KV.KVPort == 0 {
			s.KV.KVPort = DefaultKVPort
		}
		if s.KV.Name == P2pNcclConnector && s.KV.DiscoveryPort == 0 {
			s.KV.DiscoveryPort = DefaultDiscoveryPort
		}
	}
	if s.Routing.Policy == "" {
		s.Routing.Policy = SessionAffinity
	}
	if s.Routing.SessionHeader == "" {
		s.Routing.SessionHeader = DefaultSessionHeader
	}
	if s.Routing.AffinityTokens == 0 {
		s.Routing.AffinityTokens = DefaultAffinityTokens
	}
	// Only a budget Validate can accept gets default ids: a huge one
	// would allocate without bound before validation refused it.
	if len(s.GPUs.IDs) == 0 && s.GPUs.Budget > 0 && s.GPUs.Budget <= MaxGPUBudget {
		for i := range s.GPUs.Budget {
			s.GPUs.IDs = append(s.GPUs.IDs, i)
		}
	}
	if engine.Emulated(s.Engine) && s.Emulator.TimeScale == 0 {
		s.Emulator.TimeScale = 1
	}
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// GPUsNeeded is the number of GPUs the topology's workers use.
func (s *Spec) GPUsNeeded() int {
	t := s.Topology
	if t.Kind == Disaggregated && t.Prefill != nil && t.Decode != nil {
		return t.Prefill.Replicas*t.Prefill.TP + t.Decode.Replicas*t.Decode.TP
	}
	return t.Replicas * t.TP
}

// Validate checks every field and returns the first problem, naming the
// field by its YAML path ("spec.topology.prefill.replicas: want >= 1").
// Sections are checked in this order, each field in the order of its
// section's function.
func (s *Spec) Validate() error {
	for _, check := range []func() error{
		s.validateNameEngine,
		s.validateModel,
		s.validatePrecision,
		s.validateGPUs,
		s.validateTopology,
		s.validateKVConnector,
		s.validateBudget,
		s.validateKnobs,
		s.validateRouting,
		s.validateNetwork,
		s.validateEmulator,
		s.validateEngineEnv,
		s.validateColdStart,
		s.validateObjective,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// badField is Validate's error: "spec.<field>: <message>".
func badField(field, format string, args ...any) error {
	return fmt.Errorf("spec.%s: %s", field, fmt.Sprintf(format, args...))
}

func (s *Spec) validateNameEngine() error {
	if !nameRE.MatchString(s.Name) {
		return badField("name", "want lowercase letters, digits, '.', '_' or '-' (1-63, starting alphanumeric), got %q", s.Name)
	}
	if _, ok := engine.Lookup(s.Engine); !ok {
		return badField("engine", "want %s, got %q", orList(engine.Names()), s.Engine)
	}
	return nil
}

// validateModel checks spec.model; it needs a valid engine.
func (s *Spec) validateModel() error {
	m := s.Model
	switch {
	case m.ID == "" && m.Path == "":
		return badField("model", "want id (a hub id) or path (a local directory)")
	case m.ID != "" && m.Path != "":
		return badField("model", "want id or path, not both")
	case m.Path != "":
		if m.Revision != "" {
			return badField("model.revision", "a local path has no revision; its file hashes are recorded instead")
		}
		if s.facts().LoadsWeights {
			if fi, err := os.Stat(m.Path); err != nil || !fi.IsDir() {
				return badField("model.path", "want an existing directory, got %q", m.Path)
			}
		}
	case s.facts().LoadsWeights && !commitRE.MatchString(m.Revision):
		return badField("model.revision", "a hub model must be pinned to a 40-hex commit, got %q", m.Revision)
	}
	if strings.ContainsAny(m.ServedName, " \t\n") {
		return badField("model.served_name", "want no whitespace, got %q", m.ServedName)
	}
	return nil
}

func (s *Spec) validatePrecision() error {
	switch s.Precision.DType {
	case "", "auto", "bfloat16", "float16", "float32", "half", "float":
	default:
		return badField("precision.dtype", "want auto, bfloat16, float16 or float32, got %q", s.Precision.DType)
	}
	// vLLM takes exactly the values of its CacheDType literal
	// (vllm/config/cache.py); which of them a given release takes is
	// checked at render time against the installed version
	// (engine.Adapter: bfloat16 from 0.11.0, float16 from 0.18.0).
	if d, f := s.Precision.KVCacheDType, s.facts(); d != "" && !slices.Contains(f.KVCacheDTypes, d) {
		return badField("precision.kv_cache_dtype", "want one of %s (the --kv-cache-dtype values hone renders for %s), got %q",
			strings.Join(f.KVCacheDTypes, ", "), f.Title, d)
	}
	return nil
}

func (s *Spec) validateGPUs() error {
	g := s.GPUs
	if g.Budget < 1 || g.Budget > MaxGPUBudget {
		return badField("gpus.budget", "want 1..%d, got %d", MaxGPUBudget, g.Budget)
	}
	if len(g.IDs) != g.Budget {
		return badField("gpus.ids", "want %d ids (the budget), got %d", g.Budget, len(g.IDs))
	}
	seen := map[int]bool{}
	for i, id := range g.IDs {
		if id < 0 {
			return badField(fmt.Sprintf("gpus.ids[%d]", i), "want >= 0, got %d", id)
		}
		if seen[id] {
			return badField(fmt.Sprintf("gpus.ids[%d]", i), "GPU %d listed twice", id)
		}
		seen[id] = true
	}
	return nil
}

// validateTopology checks spec.topology's kind and its shape: replicas and
// tp when colocated, the prefill and decode pools when disaggregated.
func (s *Spec) validateTopology() error {
	t := s.Topology
	switch t.Kind {
	case Colocated:
		if t.Prefill != nil || t.Decode != nil {
			return badField("topology", "a colocated topology has replicas and tp, not prefill/decode")
		}
		if t.Replicas < 1 {
			return badField("topology.replicas", "want >= 1, got %d", t.Replicas)
		}
		if t.TP < 1 {
			return badField("topology.tp", "want >= 1, got %d", t.TP)
		}
	case Disaggregated:
		if t.Replicas != 0 || t.TP != 0 {
			return badField("topology", "a disaggregated topology has prefill and decode pools, not replicas/tp")
		}
		for _, p := range []struct {
			name string
			pool *Pool
		}{{"prefill", t.Prefill}, {"decode", t.Decode}} {
			if p.pool == nil {
				return badField("topology."+p.name, "missing: want {replicas, tp}")
			}
			if p.pool.Replicas < 1 {
				return badField("topology."+p.name+".replicas", "want >= 1, got %d", p.pool.Replicas)
			}
			if p.pool.TP < 1 {
				return badField("topology."+p.name+".tp", "want >= 1, got %d", p.pool.TP)
			}
		}
	default:
		return badField("topology.kind", "want colocated or disaggregated, got %q", t.Kind)
	}
	return nil
}

// validateKVConnector checks spec.kv_connector against a valid topology:
// none when colocated, one of the two connectors, with only its own
// fields, when disaggregated. Its ports are checked with the network's.
func (s *Spec) validateKVConnector() error {
	kv := s.KV
	if s.Topology.Kind == Colocated {
		if kv.Name != "" {
			return badField("kv_connector", "only a disaggregated topology transfers KV")
		}
		return nil
	}
	switch kv.Name {
	case NixlConnector, P2pNcclConnector:
	default:
		return badField("kv_connector.name", "want NixlConnector or P2pNcclConnector, got %q", kv.Name)
	}
	switch kv.LoadFailurePolicy {
	case "", "recompute", "fail":
	default:
		return badField("kv_connector.load_failure_policy", "want recompute or fail, got %q", kv.LoadFailurePolicy)
	}
	if kv.Name != P2pNcclConnector && (kv.BufferSize != "" || kv.KVPort != 0 || kv.DiscoveryPort != 0) {
		return badField("kv_connector", "buffer_size, kv_port and discovery_port are P2pNcclConnector's")
	}
	if kv.Name == P2pNcclConnector && kv.SideChannelPort != 0 {
		return badField("kv_connector.side_channel_port", "NixlConnector's; P2pNcclConnector uses kv_port")
	}
	// P2pNcclConnector pairs ranks one to one: prefill rank r sends to the
	// decode worker's kv_port + r and decode rank r receives there
	// (p2p_nccl_connector.py save_kv_layer / start_load_kv: port +
	// self._rank), each a TP shard of the same shape.
	if t := s.Topology; kv.Name == P2pNcclConnector && t.Prefill.TP != t.Decode.TP {
		return badField("topology.decode.tp", "P2pNcclConnector pairs prefill and decode ranks one to one: want the prefill pool's tp %d, got %d",
			t.Prefill.TP, t.Decode.TP)
	}
	return nil
}

// validateBudget checks that a valid topology fits spec.gpus.budget.
func (s *Spec) validateBudget() error {
	// Every replicas and tp is >= 1 here, so one over the budget is over
	// it whatever the others are; bounding them first keeps GPUsNeeded's
	// products from overflowing into a count that fits.
	t := s.Topology
	pools := []Pool{{Replicas: t.Replicas, TP: t.TP}}
	if t.Kind == Disaggregated {
		pools = []Pool{*t.Prefill, *t.Decode}
	}
	for _, p := range pools {
		if p.Replicas > s.GPUs.Budget || p.TP > s.GPUs.Budget {
			return badField("topology", "workers need more than %d GPUs, over the budget of %d (spec.gpus.budget)", s.GPUs.Budget, s.GPUs.Budget)
		}
	}
	if need := s.GPUsNeeded(); need > s.GPUs.Budget {
		return badField("topology", "workers need %d GPUs, over the budget of %d (spec.gpus.budget)", need, s.GPUs.Budget)
	}
	return nil
}

func (s *Spec) validateKnobs() error {
	k := s.Knobs
	if k.MaxNumSeqs < 0 {
		return badField("knobs.max_num_seqs", "want >= 1, got %d", k.MaxNumSeqs)
	}
	if k.MaxNumBatchedTokens < 0 {
		return badField("knobs.max_num_batched_tokens", "want >= 1, got %d", k.MaxNumBatchedTokens)
	}
	if k.GPUMemoryUtilization < 0 || k.GPUMemoryUtilization > 1 {
		return badField("knobs.gpu_memory_utilization", "want a fraction in (0, 1], got %v", k.GPUMemoryUtilization)
	}
	if k.BlockSize < 0 || k.BlockSize&(k.BlockSize-1) != 0 {
		return badField("knobs.block_size", "want a power of two, got %d", k.BlockSize)
	}
	if k.MaxModelLen < 0 {
		return badField("knobs.max_model_len", "want >= 1, got %d", k.MaxModelLen)
	}
	switch k.CUDAGraphMode {
	case "", "FULL_AND_PIECEWISE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "NONE":
	default:
		return badField("knobs.cudagraph_mode", "want FULL_AND_PIECEWISE, PIECEWISE, FULL, FULL_DECODE_ONLY or NONE, got %q", k.CUDAGraphMode)
	}
	if k.EnforceEager && k.CUDAGraphMode != "" && k.CUDAGraphMode != "NONE" {
		return badField("knobs.cudagraph_mode", "enforce_eager disables CUDA graphs; got mode %s", k.CUDAGraphMode)
	}
	if n := k.SpeculativeNgram; n != nil {
		if n.NumSpeculativeTokens < 1 {
			return badField("knobs.speculative_ngram.num_speculative_tokens", "want >= 1, got %d", n.NumSpeculativeTokens)
		}
		if n.PromptLookupMax < 1 {
			return badField("knobs.speculative_ngram.prompt_lookup_max", "want >= 1, got %d", n.PromptLookupMax)
		}
		if n.PromptLookupMin < 0 || n.PromptLookupMin > n.PromptLookupMax {
			return badField("knobs.speculative_ngram.prompt_lookup_min", "want 1..prompt_lookup_max, got %d", n.PromptLookupMin)
		}
	}
	if len(k.ExtraArgs) > 0 && !s.facts().ExtraArgs {
		return badField("knobs.extra_args", "only the %s engine takes extra arguments", extraArgsEngines())
	}
	return nil
}

func (s *Spec) validateRouting() error {
	r := s.Routing
	switch r.Policy {
	case SessionAffinity, RoundRobin:
	default:
		return badField("routing.policy", "want session_affinity or round_robin, got %q", r.Policy)
	}
	if r.AffinityTokens < 1 {
		return badField("routing.affinity_tokens", "want >= 1, got %d", r.AffinityTokens)
	}
	// In the spec's own order, so two bad fields always report the same one.
	for _, f := range []struct {
		name string
		d    Duration
	}{{"prefill_timeout", r.PrefillTimeout}, {"decode_timeout", r.DecodeTimeout},
		{"stream_idle_timeout", r.StreamIdleTimeout}, {"health_interval", r.HealthInterval}} {
		if f.d < 0 {
			return badField("routing."+f.name, "want a positive duration, got %s", time.Duration(f.d))
		}
	}
	return nil
}

// validateNetwork checks spec.network's host and ports, and, for a valid
// disaggregated topology, that the connector's ports are in range and
// collide with none of them.
func (s *Spec) validateNetwork() error {
	n := s.Network
	if n.Host != "127.0.0.1" && n.Host != "localhost" && n.Host != "::1" && n.Host != "0.0.0.0" && !net4(n.Host) {
		return badField("network.host", "want an IP address or localhost, got %q", n.Host)
	}
	for _, f := range []struct {
		name string
		p    int
	}{{"proxy_port", n.ProxyPort}, {"worker_port", n.WorkerPort}} {
		if f.p < 1 || f.p > 65535 {
			return badField("network."+f.name, "want 1..65535, got %d", f.p)
		}
	}
	workers := s.workerCount()
	if n.WorkerPort+workers-1 > 65535 {
		return badField("network.worker_port", "%d workers from port %d run past 65535", workers, n.WorkerPort)
	}
	if n.ProxyPort >= n.WorkerPort && n.ProxyPort < n.WorkerPort+workers {
		return badField("network.proxy_port", "port %d collides with the workers' ports %d..%d", n.ProxyPort, n.WorkerPort, n.WorkerPort+workers-1)
	}
	if s.Topology.Kind == Disaggregated {
		// P2pNcclEngine spells its address f"{host}:{port}" with no
		// brackets (p2p_nccl_engine.py P2pNcclEngine.__init__), and so do
		// its request ids: an IPv6 host cannot work.
		if s.KV.Name == P2pNcclConnector && strings.Contains(n.Host, ":") {
			return badField("network.host", "P2pNcclConnector needs an IPv4 address or localhost (it writes host:port unbracketed), got %q", n.Host)
		}
		return s.validateKVPorts(workers)
	}
	return nil
}

// workerCount is the number of workers a valid topology runs.
func (s *Spec) workerCount() int {
	t := s.Topology
	if t.Kind == Disaggregated {
		return t.Prefill.Replicas + t.Decode.Replicas
	}
	return t.Replicas
}

// validateKVPorts checks the connector's ports (side_channel_port or
// kv_port onward, one per tensor-parallel rank of every worker, as Render
// lays them out) and P2pNcclConnector's discovery_port against the
// network's.
func (s *Spec) validateKVPorts(workers int) error {
	n := s.Network
	base, field := s.KV.SideChannelPort, "kv_connector.side_channel_port"
	if s.KV.Name == P2pNcclConnector {
		base, field = s.KV.KVPort, "kv_connector.kv_port"
	}
	ranks := s.GPUsNeeded()
	if base < 1 || base > 65535-ranks+1 { // (base+ranks-1 could overflow)
		return badField(field, "want 1..%d (%d ports, one per tensor-parallel rank), got %d", 65535-ranks+1, ranks, base)
	}
	lo, hi := base, base+ranks-1
	if lo <= n.WorkerPort+workers-1 && n.WorkerPort <= hi || n.ProxyPort >= lo && n.ProxyPort <= hi {
		return badField(field, "ports %d..%d collide with the proxy or worker ports", lo, hi)
	}
	if d := s.KV.DiscoveryPort; s.KV.Name == P2pNcclConnector {
		if d < 1 || d > 65535 || d == n.ProxyPort || d >= lo && d <= hi || d >= n.WorkerPort && d < n.WorkerPort+workers {
			return badField("kv_connector.discovery_port", "want a port of its own in 1..65535, got %d", d)
		}
	}
	return nil
}

func (s *Spec) validateEmulator() error {
	e := s.Emulator
	if !s.facts().Emulated {
		if e.Profile != "" || e.TimeScale != 0 || e.TraceDir != "" || len(e.Faults) > 0 {
			return badField("emulator", "only for engine: emulator")
		}
		return nil
	}
	if _, err := emulator.LookupProfile(e.Profile); err != nil {
		return badField("emulator.profile", "%v", err)
	}
	if s.Topology.Kind == Disaggregated && s.KV.Name != NixlConnector {
		return badField("kv_connector.name", "the emulator speaks NixlConnector's protocol only, got %q", s.KV.Name)
	}
	if !(e.TimeScale > 0) || e.TimeScale > MaxTimeScale {
		return badField("emulator.time_scale", "want a positive factor up to %d, got %v", MaxTimeScale, e.TimeScale)
	}
	for i, f := range e.Faults {
		if w, _, ok := strings.Cut(f, "="); !ok || w == "" {
			return badField(fmt.Sprintf("emulator.faults[%d]", i), "want WORKER=FAULT (e.g. prefill-0=crash-after=5), got %q", f)
		}
	}
	return nil
}

// envNameRE is a portable environment variable name (POSIX: letters,
// digits and underscores, not starting with a digit).
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateEngineEnv checks spec.engine_env: names a shell can export,
// values without NUL, and none of the variables hone sets itself.
func (s *Spec) validateEngineEnv() error {
	keys := make([]string, 0, len(s.EngineEnv))
	for k := range s.EngineEnv {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same key is reported every time
	for _, k := range keys {
		if !envNameRE.MatchString(k) {
			return badField("engine_env", "%q is not an environment variable name: want letters, digits and '_', not starting with a digit", k)
		}
		if from, ok := s.reservedEngineEnv(k); ok {
			return badField("engine_env."+k, "hone sets it from spec.%s; remove it here", from)
		}
		if strings.ContainsRune(s.EngineEnv[k], 0) {
			return badField("engine_env."+k, "a value cannot hold a NUL byte")
		}
	}
	return nil
}

// validateColdStart checks spec.cold_start. Reset turns on vLLM's
// development mode, whose admin routes take no credentials: on a vLLM
// spec it needs a network.host that is an address of this host's own
// network, never every interface.
func (s *Spec) validateObjective() error {
	o := s.Objective
	switch o.Goal {
	case "", GoalCapacity, GoalPerGPU:
		if o.TargetQPS != 0 {
			return badField("objective.target_qps", "only with goal %s (the rate the cheapest config must serve), got %v with goal %q", GoalCheapest, o.TargetQPS, o.Goal)
		}
	case GoalCheapest:
		if !(o.TargetQPS > 0) || o.TargetQPS > 1e6 {
			return badField("objective.target_qps", "goal %s needs the rate the cheapest config must serve within the SLO: a positive number of req/s, got %v", GoalCheapest, o.TargetQPS)
		}
	default:
		return badField("objective.goal", "want %s (the most capacity within gpus.budget), %s (the fewest GPUs serving objective.target_qps) or %s, got %q",
			GoalCapacity, GoalCheapest, GoalPerGPU, o.Goal)
	}
	return nil
}

func (s *Spec) validateColdStart() error {
	switch s.ColdStart {
	case "", ColdStartFresh:
		return nil
	case ColdStartReset:
	default:
		return badField("cold_start", "want %s or %s, got %q", ColdStartReset, ColdStartFresh, s.ColdStart)
	}
	if f := s.facts(); f.Cache.ResetEnv != "" && (s.Network.Host == "0.0.0.0" || s.Network.Host == "::") {
		return badField("cold_start", "%s renders %s into every %s worker, which then also serves unauthenticated "+
			"%s on its port: with network.host %s "+
			"every network this host is on could reach them; give network.host a loopback or private address, or use %s",
			ColdStartReset, f.Cache.ResetEnv, f.Title, f.Cache.ResetExposes, s.Network.Host, ColdStartFresh)
	}
	return nil
}

// net4 reports whether h is a dotted IPv4 address.
func net4(h string) bool {
	parts := strings.Split(h, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 3 {
			return false
		}
		v := 0
		for _, c := range p {
			if c < '0' || c > '9' {
				return false
			}
			v = v*10 + int(c-'0')
		}
		if v > 255 {
			return false
		}
	}
	return true
}

// facts are the spec's engine's; the zero Facts for an unknown engine.
func (s *Spec) facts() engine.Facts { return engine.FactsOf(s.Engine) }

// orList spells names as "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// extraArgsEngines names the engines that take knobs.extra_args.
func extraArgsEngines() string {
	var names []string
	for _, n := range engine.Names() {
		if engine.FactsOf(n).ExtraArgs {
			names = append(names, n)
		}
	}
	return orList(names)
}
