package kubediscovery

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/internal/monoclock"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

const ns, svc = "hone", "demo-replica"

// slice is one worker's EndpointSlice of svc.
func slice(name, url string, ready bool) *discoveryv1.EndpointSlice {
	host, portStr, _ := net.SplitHostPort(url[len("http://"):])
	port, _ := strconv.Atoi(portStr)
	p32, http := int32(port), "http"
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-" + name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{host},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: name, Namespace: ns},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: &http, Port: &p32}},
	}
}

var disc = proxy.Discovery{Kind: proxy.DiscoveryKubernetes, Namespace: ns,
	Pools: []proxy.DiscoveryPool{{Role: proxy.RoleColocated, Service: svc, Port: 8000}}}

// TestWorkers: ready, non-terminating endpoints of the named Services
// only, at the slice's http port, named by pod, once each.
func TestWorkers(t *testing.T) {
	yes := true
	a := slice("w0", "http://10.0.0.1:8100", true)
	b := slice("w1", "http://10.0.0.2:8100", false) // not ready
	c := slice("w2", "http://10.0.0.3:8100", true)
	c.Endpoints[0].Conditions.Terminating = &yes
	d := slice("w3", "http://10.0.0.4:8100", true)
	d.Labels[discoveryv1.LabelServiceName] = "other"
	e := slice("w4", "http://10.0.0.5:8100", true)
	e.Ports = nil // the pool's port
	e.Endpoints[0].Conditions.Ready = nil
	dup := slice("w0", "http://10.0.0.1:8100", true)
	got := Workers(disc, []*discoveryv1.EndpointSlice{e, a, b, c, d, dup})
	want := []proxy.Worker{
		{Name: "w0", Role: proxy.RoleColocated, URL: "http://10.0.0.1:8100"},
		{Name: "w4", Role: proxy.RoleColocated, URL: "http://10.0.0.5:8000"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Workers = %+v, want %+v", got, want)
	}
}

// TestDiscoveryDuringReplay is hone issue 18's test: a replay runs through
// the proxy while the informer (over a fake clientset) sees a third
// worker's slice added and one worker's slice deleted. Every request
// completes, the added worker serves requests received after it was
// applied, and the removed one none received after its removal.
func TestDiscoveryDuringReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("replays through a proxy over three emulators")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const scale = 0.5
	var urls []string
	for range 3 {
		e, err := emulator.Start(ctx, emulator.Config{Profile: "qwen2.5-coder-0.5b-l4", TimeScale: scale, Host: "127.0.0.1",
			EnablePromptTokensDetails: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		urls = append(urls, e.URL())
	}
	px, err := proxy.New(proxy.Config{Mode: proxy.ModeColocated, Discovery: &disc, HealthInterval: 100 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(px.Handler())
	defer srv.Close()
	pctx, pstop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer bg.Wait()
	defer pstop()
	bg.Add(1)
	go func() { defer bg.Done(); px.Run(pctx) }()

	client := fake.NewClientset(slice("w0", urls[0], true), slice("w1", urls[1], true))
	var mu sync.Mutex
	applied := map[string]monoclock.Stamp{} // worker set (names) -> when SetWorkers returned
	set := func(ws []proxy.Worker) error {
		err := px.SetWorkers(ws)
		key := ""
		for _, w := range ws {
			key += w.Name + " "
		}
		mu.Lock()
		applied[key] = monoclock.Now()
		mu.Unlock()
		return err
	}
	src := &Source{Client: client, Config: disc, Debounce: 20 * time.Millisecond, Log: quiet}
	bg.Add(1)
	go func() {
		defer bg.Done()
		if err := src.Run(pctx, set); err != nil {
			t.Error(err)
		}
	}()
	waitApplied := func(key string) monoclock.Stamp {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			s, ok := applied[key]
			mu.Unlock()
			if ok {
				return s
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("worker set %q never applied", key)
		return monoclock.Stamp{}
	}
	waitApplied("w0 w1 ")

	// The changes, driven by the proxy's progress through the replay.
	var added, removed monoclock.Stamp
	bg.Add(1)
	go func() {
		defer bg.Done()
		until := func(n int) bool {
			for pctx.Err() == nil {
				if _, c := px.Timelines(0, 0); c >= uint64(n) {
					return true
				}
				time.Sleep(5 * time.Millisecond)
			}
			return false
		}
		if !until(30) {
			return
		}
		sl := client.DiscoveryV1().EndpointSlices(ns)
		if _, err := sl.Create(pctx, slice("w2", urls[2], true), metav1.CreateOptions{}); err != nil {
			t.Error(err)
			return
		}
		added = waitApplied("w0 w1 w2 ")
		if !until(70) {
			return
		}
		if err := sl.Delete(pctx, svc+"-w0", metav1.DeleteOptions{}); err != nil {
			t.Error(err)
			return
		}
		removed = waitApplied("w1 w2 ")
	}()

	w := replay.DefaultWorkload()
	w.Requests = 120
	rec, err := replay.Run(ctx, replay.Options{Endpoint: srv.URL, Model: "Qwen/Qwen2.5-Coder-0.5B-Instruct", Kind: schema.KindEmulated,
		Backend: "emulator", Workload: w, QPS: []float64{20}, TimeScale: scale})
	if err != nil {
		t.Fatal(err)
	}
	pstop()
	bg.Wait()
	if added == (monoclock.Stamp{}) || removed == (monoclock.Stamp{}) {
		t.Fatal("the replay ended before both changes were applied")
	}
	if rec.Outcomes[schema.OutcomeOK] != 120 || len(rec.Outcomes) != 1 {
		t.Errorf("replay outcomes %v, want all 120 ok", rec.Outcomes)
	}
	tls, _ := px.Timelines(0, 0)
	var afterAdd, onAddedAfterAdd, onRemovedAfterRemoval, failed int
	for _, tl := range tls {
		if tl.Path != "/v1/completions" {
			continue
		}
		if tl.Outcome != proxy.OutcomeSuccess {
			failed++
		}
		worker := ""
		if tl.Decode != nil {
			worker = tl.Decode.Worker
		}
		if tl.Received.MonoNs > added.MonoNs {
			afterAdd++
			if worker == "w2" {
				onAddedAfterAdd++
			}
		}
		if tl.Received.MonoNs > removed.MonoNs && worker == "w0" {
			onRemovedAfterRemoval++
		}
	}
	if failed != 0 {
		t.Errorf("%d requests failed at the proxy", failed)
	}
	if onAddedAfterAdd == 0 {
		t.Errorf("none of %d requests received after w2 was added reached it", afterAdd)
	}
	if onRemovedAfterRemoval != 0 {
		t.Errorf("%d requests received after w0's removal reached it", onRemovedAfterRemoval)
	}
	t.Logf("%d completions; %d after the addition, %d of them on w2", len(tls), afterAdd, onAddedAfterAdd)
}
