package kubediscovery

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/hone-llm/hone/deploy/proxy"
)

// DefaultDebounce is how long a change must settle before the proxy's set
// is replaced: a pod rolling touches its slice several times.
const DefaultDebounce = 200 * time.Millisecond

// Source watches the EndpointSlices of a Discovery's Services.
type Source struct {
	Client   kubernetes.Interface
	Config   proxy.Discovery
	Debounce time.Duration // 0: DefaultDebounce
	Log      *slog.Logger
}

// Run calls set with the ready workers of every pool once the informer has
// synced, then after each change (debounced, and only when the set
// differs), until ctx ends. An error from set is logged, not fatal: the
// next change tries again.
func (s *Source) Run(ctx context.Context, set func([]proxy.Worker) error) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	debounce := s.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	var svcs []string
	for _, p := range s.Config.Pools {
		svcs = append(svcs, p.Service)
	}
	selector := discoveryv1.LabelServiceName + " in (" + strings.Join(svcs, ",") + ")"
	if _, err := labels.Parse(selector); err != nil {
		return fmt.Errorf("discovery.pools: services %v: %w", svcs, err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(s.Client, 0,
		informers.WithNamespace(s.Config.Namespace),
		informers.WithTweakListOptions(func(o *v1.ListOptions) { o.LabelSelector = selector }))
	inf := f.Discovery().V1().EndpointSlices()
	poke := make(chan struct{}, 1)
	kick := func(any) {
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    kick,
		UpdateFunc: func(_, o any) { kick(o) },
		DeleteFunc: kick,
	}); err != nil {
		return fmt.Errorf("endpointslice informer: %w", err)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return ctx.Err()
	}
	lister := inf.Lister().EndpointSlices(s.Config.Namespace)
	var last []proxy.Worker
	apply := func() {
		all, err := lister.List(labels.Everything())
		if err != nil {
			log.Warn("list endpointslices", "err", err)
			return
		}
		ws := Workers(s.Config, all)
		if last != nil && slices.Equal(ws, last) {
			return
		}
		if err := set(ws); err != nil {
			log.Warn("discovered workers refused", "err", err)
			return
		}
		last = ws
		log.Info("discovered workers", "workers", len(ws))
	}
	apply()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-poke:
		}
		t := time.NewTimer(debounce)
	settle:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-poke:
				t.Reset(debounce)
			case <-t.C:
				break settle
			}
		}
		apply()
	}
}

// Workers is the worker set the slices describe: per pool, in the config's
// order, each ready, not terminating endpoint's first address at the
// slice's port named http (else the pool's port), named by its pod (else its hostname, else its address),
// sorted by name. An endpoint in two slices (as during a slice split)
// counts once.
func Workers(d proxy.Discovery, eps []*discoveryv1.EndpointSlice) []proxy.Worker {
	var out []proxy.Worker
	for _, p := range d.Pools {
		byName := map[string]proxy.Worker{}
		for _, sl := range eps {
			if sl.Labels[discoveryv1.LabelServiceName] != p.Service || sl.Namespace != d.Namespace {
				continue
			}
			if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
				continue
			}
			port := p.Port
			for _, pt := range sl.Ports {
				if pt.Name != nil && *pt.Name == "http" && pt.Port != nil {
					port = int(*pt.Port)
				}
			}
			for _, ep := range sl.Endpoints {
				c := ep.Conditions
				if len(ep.Addresses) == 0 || (c.Ready != nil && !*c.Ready) || (c.Terminating != nil && *c.Terminating) {
					continue
				}
				addr := ep.Addresses[0]
				name := addr
				switch {
				case ep.TargetRef != nil && ep.TargetRef.Name != "":
					name = ep.TargetRef.Name
				case ep.Hostname != nil && *ep.Hostname != "":
					name = *ep.Hostname
				}
				byName[name] = proxy.Worker{Name: name, Role: p.Role, URL: "http://" + net.JoinHostPort(addr, strconv.Itoa(port))}
			}
		}
		start := len(out)
		for _, w := range byName {
			out = append(out, w)
		}
		slices.SortFunc(out[start:], func(a, b proxy.Worker) int { return strings.Compare(a.Name, b.Name) })
	}
	return out
}
