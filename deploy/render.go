package deploy

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/engine"
)

// Roles of a worker.
const (
	RoleColocated = engine.RoleColocated
	RolePrefill   = engine.RolePrefill
	RoleDecode    = engine.RoleDecode
)

// Worker is one engine process: the exact argv and the environment it adds
// to the inherited one.
type Worker struct {
	Name string   `json:"name"` // replica-0, prefill-0, decode-1
	Role string   `json:"role"`
	Host string   `json:"host"`
	Port int      `json:"port"`
	GPUs []int    `json:"gpus"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"` // KEY=VALUE, sorted
	// KVAddr is the worker's KV-transfer address (P2pNcclConnector's
	// VLLM_HOST_IP:kv_port, its rank-0 port); the proxy encodes it in
	// request ids.
	KVAddr string `json:"kv_addr,omitempty"`
	// KVPorts are the ports on Host the worker's KV transfer may bind, one
	// per tensor-parallel rank: the NIXL side channel's
	// (VLLM_NIXL_SIDE_CHANNEL_PORT onward) or P2pNcclConnector's (kv_port
	// onward). No two workers share one.
	KVPorts []int `json:"kv_ports,omitempty"`
}

// URL is the worker's HTTP base URL.
func (w Worker) URL() string { return "http://" + hostPort(w.Host, w.Port) }

// Plan is a rendered spec: the workers to start, in order, and the proxy's
// listen address.
type Plan struct {
	Spec      *Spec    `json:"spec"`
	Workers   []Worker `json:"workers"`
	ProxyAddr string   `json:"proxy_addr"`
	// VLLMVersion is the engine release the commands were adapted to
	// (engine.Adaptation); empty when unknown or the engine adapts to none
	// (not engine.Adapter). The name and JSON key predate other engines.
	VLLMVersion string `json:"vllm_version,omitempty"`
	// Warnings say what the render could not check or adapt, e.g. that
	// the engine's version was unknown.
	Warnings []string `json:"warnings,omitempty"`
}

// RenderOptions says how to spell the commands.
type RenderOptions struct {
	// VLLM is argv[0] for vLLM workers; "vllm" when empty.
	VLLM string
	// Hone is argv[0] for emulator workers (the running hone binary).
	Hone string
	// Bins are argv[0] by engine name, before VLLM and Hone; an engine
	// named in none gets its engine.Facts Binary.
	Bins map[string]string
	// VLLMVersion is the installed release of the spec's engine as the
	// engine prints it (engine.InstalledVersion); empty when unknown. For
	// an engine.Adapter, Render omits what that release lacks and refuses
	// what the spec needs but it cannot do (engine.Adapter.Adapt); unknown
	// renders for the newest release and says so in Plan.Warnings. Other
	// engines ignore it. The name predates other engines.
	VLLMVersion string
}

