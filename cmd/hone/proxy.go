package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/deploy/proxy/kubediscovery"
)

func init() { subcommands = append(subcommands, newProxyCmd) }

func newProxyCmd() *cobra.Command {
	var o proxy.Options
	c := withHelp(&cobra.Command{
		Use:   "proxy",
		Short: "hone's OpenAI-compatible front door: routing, the NIXL P/D protocol, per-request timelines",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.Flags, o.Log = c.Flags(), c.ErrOrStderr()
			o.SpecConfig, o.Discover = specProxyConfig, kubeDiscoverer
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return proxy.Run(ctx, o)
		},
	}, "proxy", nil)
	bindProxyFlags(c, &o)
	return c
}

// bindProxyFlags registers hone proxy's flags on c into o.
func bindProxyFlags(c *cobra.Command, o *proxy.Options) {
	f := c.Flags()
	f.StringVar(&o.ConfigPath, "config", "", "proxy config JSON (written by hone deploy up)")
	f.StringVar(&o.SpecPath, "spec", "", "a deployment spec: front its workers at the spec's proxy port")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "with a config's discovery block: the cluster to watch (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.TimelineOut, "timeline-out", "", "on shutdown, write every held timeline here (JSON lines)")
	f.StringVar(&o.Listen, "listen", "127.0.0.1:8000", "address to serve on")
	f.StringArrayVar(&o.Replicas, "replica", nil, "a colocated worker's URL (repeatable)")
	f.StringArrayVar(&o.Prefill, "prefill", nil, "a prefill worker's URL (repeatable)")
	f.StringArrayVar(&o.Decode, "decode", nil, "a decode worker's URL (repeatable)")
	f.StringVar(&o.Config.Routing, "routing", proxy.SessionAffinity, "session_affinity | round_robin")
	f.StringVar(&o.Config.SessionHeader, "session-header", proxy.DefaultSessionHeader, "header whose value keeps a session on one worker")
	f.StringVar(&o.Config.Connector, "connector", proxy.NixlConnector, "KV connector protocol for disaggregated workers: NixlConnector | P2pNcclConnector")
	f.DurationVar(&o.Config.PrefillTimeout, "prefill-timeout", proxy.DefaultPrefillTimeout, "longest prefill leg")
	f.DurationVar(&o.Config.DecodeTimeout, "decode-timeout", proxy.DefaultDecodeTimeout, "longest wait for a streaming leg's response headers")
	f.DurationVar(&o.Config.StreamIdleTimeout, "stream-idle-timeout", proxy.DefaultStreamIdleTimeout, "longest silence inside a stream")
	o.Config.Limits.AddFlags(f)
}

// specProxyConfig is the proxy config of the deployment spec at path: its
// plan's (package deploy imports package proxy, so hone proxy's --spec is
// read here).
func specProxyConfig(path string) (proxy.Config, error) {
	s, err := deploy.LoadSpec(path)
	if err != nil {
		return proxy.Config{}, err
	}
	plan, err := deploy.Render(s, deploy.RenderOptions{})
	if err != nil {
		return proxy.Config{}, err
	}
	return deploy.ProxyConfig(plan), nil
}

// kubeDiscoverer watches a proxy config's discovery block in kubeconfig's
// cluster (package kubediscovery imports package proxy).
func kubeDiscoverer(kubeconfig string, d proxy.Discovery, log *slog.Logger) (proxy.Discoverer, error) {
	cs, err := kubeClient(kubeconfig)
	if err != nil {
		return nil, err
	}
	return &kubediscovery.Source{Client: cs, Config: d, Log: log}, nil
}
