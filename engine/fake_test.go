package engine_test

// This file is the seam's proof: a third engine, registered here and
// nowhere else, goes through hone's generic paths (spec validation and
// rendering in deploy, /version recognition, /metrics counters in
// replay, the daemon's process match) with no other file changed.

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/replay"
)

const fakeName = "fakeserve"

// fake is a made-up engine: `fakeserve run MODEL --listen HOST:PORT`,
// GET /version answers "fakeserve/1.2", counters under "fake:".
type fake struct{}

func (fake) Name() string { return fakeName }

func (fake) Facts() engine.Facts {
	return engine.Facts{
		Title: "FakeServe", Binary: "fakeserve", LoadsWeights: false,
		Connectors: []string{engine.NixlConnector},
		Metrics: engine.Metrics{Prefix: "fake:",
			PrefixCache: []engine.CounterPair{{Hits: "fake:cache_hit_tokens_total", Queries: "fake:cache_query_tokens_total"}}},
		Cache: engine.Cache{ResetRoute: "POST /flush"},
		HTTP:  engine.HTTP{RequestIDHeader: "X-Fake-Id"},
	}
}

func (fake) Recognise(v string) bool { return strings.HasPrefix(v, "fakeserve/") }

func (fake) MatchProcess(comm string, _ []string) bool { return comm == "fakeserve" }

func (fake) Render(l engine.Launch) (engine.Command, error) {
	argv := []string{l.Bin, "run", l.Model.ID, "--listen", l.Worker.Host + ":" + strconv.Itoa(l.Worker.Port), "--name", l.Model.Served}
	if l.KV != nil {
		argv = append(argv, "--role", l.Worker.Role, "--kv-port", strconv.Itoa(l.Worker.KVPorts[0]))
	}
	return engine.Command{Argv: argv, Env: []string{l.Worker.VisibleDevices()}}, nil
}

func withFake(t *testing.T) {
	t.Helper()
	engine.Register(fake{})
	t.Cleanup(func() { engine.Unregister(fakeName) })
}

func TestFakeEngineThroughGenericPaths(t *testing.T) {
	withFake(t)
	if e, ok := engine.Lookup(fakeName); !ok || e.Name() != fakeName {
		t.Fatalf("Lookup(%q) = %v, %v", fakeName, e, ok)
	}
	if !slices.Contains(engine.Names(), fakeName) {
		t.Fatalf("Names() = %v, want %s among them", engine.Names(), fakeName)
	}

	// deploy: the spec validates and renders through the registry.
	s, err := deploy.ParseSpec([]byte(`
name: t
engine: fakeserve
model: {id: org/m}
gpus: {budget: 3}
topology:
  kind: disaggregated
  prefill: {replicas: 1, tp: 1}
  decode: {replicas: 1, tp: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := deploy.Render(s, deploy.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"fakeserve", "run", "org/m", "--listen", "127.0.0.1:8100", "--name", "org/m", "--role", "prefill", "--kv-port", strconv.Itoa(deploy.DefaultSideChannelPort)},
		{"fakeserve", "run", "org/m", "--listen", "127.0.0.1:8101", "--name", "org/m", "--role", "decode", "--kv-port", strconv.Itoa(deploy.DefaultSideChannelPort + 1)},
	}
	if len(p.Workers) != 2 {
		t.Fatalf("workers = %+v", p.Workers)
	}
	for i, w := range p.Workers {
		if !slices.Equal(w.Argv, want[i]) {
			t.Errorf("worker %d argv = %q, want %q", i, w.Argv, want[i])
		}
	}
	if got := p.Workers[1].Env; !slices.Equal(got, []string{"CUDA_VISIBLE_DEVICES=1,2"}) {
		t.Errorf("decode env = %q", got)
	}
	// deploy's per-engine rules come from Facts: not emulated, so no
	// emulator section; no extra args.
	bad := *s
	bad.Knobs.ExtraArgs = []string{"--x"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "knobs.extra_args") {
		t.Errorf("extra_args on %s: %v, want refused", fakeName, err)
	}
	if _, err := deploy.ParseSpec([]byte("name: t\nengine: nosuch\nmodel: {id: org/m}\ngpus: {budget: 1}\ntopology: {kind: colocated, replicas: 1, tp: 1}\n")); err == nil ||
		!strings.Contains(err.Error(), fakeName) {
		t.Errorf("unknown engine: %v, want the registered names, %s among them", err, fakeName)
	}

	// /version recognition: the generic lookup finds it, not vLLM.
	if e, ok := engine.Recognise("fakeserve/1.2"); !ok || e.Name() != fakeName {
		t.Errorf("Recognise(fakeserve/1.2) = %v, %v", e, ok)
	}
	if e, ok := engine.Recognise("0.11.1"); !ok || e.Name() != engine.VLLM {
		t.Errorf("Recognise(0.11.1) = %v, %v; want vllm still", e, ok)
	}

	// /metrics: replay's counter parser keeps the fake's counters.
	c := replay.ParseCounters([]byte("# TYPE fake:cache_hit_tokens_total counter\nfake:cache_hit_tokens_total 3\n" +
		"# TYPE fake:cache_query_tokens_total counter\nfake:cache_query_tokens_total 7\n# TYPE other_total counter\nother_total 1\n"))
	if c["fake:cache_hit_tokens_total"] != 3 || c["fake:cache_query_tokens_total"] != 7 || len(c) != 2 {
		t.Errorf("ParseCounters = %v", c)
	}
	if !slices.Contains(engine.PrefixCacheCounters(), engine.CounterPair{Hits: "fake:cache_hit_tokens_total", Queries: "fake:cache_query_tokens_total"}) {
		t.Errorf("PrefixCacheCounters() = %v", engine.PrefixCacheCounters())
	}

	// The daemon's process match.
	if e, ok := engine.MatchProcess("fakeserve", []string{"fakeserve", "run"}); !ok || e.Name() != fakeName {
		t.Errorf("MatchProcess(fakeserve) = %v, %v", e, ok)
	}
}