// Render turns a valid spec into workers. GPUs are handed out in spec order:
// prefill workers first, then decode workers; each takes TP consecutive ids.
func Render(s *Spec, o RenderOptions) (*Plan, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	type slot struct {
		name, role string
		tp         int
	}
	var slots []slot
	t := s.Topology
	if t.Kind == Colocated {
		for i := range t.Replicas {
			slots = append(slots, slot{fmt.Sprintf("replica-%d", i), RoleColocated, t.TP})
		}
	} else {
		for i := range t.Prefill.Replicas {
			slots = append(slots, slot{fmt.Sprintf("prefill-%d", i), RolePrefill, t.Prefill.TP})
		}
		for i := range t.Decode.Replicas {
			slots = append(slots, slot{fmt.Sprintf("decode-%d", i), RoleDecode, t.Decode.TP})
		}
	}
	p := &Plan{Spec: s, ProxyAddr: hostPort(s.Network.Host, s.Network.ProxyPort)}
	eng, _ := engine.Lookup(s.Engine) // Validate: registered
	var adapt engine.Adaptation
	if a, ok := eng.(engine.Adapter); ok {
		var err error
		adapt, p.Warnings, err = a.Adapt(o.VLLMVersion, s.launch("", Worker{}, engine.Features{}))
		if fe := (*engine.FieldError)(nil); errors.As(err, &fe) {
			return nil, badField(fe.Field, "%s", fe.Msg)
		} else if err != nil {
			return nil, err
		}
		p.VLLMVersion = adapt.Version
	}
	// next is both the first GPU and the first KV port offset of the next
	// worker: a worker of TP n binds n KV ports, one per rank, because
	// P2pNcclConnector binds kv_port + rank (p2p_nccl_connector.py
	// P2pNcclConnector.__init__: port_offset=get_world_group().rank;
	// p2p_nccl_engine.py P2pNcclEngine.__init__: port = kv_port +
	// port_offset) and NIXL before the scheduler-side handshake listener
	// bound VLLM_NIXL_SIDE_CHANNEL_PORT + dp_rank*tp + tp_rank (today's
	// nixl/base_scheduler.py binds one port, + data_parallel_index: the
	// reserved range covers both).
	next := 0
	for i, sl := range slots {
		w := Worker{
			Name: sl.name, Role: sl.role, Host: s.Network.Host, Port: s.Network.WorkerPort + i,
			GPUs: slices.Clone(s.GPUs.IDs[next : next+sl.tp]),
		}
		if base := s.kvPortBase(); base > 0 {
			for r := range sl.tp {
				w.KVPorts = append(w.KVPorts, base+next+r)
			}
		}
		next += sl.tp
		if s.Topology.Kind == Disaggregated && s.KV.Name == P2pNcclConnector {
			w.KVAddr = hostPort(p2pHost(s.Network.Host), w.KVPorts[0])
		}
		cmd, err := eng.Render(s.launch(o.bin(eng), w, adapt.Features))
		if err != nil {
			return nil, err
		}
		w.Argv, w.Env = cmd.Argv, cmd.Env
		for k, v := range s.EngineEnv { // no clash: validateEngineEnv
			w.Env = append(w.Env, k+"="+v)
		}
		slices.Sort(w.Env)
		p.Workers = append(p.Workers, w)
	}
	names := map[string]bool{}
	for _, w := range p.Workers {
		names[w.Name] = true
	}
	for i, f := range s.Emulator.Faults {
		name, _, _ := strings.Cut(f, "=")
		if !names[name] {
			return nil, fmt.Errorf("spec.emulator.faults[%d]: no worker named %q", i, name)
		}
	}
	return p, nil
}

// kvPortBase is the first KV port of a disaggregated topology (NIXL's
// side channel or P2pNcclConnector's kv_port), 0 when there is none.
func (s *Spec) kvPortBase() int {
	if s.Topology.Kind != Disaggregated {
		return 0
	}
	if s.KV.Name == P2pNcclConnector {
		return s.KV.KVPort
	}
	return s.KV.SideChannelPort
}

// p2pHost is engine.P2PHost.
func p2pHost(h string) string { return engine.P2PHost(h) }

// ServedName is the model name clients send and workers answer to.
func (s *Spec) ServedName() string {
	switch {
	case s.Model.ServedName != "":
		return s.Model.ServedName
	case s.Model.ID != "":
		return s.Model.ID
	default:
		return filepath.Base(filepath.Clean(s.Model.Path))
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func hostPort(h string, p int) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]:" + strconv.Itoa(p)
	}
	return h + ":" + strconv.Itoa(p)
}

// ShellQuote quotes one word for a POSIX shell, for people to copy; hone
// itself never runs a shell string.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=,@%+", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Script renders the plan as shell lines a person can run by hand: one
// `env K=V ... argv` line per worker, then the proxy.
func (p *Plan) Script(proxyArgv []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# hone deploy render: %s (%s, %s)\n", p.Spec.Name, p.Spec.Engine, p.Spec.Topology.Kind)
	if p.VLLMVersion != "" {
		fmt.Fprintf(&b, "# for %s %s\n", engine.FactsOf(p.Spec.Engine).Title, p.VLLMVersion)
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "# warning: %s\n", w)
	}
	for _, w := range p.Workers {
		fmt.Fprintf(&b, "# %s: role %s, GPUs %s, http://%s\n", w.Name, w.Role, joinInts(w.GPUs), hostPort(w.Host, w.Port))
		words := []string{"env"}
		for _, e := range w.Env {
			words = append(words, ShellQuote(e))
		}
		for _, a := range w.Argv {
			words = append(words, ShellQuote(a))
		}
		b.WriteString(strings.Join(words, " "))
		b.WriteString(" &\n")
	}
	if len(proxyArgv) > 0 {
		fmt.Fprintf(&b, "# proxy: http://%s\n", p.ProxyAddr)
		words := make([]string, len(proxyArgv))
		for i, a := range proxyArgv {
			words[i] = ShellQuote(a)
		}
		b.WriteString(strings.Join(words, " "))
		b.WriteString("\n")
	}
	return b.String()
}
