package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/deploy/proxy/kubediscovery"
	"github.com/hone-llm/hone/internal/guard"
)

func init() { subcommands = append(subcommands, newProxyCmd) }

func newProxyCmd() *cobra.Command {
	var o proxyFlags
	c := withHelp(&cobra.Command{
		Use:   "proxy",
		Short: "hone's OpenAI-compatible front door: routing, the NIXL P/D protocol, per-request timelines",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return o.run(c)
		},
	}, "proxy", nil)
	o.bind(c)
	return c
}

// proxyFlags are hone proxy's flags; run carries the command out.
type proxyFlags struct {
	configPath, specPath, listen string
	kubeconfig                   string
	timelineOut                  string
	replicas, prefill, decode    []string
	cfg                          proxy.Config
}

// bind registers the flags on c.
func (o *proxyFlags) bind(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&o.configPath, "config", "", "proxy config JSON (written by hone deploy up)")
	f.StringVar(&o.specPath, "spec", "", "a deployment spec: front its workers at the spec's proxy port")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "with a config's discovery block: the cluster to watch (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.timelineOut, "timeline-out", "", "on shutdown, write every held timeline here (JSON lines)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8000", "address to serve on")
	f.StringArrayVar(&o.replicas, "replica", nil, "a colocated worker's URL (repeatable)")
	f.StringArrayVar(&o.prefill, "prefill", nil, "a prefill worker's URL (repeatable)")
	f.StringArrayVar(&o.decode, "decode", nil, "a decode worker's URL (repeatable)")
	f.StringVar(&o.cfg.Routing, "routing", proxy.SessionAffinity, "session_affinity | round_robin")
	f.StringVar(&o.cfg.SessionHeader, "session-header", proxy.DefaultSessionHeader, "header whose value keeps a session on one worker")
	f.StringVar(&o.cfg.Connector, "connector", proxy.NixlConnector, "KV connector protocol for disaggregated workers: NixlConnector | P2pNcclConnector")
	f.DurationVar(&o.cfg.PrefillTimeout, "prefill-timeout", proxy.DefaultPrefillTimeout, "longest prefill leg")
	f.DurationVar(&o.cfg.DecodeTimeout, "decode-timeout", proxy.DefaultDecodeTimeout, "longest wait for a streaming leg's response headers")
	f.DurationVar(&o.cfg.StreamIdleTimeout, "stream-idle-timeout", proxy.DefaultStreamIdleTimeout, "longest silence inside a stream")
	o.cfg.Limits.AddFlags(f)
}

// resolve states the proxy's config in o.cfg: a --config file, a --spec's
// plan, or the worker flags, with the flags given explicitly over the
// file's settings.
func (o *proxyFlags) resolve(c *cobra.Command) error {
	flags := o.cfg
	switch {
	case o.configPath != "":
		var err error
		if o.cfg, err = proxy.LoadConfig(o.configPath); err != nil {
			return usageError{Err: err}
		}
	case o.specPath != "":
		s, err := deploy.LoadSpec(o.specPath)
		if err != nil {
			return usageError{Err: err}
		}
		plan, err := deploy.Render(s, deploy.RenderOptions{})
		if err != nil {
			return usageError{Err: err}
		}
		o.cfg = deploy.ProxyConfig(plan)
	default:
		add := func(role string, urls []string) {
			for i, u := range urls {
				name := fmt.Sprintf("%s-%d", role, i)
				if role == proxy.RoleColocated {
					name = fmt.Sprintf("replica-%d", i)
				}
				o.cfg.Workers = append(o.cfg.Workers, proxy.Worker{Name: name, Role: role, URL: u})
			}
		}
		add(proxy.RoleColocated, o.replicas)
		add(proxy.RolePrefill, o.prefill)
		add(proxy.RoleDecode, o.decode)
		switch {
		case len(o.replicas) > 0 && len(o.prefill)+len(o.decode) == 0:
			o.cfg.Mode = proxy.ModeColocated
		case len(o.replicas) == 0 && len(o.prefill) > 0 && len(o.decode) > 0:
			o.cfg.Mode = proxy.ModeDisaggregated
		default:
			return badInput("workers: give --replica URL (colocated) or both --prefill URL and --decode URL (disaggregated), or --config / --spec")
		}
	}
	// Flags given explicitly override the file's settings.
	fl := c.Flags()
	if fl.Changed("listen") || o.cfg.Listen == "" {
		o.cfg.Listen = o.listen
	}
	if fl.Changed("routing") {
		o.cfg.Routing = flags.Routing
	}
	if fl.Changed("prefill-timeout") {
		o.cfg.PrefillTimeout = flags.PrefillTimeout
	}
	if fl.Changed("decode-timeout") {
		o.cfg.DecodeTimeout = flags.DecodeTimeout
	}
	if fl.Changed("stream-idle-timeout") {
		o.cfg.StreamIdleTimeout = flags.StreamIdleTimeout
	}
	if fl.Changed("connector") {
		o.cfg.Connector = flags.Connector
	}
	if fl.Changed("session-header") {
		o.cfg.SessionHeader = flags.SessionHeader
	}
	guard.Changed(fl, flags.Limits, &o.cfg.Limits)
	return nil
}

// run is hone proxy: it serves until SIGINT or SIGTERM.
func (o *proxyFlags) run(c *cobra.Command) error {
	if err := o.resolve(c); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.ErrOrStderr(), nil))
	p, err := proxy.New(o.cfg, log)
	if err != nil {
		return usageError{Err: err}
	}
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if d := p.Config().Discovery; d != nil {
		cs, err := kubeClient(o.kubeconfig)
		if err != nil {
			return err
		}
		src := &kubediscovery.Source{Client: cs, Config: *d, Log: log}
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
	if o.timelineOut != "" {
		n, werr := p.WriteTimelines(o.timelineOut)
		if werr != nil {
			return werr
		}
		log.Info("proxy stopped", "counts", fmt.Sprint(p.Counts()), "timelines", n, "written_to", o.timelineOut)
		return nil
	}
	log.Info("proxy stopped", "counts", fmt.Sprint(p.Counts()))
	return nil
}
