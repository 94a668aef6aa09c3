package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/hone-llm/hone/internal/guard"
	"github.com/hone-llm/hone/internal/usage"
)

// Options is what hone proxy takes: the Config its flags fill (routing,
// session header, connector, timeouts, limits) and the flags that are not
// the Config's, by name.
type Options struct {
	Config      Config   // the flags' settings
	ConfigPath  string   // --config: a proxy config file (LoadConfig)
	SpecPath    string   // --spec: a deployment spec (SpecConfig)
	Listen      string   // --listen
	Kubeconfig  string   // --kubeconfig: the cluster Discover watches
	TimelineOut string   // --timeline-out: write the timelines here at the end
	Replicas    []string // --replica: colocated workers' URLs
	Prefill     []string // --prefill: prefill workers' URLs
	Decode      []string // --decode: decode workers' URLs
	// Flags are the command line's: a flag given there (Changed)
	// overrides a --config's or --spec's setting. nil: none was given.
	Flags *pflag.FlagSet
	// SpecConfig is the proxy config of the deployment spec at path.
	// cmd/hone's renders the spec with package deploy, which imports
	// this package.
	SpecConfig func(path string) (Config, error)
	// Discover returns what watches the workers of a config's discovery
	// block in kubeconfig's cluster ("": in-cluster, else $KUBECONFIG or
	// ~/.kube/config). cmd/hone's is package kubediscovery's Source, which
	// imports this package.
	Discover func(kubeconfig string, d Discovery, log *slog.Logger) (Discoverer, error)
	// Log gets the proxy's log.
	Log io.Writer
}

// Discoverer watches a deployment's workers: Run calls set with each new
// set until ctx ends.
type Discoverer interface {
	Run(ctx context.Context, set func([]Worker) error) error
}

// Run is hone proxy: it states the config (a --config file, a --spec's
// plan, or the worker flags, with the flags given over the file's
// settings), starts the proxy and, for a config with a discovery block,
// the watch of its workers, and serves until ctx ends; then it writes the
// timelines to TimelineOut. Bad input is a usage.Error.
func Run(ctx context.Context, o Options) error {
	cfg, err := o.resolve()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(o.Log, nil))
	p, err := New(cfg, log)
	if err != nil {
		return usage.Wrap(err)
	}
	if d := p.Config().Discovery; d != nil {
		src, err := o.Discover(o.Kubeconfig, *d, log)
		if err != nil {
			return err
		}
		go func() {
			if err := src.Run(ctx, p.SetWorkers); err != nil {
				log.Error("worker discovery stopped", "err", err)
			}
		}()
	}
	err = p.ListenAndServe(ctx, func(addr string) {
		var names []string
		for _, w := range p.Config().Workers {
			names = append(names, w.Name+"="+w.URL)
		}
		log.Info("proxy listening", "addr", "http://"+addr, "mode", p.Config().Mode, "routing", p.Config().Routing, "workers", strings.Join(names, " "),
			"max_connections", p.Config().MaxConnections, "max_body_bytes", p.Config().MaxBodyBytes)
	}, 10*time.Second)
	if err != nil {
		return err
	}
	if o.TimelineOut != "" {
		n, werr := p.WriteTimelines(o.TimelineOut)
		if werr != nil {
			return werr
		}
		log.Info("proxy stopped", "counts", fmt.Sprint(p.Counts()), "timelines", n, "written_to", o.TimelineOut)
		return nil
	}
	log.Info("proxy stopped", "counts", fmt.Sprint(p.Counts()))
	return nil
}

// resolve states the proxy's config: a --config file, a --spec's plan, or
// the worker flags, with the flags given explicitly over the file's
// settings.
func (o Options) resolve() (Config, error) {
	flags := o.Config
	var cfg Config
	switch {
	case o.ConfigPath != "":
		var err error
		if cfg, err = LoadConfig(o.ConfigPath); err != nil {
			return Config{}, usage.Wrap(err)
		}
	case o.SpecPath != "":
		var err error
		if cfg, err = o.SpecConfig(o.SpecPath); err != nil {
			return Config{}, usage.Wrap(err)
		}
	default:
		cfg = o.Config
		if err := o.workers(&cfg); err != nil {
			return Config{}, err
		}
	}
	changed := func(string) bool { return false }
	if o.Flags != nil {
		changed = o.Flags.Changed
	}
	// Flags given explicitly override the file's settings.
	if changed("listen") || cfg.Listen == "" {
		cfg.Listen = o.Listen
	}
	if changed("routing") {
		cfg.Routing = flags.Routing
	}
	if changed("prefill-timeout") {
		cfg.PrefillTimeout = flags.PrefillTimeout
	}
	if changed("decode-timeout") {
		cfg.DecodeTimeout = flags.DecodeTimeout
	}
	if changed("stream-idle-timeout") {
		cfg.StreamIdleTimeout = flags.StreamIdleTimeout
	}
	if changed("connector") {
		cfg.Connector = flags.Connector
	}
	if changed("session-header") {
		cfg.SessionHeader = flags.SessionHeader
	}
	if o.Flags != nil {
		guard.Changed(o.Flags, flags.Limits, &cfg.Limits)
	}
	return cfg, nil
}

// workers states cfg's workers and mode from the --replica, --prefill and
// --decode flags.
func (o Options) workers(cfg *Config) error {
	add := func(role string, urls []string) {
		for i, u := range urls {
			name := fmt.Sprintf("%s-%d", role, i)
			if role == RoleColocated {
				name = fmt.Sprintf("replica-%d", i)
			}
			cfg.Workers = append(cfg.Workers, Worker{Name: name, Role: role, URL: u})
		}
	}
	add(RoleColocated, o.Replicas)
	add(RolePrefill, o.Prefill)
	add(RoleDecode, o.Decode)
	switch {
	case len(o.Replicas) > 0 && len(o.Prefill)+len(o.Decode) == 0:
		cfg.Mode = ModeColocated
	case len(o.Replicas) == 0 && len(o.Prefill) > 0 && len(o.Decode) > 0:
		cfg.Mode = ModeDisaggregated
	default:
		return usage.Errorf("workers: give --replica URL (colocated) or both --prefill URL and --decode URL (disaggregated), or --config / --spec")
	}
	return nil
}
