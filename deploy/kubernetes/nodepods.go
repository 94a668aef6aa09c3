package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/hone-llm/hone/deploy"
)

// DefaultServingSelector selects the serving pods hone renders (every
// pool but the proxy, the replay Job and the daemon): what the rendered
// DaemonSet's daemon traces.
const DefaultServingSelector = LabelName + "=" + AppName + "," + LabelPool + " in (" + deploy.RolePrefill + "," + deploy.RoleDecode + "," + deploy.RoleColocated + ")"

// NodePods is the set of pods in a namespace on one node whose labels match a selector,
// kept current by an informer (list and watch of pods with field selector
// spec.nodeName, so the API server sends this node's pods only). It is the
// daemon's PodSet for hone daemon --pod-selector.
type NodePods struct {
	mu   sync.Mutex
	pods map[string]string // UID -> namespace/name
}

// WatchNodePods starts watching and returns once the first list has
// arrived (or fails after timeout: a missing RBAC rule or an unreachable
// API server is an error at start, not an empty set). The watch ends with
// ctx.
func WatchNodePods(ctx context.Context, cs k8s.Interface, namespace, selector, node string, timeout time.Duration) (*NodePods, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("--pod-selector %q: %w", selector, err)
	}
	if node == "" {
		return nil, fmt.Errorf("--node-name: empty (the DaemonSet sets NODE_NAME from spec.nodeName)")
	}
	np := &NodePods{pods: map[string]string{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = sel.String()
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	inf := f.Core().V1().Pods()
	lister := inf.Lister()
	update := func(any) {
		all, err := lister.List(sel)
		if err != nil {
			return
		}
		np.set(selectNodePods(all, namespace, sel, node))
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, o any) { update(o) },
		DeleteFunc: update,
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	f.Start(ctx.Done())
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wait.Done(), inf.Informer().HasSynced) {
		f.Shutdown()
		return nil, fmt.Errorf("list pods in namespace %q on node %s matching %q: no answer from the API server within %v (RBAC: the daemon's ServiceAccount needs get, list and watch on pods there)", namespace, node, selector, timeout)
	}
	update(nil)
	go func() { <-ctx.Done(); f.Shutdown() }()
	return np, nil
}

// selectNodePods is the set of pods in all that are in namespace ("":
// any), run on node, match sel and have not finished. The API server already filters by node and
// labels; a fake clientset does not, and the check is cheap.
func selectNodePods(all []*corev1.Pod, namespace string, sel labels.Selector, node string) map[string]string {
	out := map[string]string{}
	for _, p := range all {
		if p.Spec.NodeName != node || (namespace != "" && p.Namespace != namespace) || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out[string(p.UID)] = p.Namespace + "/" + p.Name
	}
	return out
}

func (n *NodePods) set(m map[string]string) {
	n.mu.Lock()
	n.pods = m
	n.mu.Unlock()
}

// Pods returns the current set: UID -> namespace/name.
func (n *NodePods) Pods() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.pods)
}
