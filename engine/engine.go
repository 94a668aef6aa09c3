// Package engine is the seam between hone and the serving engines it
// deploys, measures and recognises: an Engine interface and a registry,
// one file per engine (vllm.go: vLLM; emulator.go: hone's engine
// emulator, `hone sim serve`), each registering itself in init, as
// node_exporter's collectors do.
//
// An engine owns what differs between engines: how a worker's command
// and environment are spelled (Render), how its GET /version answer is
// recognised (Recognise), which processes are its own (MatchProcess), and
// the static facts of Facts (counter names, per-request metric keys, the
// cache-reset route, KV ports, the HTTP head convention). A versioned
// engine also owns its releases (Adapter, adapt.go): the installed
// version, its release table and what a deployment may use on a given
// release (vllm_adapt.go, vllm_args.go). Code outside
// this package asks the registry (Lookup) and the interface; it never
// compares an engine's name. docs/engines.md says how to add one.
//
// The package imports nothing of hone's: every layer may use it.
package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Names of the engines this package registers. A spec's engine field, a
// record's backend and the directory names of per-engine data spell them.
const (
	VLLM     = "vllm"
	Emulator = "emulator"
)

// Engine is one serving engine.
type Engine interface {
	// Name is the registry key: a spec's engine field.
	Name() string
	// Facts are the engine's static facts.
	Facts() Facts
	// Render spells one worker's command line and the environment it
	// adds, for a validated deployment.
	Render(l Launch) (Command, error)
	// Recognise reports whether a GET /version answer's "version" field
	// is this engine's.
	Recognise(version string) bool
	// MatchProcess reports whether a process, by its comm and argv, is
	// one of this engine's serving processes (API server, engine core,
	// workers): the daemon's default target.
	MatchProcess(comm string, cmdline []string) bool
}

// Command is a rendered worker: argv and the variables added to the
// inherited environment (KEY=VALUE, unsorted; deploy sorts).
type Command struct {
	Argv []string
	Env  []string
}

// Facts are what hone needs to know of an engine beyond its commands.
type Facts struct {
	// Title names the engine in messages ("vLLM").
	Title string
	// Binary is argv[0] when the caller names none.
	Binary string
	// Emulated engines produce emulated numbers, never device ones, need
	// no GPU and take the spec's emulator section (profile, time scale).
	Emulated bool
	// LoadsWeights engines read real weights: a local model path must
	// exist and a hub model must be pinned to a commit.
	LoadsWeights bool
	// ExtraArgs says whether knobs.extra_args are passed through.
	ExtraArgs bool
	// Versioned engines adapt their commands to the installed release
	// and implement Adapter; Versions is their release table, which
	// their Adapter checks a spec against.
	Versioned bool
	Versions  *VersionTable
	// StartTimeout is how long a deployment waits for a worker's health;
	// 0: the caller's default.
	StartTimeout time.Duration
	// Connectors are the KV connectors a disaggregated topology may name.
	Connectors []string
	Metrics    Metrics
	Cache      Cache
	HTTP       HTTP
	// KVPorts are the port ranges its KV transfers use by default
	// ("5600-5663,14579-14580"), the daemon's --kv-ports.
	KVPorts string
	// ProcessPattern is a regular expression over a process's command
	// line (argv joined by spaces) that matches its serving processes:
	// MatchProcess's, and the daemon's --match-cmdline default.
	ProcessPattern string
	// KVCacheDTypes are the KV cache data types a spec may name for it
	// (precision.kv_cache_dtype); nil: the spec may name none.
	KVCacheDTypes []string
	// ReservedEnv are the variables Render sets itself, each with the
	// spec field it comes from: a spec's engine_env may not set them.
	ReservedEnv map[string]string
}

// Metrics are the engine's metric names.
type Metrics struct {
	// Prefix is the namespace of its GET /metrics series ("vllm:"); a
	// counter is a series under it whose name ends in _total, or one of
	// PrefixCache's names.
	Prefix string
	// PrefixCache are the counters of prefix-cache hits and queries (in
	// prompt tokens), the current names first, older releases' after.
	PrefixCache []CounterPair
	// RequestKeys are the keys of the per-request metrics object the
	// engine returns with each completion; nil: it returns none.
	RequestKeys []string
}

// CounterPair names one release's prefix-cache hits and queries counters.
type CounterPair struct{ Hits, Queries string }

// Cache is how the engine's prefix cache is emptied.
type Cache struct {
	// ResetRoute is the HTTP route that empties it ("POST
	// /reset_prefix_cache"); "": none.
	ResetRoute string
	// ResetEnv is the variable (KEY=VALUE) a worker needs for
	// ResetRoute to be served; "": always served. Where it is set the
	// route comes with other unauthenticated admin routes: ResetExposes
	// names them.
	ResetEnv     string
	ResetExposes string
}

// HTTP is the engine's HTTP head convention.
type HTTP struct {
	// RequestIDHeader carries a request's id in and out.
	RequestIDHeader string
	// ResponseHeads are the response heads a proxy passes on.
	ResponseHeads []string
}

// FeatureKind says how a feature appears in a rendered command.
type FeatureKind string

const (
	KindFlag         FeatureKind = "flag"
	KindEnv          FeatureKind = "env"
	KindKVConfig     FeatureKind = "kv-transfer-config field"
	KindKVCacheDType FeatureKind = "kv-cache-dtype value"
	KindBehavior     FeatureKind = "behavior"
)

