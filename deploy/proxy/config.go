package proxy

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/guard"
)

// Modes of a deployment.
const (
	ModeColocated     = "colocated"
	ModeDisaggregated = "disaggregated"
)

// Roles of a worker.
const (
	RoleColocated = "colocated"
	RolePrefill   = "prefill"
	RoleDecode    = "decode"
)

// Routing policies.
const (
	SessionAffinity = "session_affinity"
	RoundRobin      = "round_robin"
)

// KV connectors.
const (
	NixlConnector    = "NixlConnector"
	P2pNcclConnector = "P2pNcclConnector"
)

// Worker is one engine behind the proxy.
type Worker struct {
	Name string `json:"name"`
	Role string `json:"role"`
	URL  string `json:"url"`
	// KVAddr is P2pNcclConnector's kv_ip:kv_port, encoded in request ids.
	KVAddr string `json:"kv_addr,omitempty"`
}

// Config is everything the proxy needs; deploy writes it as JSON for
// `hone proxy --config`.
type Config struct {
	Listen string `json:"listen"`
	// Engine is the workers' engine (a registered name: package engine),
	// whose conventions the proxy speaks: the request id header, the
	// response heads passed on, the cache-reset route. Empty: vLLM's,
	// which hone's emulator shares (EngineField).
	Engine         string   `json:"engine,omitempty"`
	Mode           string   `json:"mode"`
	Connector      string   `json:"connector,omitempty"`
	Workers        []Worker `json:"workers"`
	Routing        string   `json:"routing"`
	SessionHeader  string   `json:"session_header,omitempty"`
	AffinityTokens int      `json:"affinity_tokens,omitempty"`
	// Per-leg timeouts (nanoseconds in JSON): the whole prefill leg; a
	// streaming leg's response headers; the longest silence inside a stream.
	PrefillTimeout    time.Duration `json:"prefill_timeout_ns,omitempty"`
	DecodeTimeout     time.Duration `json:"decode_timeout_ns,omitempty"`
	StreamIdleTimeout time.Duration `json:"stream_idle_timeout_ns,omitempty"`
	HealthInterval    time.Duration `json:"health_interval_ns,omitempty"`
	// TimelineCapacity is how many finished requests' timelines are kept,
	// and TimelineBytes the most memory they may hold together (the
	// oldest leave first when either is reached). Each string a timeline
	// keeps is cut to MaxTimelineValue bytes.
	TimelineCapacity int   `json:"timeline_capacity,omitempty"`
	TimelineBytes    int64 `json:"timeline_bytes,omitempty"`
	// Discovery, when set, finds the workers at run time (Workers is then
	// only the set until discovery first reports, and may be empty).
	Discovery *Discovery `json:"discovery,omitempty"`
	// Limits on clients: body size and memory, header/body/idle timeouts,
	// connections (package guard; zero fields take its defaults).
	guard.Limits
}

// Discovery kinds.
const DiscoveryKubernetes = "kubernetes"

// Discovery says where the proxy finds its workers while it runs. Kind
// kubernetes: the ready endpoints of each pool's Service, from
// discovery.k8s.io/v1 EndpointSlices in Namespace (package
// deploy/proxy/kubediscovery).
type Discovery struct {
	Kind      string          `json:"kind"`
	Namespace string          `json:"namespace"`
	Pools     []DiscoveryPool `json:"pools"`
}

// DiscoveryPool is one role's workers: the endpoints of Service, served on
// Port.
type DiscoveryPool struct {
	Role    string `json:"role"`
	Service string `json:"service"`
	Port    int    `json:"port"`
}

func (d *Discovery) check(mode string) error {
	if d.Kind != DiscoveryKubernetes {
		return fmt.Errorf("discovery.kind: want %s, got %q", DiscoveryKubernetes, d.Kind)
	}
	if d.Namespace == "" {
		return errors.New("discovery.namespace: empty")
	}
	seen := map[string]bool{}
	for i, p := range d.Pools {
		ok := false
		for _, r := range roles(mode) {
			ok = ok || r == p.Role
		}
		switch {
		case !ok || seen[p.Role]:
			return fmt.Errorf("discovery.pools[%d].role: want each of %v once in a %s deployment, got %q", i, roles(mode), mode, p.Role)
		case p.Service == "":
			return fmt.Errorf("discovery.pools[%d].service: empty", i)
		case p.Port < 1 || p.Port > 65535:
			return fmt.Errorf("discovery.pools[%d].port: want 1-65535, got %d", i, p.Port)
		}
		seen[p.Role] = true
	}
	if len(seen) != len(roles(mode)) {
		return fmt.Errorf("discovery.pools: want a pool for each of %v", roles(mode))
	}
	return nil
}

// Defaults for zero Config fields.
const (
	DefaultPrefillTimeout    = 60 * time.Second
	DefaultDecodeTimeout     = 60 * time.Second
	DefaultStreamIdleTimeout = 30 * time.Second
	DefaultHealthInterval    = time.Second
	DefaultTimelineCapacity  = 200_000
	// DefaultTimelineBytes holds DefaultTimelineCapacity timelines of a
	// disaggregated request (a prefill leg with the engine's metrics
	// object, a decode leg: about 700 bytes) with room to spare; it binds
	// when timelines are larger (long ids, errors, several legs: one whose
	// strings are all cut to MaxTimelineValue takes about 1.5 KiB).
	DefaultTimelineBytes  = 256 << 20
	DefaultAffinityTokens = 256
	DefaultSessionHeader  = "X-Session-Id"
)

