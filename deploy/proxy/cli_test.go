package proxy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/hone-llm/hone/internal/usage"
)

// lockedLog is a log the proxy's goroutines may write at once.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The worker flags name the workers and the mode; without a usable set
// they are bad input, as is a --config or --spec that cannot be read.
func TestOptionsResolveWorkers(t *testing.T) {
	cfg, err := Options{Listen: "127.0.0.1:0", Prefill: []string{"http://p"}, Decode: []string{"http://d0", "http://d1"}}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range cfg.Workers {
		names = append(names, w.Name+"="+w.URL)
	}
	if got, want := strings.Join(names, " "), "prefill-0=http://p decode-0=http://d0 decode-1=http://d1"; cfg.Mode != ModeDisaggregated || got != want || cfg.Listen != "127.0.0.1:0" {
		t.Errorf("resolved %s %q listen %q, want %s %q", cfg.Mode, got, cfg.Listen, ModeDisaggregated, want)
	}
	cfg, err = Options{Replicas: []string{"http://a"}}.resolve()
	if err != nil || cfg.Mode != ModeColocated || len(cfg.Workers) != 1 || cfg.Workers[0].Name != "replica-0" {
		t.Errorf("--replica: %+v, err %v", cfg, err)
	}
	for name, o := range map[string]Options{
		"no workers":          {},
		"replica and prefill": {Replicas: []string{"http://a"}, Prefill: []string{"http://p"}},
		"prefill alone":       {Prefill: []string{"http://p"}},
		"no such --config":    {ConfigPath: filepath.Join(t.TempDir(), "none.json")},
		"a --spec that fails": {SpecPath: "x.yaml", SpecConfig: func(string) (Config, error) { return Config{}, errors.New("bad spec") }},
	} {
		if _, err := o.resolve(); !errors.As(err, new(usage.Error)) {
			t.Errorf("%s: err %v, want a usage.Error", name, err)
		}
	}
}

// A --spec's config is used, with the flags given on the command line
// (and only those) over its settings.
func TestOptionsResolveFlagsOverFile(t *testing.T) {
	var o Options
	f := pflag.NewFlagSet("proxy", pflag.ContinueOnError)
	f.StringVar(&o.Listen, "listen", "127.0.0.1:8000", "")
	f.StringVar(&o.Config.Routing, "routing", SessionAffinity, "")
	f.DurationVar(&o.Config.PrefillTimeout, "prefill-timeout", DefaultPrefillTimeout, "")
	o.Config.Limits.AddFlags(f)
	if err := f.Parse([]string{"--routing", RoundRobin}); err != nil {
		t.Fatal(err)
	}
	o.Flags, o.SpecPath = f, "spec.yaml"
	o.SpecConfig = func(path string) (Config, error) {
		return Config{Listen: "0.0.0.0:9000", Routing: SessionAffinity, PrefillTimeout: time.Minute}, nil
	}
	cfg, err := o.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Routing != RoundRobin || cfg.Listen != "0.0.0.0:9000" || cfg.PrefillTimeout != time.Minute {
		t.Errorf("resolved routing %q listen %q prefill timeout %v, want --routing's, the spec's listen and timeout", cfg.Routing, cfg.Listen, cfg.PrefillTimeout)
	}
}

// Run serves until ctx ends, then writes the timelines where asked and
// logs what it did.
func TestRunServesUntilCancelled(t *testing.T) {
	out := filepath.Join(t.TempDir(), "timelines.jsonl")
	var log lockedLog
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Listen: "127.0.0.1:0", Replicas: []string{"http://127.0.0.1:1"}, TimelineOut: out, Log: &log})
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), "proxy listening"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no 'proxy listening' in 10 s:\n%s", log.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), `workers="replica-0=http://127.0.0.1:1"`) {
		t.Errorf("log names no worker:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "proxy stopped") || !strings.Contains(log.String(), "written_to="+out) {
		t.Errorf("log says nothing of the stop or the timelines:\n%s", log.String())
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("timelines: %v", err)
	}
}