// Feature is one row of a versioned engine's release table: something
// hone renders whose presence changed across the engine's releases.
type Feature struct {
	ID    string      // stable key; preflight names its check <engine>-<ID>
	Kind  FeatureKind //
	Name  string      // as hone renders it
	Since string      // first release that has it
	// Removed is the first release without it; "" while the newest
	// release checked still has it, announced removal or not.
	Removed string
	// Removal is what the engine's makers have said about removing it, when it has (a
	// deprecation warning, a planned release), and where that was read;
	// "" when nothing is announced.
	Removal string
	// Source is where the fact was checked: the engine's file and function
	// (read at the commit given), and the pull request that added it.
	Source string
}

// VersionTable is a versioned engine's release table (Facts.Versions):
// what hone renders whose presence changed across the engine's releases.
// The engine owns the data and, through its Adapter, the checks.
type VersionTable struct {
	// Floor is the oldest release the table was checked against.
	Floor string
	// Features are the rows. Since is the first release known to have a
	// feature; where that could not be pinned exactly it is the first one
	// that certainly has it.
	Features []Feature
	// KVCacheDTypes are the KV cache data types a spec may name; those
	// with a row (FeatureKVCacheDTypePrefix+value) are version-gated.
	KVCacheDTypes []string
}

// Feature is the table's row id, if it has one.
func (t *VersionTable) Feature(id string) (Feature, bool) {
	if t != nil {
		for _, f := range t.Features {
			if f.ID == id {
				return f, true
			}
		}
	}
	return Feature{}, false
}

var (
	mu       sync.RWMutex
	registry = map[string]Engine{}
)

// Register adds an engine; an engine package calls it from init. It panics
// on an empty or repeated name: two engines cannot answer to one.
func Register(e Engine) {
	mu.Lock()
	defer mu.Unlock()
	n := e.Name()
	if n == "" {
		panic("engine: Register with an empty name")
	}
	if _, dup := registry[n]; dup {
		panic(fmt.Sprintf("engine: %q registered twice", n))
	}
	registry[n] = e
}

// Lookup is the engine registered under name.
func Lookup(name string) (Engine, bool) {
	mu.RLock()
	defer mu.RUnlock()
	e, ok := registry[name]
	return e, ok
}

// Names are the registered engines' names: the real engines, then the
// emulated ones, each in name order ("vllm", "emulator").
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		ei, ej := registry[names[i]].Facts().Emulated, registry[names[j]].Facts().Emulated
		if ei != ej {
			return ej
		}
		return names[i] < names[j]
	})
	return names
}

// Facts of the engine registered under name; the zero Facts when none is.
func FactsOf(name string) Facts {
	if e, ok := Lookup(name); ok {
		return e.Facts()
	}
	return Facts{}
}

// Recognise is the engine whose GET /version answer version is, if any;
// engines are asked in name order and the first that recognises it wins.
func Recognise(version string) (Engine, bool) {
	if version == "" {
		return nil, false
	}
	for _, n := range Names() {
		if e, _ := Lookup(n); e.Recognise(version) {
			return e, true
		}
	}
	return nil, false
}

// MatchProcess is the engine a process belongs to, if any.
func MatchProcess(comm string, cmdline []string) (Engine, bool) {
	for _, n := range Names() {
		if e, _ := Lookup(n); e.MatchProcess(comm, cmdline) {
			return e, true
		}
	}
	return nil, false
}

// PrefixCacheCounters are the prefix-cache counter pairs of every
// registered engine, in Names order, each engine's newest first.
func PrefixCacheCounters() []CounterPair {
	var out []CounterPair
	for _, n := range Names() {
		for _, p := range FactsOf(n).Metrics.PrefixCache {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// IsCounter reports whether a GET /metrics series is a registered
// engine's counter: under its Prefix, named ..._total or one of its
// PrefixCache names (older releases' lack the suffix).
func IsCounter(name string) bool {
	for _, n := range Names() {
		m := FactsOf(n).Metrics
		if m.Prefix == "" || !strings.HasPrefix(name, m.Prefix) {
			continue
		}
		if strings.HasSuffix(name, "_total") || slices.ContainsFunc(m.PrefixCache, func(p CounterPair) bool {
			return p.Hits == name || p.Queries == name
		}) {
			return true
		}
	}
	return false
}

// ProcessPattern is the alternation of every registered engine's
// ProcessPattern, in Names order: the daemon's default process match.
func ProcessPattern() string {
	var alt []string
	for _, n := range Names() {
		if p := FactsOf(n).ProcessPattern; p != "" {
			alt = append(alt, p)
		}
	}
	return strings.Join(alt, "|")
}

// KVPorts are every registered engine's KV port ranges, in Names order:
// the daemon's default --kv-ports.
func KVPorts() string {
	var all []string
	for _, n := range Names() {
		if p := FactsOf(n).KVPorts; p != "" {
			all = append(all, p)
		}
	}
	return strings.Join(all, ",")
}

// Emulated reports whether the engine registered under name is emulated.
func Emulated(name string) bool { return FactsOf(name).Emulated }

// TakesConnector reports whether f lists connector c.
func (f Facts) TakesConnector(c string) bool { return slices.Contains(f.Connectors, c) }