// fill sets the defaults of what c leaves unset and checks it.
func (c *Config) fill() error {
	c.defaults()
	if _, ok := engine.Lookup(c.engineName()); !ok {
		return fmt.Errorf("engine: want one of %v, got %q", engine.Names(), c.Engine)
	}
	if err := c.Limits.Fill(); err != nil {
		return err
	}
	if c.Mode == ModeDisaggregated && c.Connector == "" {
		c.Connector = NixlConnector
	}
	switch c.Routing {
	case SessionAffinity, RoundRobin:
	default:
		return fmt.Errorf("routing: want %s or %s, got %q", SessionAffinity, RoundRobin, c.Routing)
	}
	n, err := c.workerRoles()
	if err != nil {
		return err
	}
	if c.Discovery != nil {
		return c.checkDiscovered()
	}
	return c.checkWorkers(n)
}

// defaultEngine is the engine whose conventions the proxy speaks when
// Config.Engine is empty.
const defaultEngine = engine.VLLM

// engineName is the workers' engine: Engine, or the default.
func (c *Config) engineName() string {
	if c.Engine == "" {
		return defaultEngine
	}
	return c.Engine
}

// EngineField is Config.Engine for workers of the engine registered under
// name: empty when the proxy's default engine's conventions (request id
// header, response heads, cache-reset route) are that engine's too, so that a configuration stays as it was for the
// engines that share vLLM's HTTP API; name otherwise.
func EngineField(name string) string {
	f, d := engine.FactsOf(name), engine.FactsOf(defaultEngine)
	if f.HTTP.RequestIDHeader == d.HTTP.RequestIDHeader && slices.Equal(f.HTTP.ResponseHeads, d.HTTP.ResponseHeads) &&
		f.Cache.ResetRoute == d.Cache.ResetRoute {
		return ""
	}
	return name
}

// defaults sets what c leaves unset to its default.
func (c *Config) defaults() {
	orString(&c.Listen, "127.0.0.1:8000")
	orString(&c.Routing, SessionAffinity)
	orString(&c.SessionHeader, DefaultSessionHeader)
	if c.AffinityTokens <= 0 {
		c.AffinityTokens = DefaultAffinityTokens
	}
	orDuration(&c.PrefillTimeout, DefaultPrefillTimeout)
	orDuration(&c.DecodeTimeout, DefaultDecodeTimeout)
	orDuration(&c.StreamIdleTimeout, DefaultStreamIdleTimeout)
	orDuration(&c.HealthInterval, DefaultHealthInterval)
	if c.TimelineCapacity <= 0 {
		c.TimelineCapacity = DefaultTimelineCapacity
	}
	if c.TimelineBytes <= 0 {
		c.TimelineBytes = DefaultTimelineBytes
	}
}

func orString(v *string, def string) {
	if *v == "" {
		*v = def
	}
}

func orDuration(v *time.Duration, def time.Duration) {
	if *v <= 0 {
		*v = def
	}
}

// workerRoles checks each worker's URL and name, and counts the workers
// of each role.
func (c *Config) workerRoles() (map[string]int, error) {
	var n = map[string]int{}
	for i, w := range c.Workers {
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("workers[%d].url: want http://host:port, got %q", i, w.URL)
		}
		if w.Name == "" {
			return nil, fmt.Errorf("workers[%d].name: empty", i)
		}
		n[w.Role]++
	}
	return n, nil
}

// checkDiscovered checks a configuration whose workers discovery finds:
// the mode, the discovery, the workers given already and the connector.
func (c *Config) checkDiscovered() error {
	if c.Mode != ModeColocated && c.Mode != ModeDisaggregated {
		return fmt.Errorf("mode: want %s or %s, got %q", ModeColocated, ModeDisaggregated, c.Mode)
	}
	if err := c.Discovery.check(c.Mode); err != nil {
		return err
	}
	for i, w := range c.Workers {
		if err := checkWorker(*c, w); err != nil {
			return fmt.Errorf("workers[%d]: %w", i, err)
		}
	}
	if c.Mode == ModeDisaggregated && c.Connector != NixlConnector {
		return fmt.Errorf("connector: discovery finds workers by address only; want %s, got %q", NixlConnector, c.Connector)
	}
	return nil
}

// checkWorkers checks a static configuration's workers (n of each role)
// against its mode, and a disaggregated one's connector.
func (c *Config) checkWorkers(n map[string]int) error {
	switch c.Mode {
	case ModeColocated:
		if n[RoleColocated] == 0 || len(c.Workers) != n[RoleColocated] {
			return errors.New("workers: a colocated deployment wants only colocated workers, at least one")
		}
	case ModeDisaggregated:
		if n[RolePrefill] == 0 || n[RoleDecode] == 0 || len(c.Workers) != n[RolePrefill]+n[RoleDecode] {
			return errors.New("workers: a disaggregated deployment wants prefill and decode workers, at least one of each")
		}
		return c.checkConnector()
	default:
		return fmt.Errorf("mode: want %s or %s, got %q", ModeColocated, ModeDisaggregated, c.Mode)
	}
	return nil
}

// checkConnector checks a disaggregated deployment's connector, and that
// P2pNcclConnector's workers each give their KV address.
func (c *Config) checkConnector() error {
	switch c.Connector {
	case NixlConnector, P2pNcclConnector:
	default:
		return fmt.Errorf("connector: want %s or %s, got %q", NixlConnector, P2pNcclConnector, c.Connector)
	}
	if c.Connector == P2pNcclConnector {
		for i, w := range c.Workers {
			if w.KVAddr == "" {
				return fmt.Errorf("workers[%d].kv_addr: P2pNcclConnector needs each worker's kv_ip:kv_port", i)
			}
		}
	}
	return nil
}
