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
	var (
		configPath, specPath, listen string
		kubeconfig                   string
		timelineOut                  string
		replicas, prefill, decode    []string
		cfg                          proxy.Config
	)
	c := withHelp(&cobra.Command{
		Use:   "proxy",
		Short: "hone's OpenAI-compatible front door: routing, the NIXL P/D protocol, per-request timelines",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			flags := cfg
			switch {
			case configPath != "":
				var err error
				if cfg, err = proxy.LoadConfig(configPath); err != nil {
					return usageError{Err: err}
				}
			case specPath != "":
				s, err := deploy.LoadSpec(specPath)
				if err != nil {
					return usageError{Err: err}
				}
				plan, err := deploy.Render(s, deploy.RenderOptions{})
				if err != nil {
					return usageError{Err: err}
				}
				cfg = deploy.ProxyConfig(plan)
			default:
				add := func(role string, urls []string) {
					for i, u := range urls {
						name := fmt.Sprintf("%s-%d", role, i)
						if role == proxy.RoleColocated {
							name = fmt.Sprintf("replica-%d", i)
						}
						cfg.Workers = append(cfg.Workers, proxy.Worker{Name: name, Role: role, URL: u})
					}
				}
				add(proxy.RoleColocated, replicas)
				add(proxy.RolePrefill, prefill)
				add(proxy.RoleDecode, decode)
				switch {
				case len(replicas) > 0 && len(prefill)+len(decode) == 0:
					cfg.Mode = proxy.ModeColocated
				case len(replicas) == 0 && len(prefill) > 0 && len(decode) > 0:
					cfg.Mode = proxy.ModeDisaggregated
				default:
					return badInput("workers: give --replica URL (colocated) or both --prefill URL and --decode URL (disaggregated), or --config / --spec")
				}
			}
			// Flags given explicitly override the file's settings.
			fl := c.Flags()
			if fl.Changed("listen") || cfg.Listen == "" {
				cfg.Listen = listen
			}
			if fl.Changed("routing") {
				cfg.Routing = flags.Routing
			}
			if fl.Changed("prefill-timeout") {
				cfg.PrefillTimeout = flags.PrefillTimeout
			}
			if fl.Changed("decode-timeout") {
				cfg.DecodeTimeout = flags.DecodeTimeout
			}
			if fl.Changed("stream-idle-timeout") {
				cfg.StreamIdleTimeout = flags.StreamIdleTimeout
			}
			if fl.Changed("connector") {
				cfg.Connector = flags.Connector
			}
			if fl.Changed("session-header") {
				cfg.SessionHeader = flags.SessionHeader
			}
			guard.Changed(fl, flags.Limits, &cfg.Limits)
			log := slog.New(slog.NewTextHandler(c.ErrOrStderr(), nil))
			p, err := proxy.New(cfg, log)
			if err != nil {
				return usageError{Err: err}
			}
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if d := p.Config().Discovery; d != nil {
				cs, err := kubeClient(kubeconfig)
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
			if timelineOut != "" {
				n, werr := p.WriteTimelines(timelineOut)
				if werr != nil {
					return werr
				}
				log.Info("proxy stopped", "counts", fmt.Sprint(p.Counts()), "timelines", n, "written_to", timelineOut)
				return nil
			}
			log.Info("proxy stopped", "counts", fmt.Sprint(p.Counts()))
			return nil
		},
	}, "proxy", nil)
	f := c.Flags()
	f.StringVar(&configPath, "config", "", "proxy config JSON (written by hone deploy up)")
	f.StringVar(&specPath, "spec", "", "a deployment spec: front its workers at the spec's proxy port")
	f.StringVar(&kubeconfig, "kubeconfig", "", "with a config's discovery block: the cluster to watch (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&timelineOut, "timeline-out", "", "on shutdown, write every held timeline here (JSON lines)")
	f.StringVar(&listen, "listen", "127.0.0.1:8000", "address to serve on")
	f.StringArrayVar(&replicas, "replica", nil, "a colocated worker's URL (repeatable)")
	f.StringArrayVar(&prefill, "prefill", nil, "a prefill worker's URL (repeatable)")
	f.StringArrayVar(&decode, "decode", nil, "a decode worker's URL (repeatable)")
	f.StringVar(&cfg.Routing, "routing", proxy.SessionAffinity, "session_affinity | round_robin")
	f.StringVar(&cfg.SessionHeader, "session-header", proxy.DefaultSessionHeader, "header whose value keeps a session on one worker")
	f.StringVar(&cfg.Connector, "connector", proxy.NixlConnector, "KV connector protocol for disaggregated workers: NixlConnector | P2pNcclConnector")
	f.DurationVar(&cfg.PrefillTimeout, "prefill-timeout", proxy.DefaultPrefillTimeout, "longest prefill leg")
	f.DurationVar(&cfg.DecodeTimeout, "decode-timeout", proxy.DefaultDecodeTimeout, "longest wait for a streaming leg's response headers")
	f.DurationVar(&cfg.StreamIdleTimeout, "stream-idle-timeout", proxy.DefaultStreamIdleTimeout, "longest silence inside a stream")
	cfg.Limits.AddFlags(f)
	return c
}
