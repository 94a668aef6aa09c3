package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// FieldManager is the server-side-apply field manager hone applies as.
const FieldManager = "hone"

// Applied names one object Apply applied.
type Applied struct{ Kind, Name string }

func (a Applied) String() string { return a.Kind + "/" + a.Name }

// Apply server-side-applies the objects, in order, as FieldManager with
// force: a second Apply of the same objects changes nothing, and fields
// hone owns are taken back from other managers. Only the kinds Render
// and RenderDaemon make are accepted; a ServiceMonitor is refused (apply it
// with kubectl: it is a custom resource the core clientset cannot reach).
func Apply(ctx context.Context, cs kubernetes.Interface, objs []runtime.Object) ([]Applied, error) {
	force := true
	po := metav1.PatchOptions{FieldManager: FieldManager, Force: &force}
	var out []Applied
	for _, o := range objs {
		body, err := json.Marshal(o)
		if err != nil {
			return out, err
		}
		var name, ns, kind string
		switch o := o.(type) {
		case *corev1.ConfigMap:
			name, ns, kind = o.Name, o.Namespace, "ConfigMap"
			_, err = cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.ApplyPatchType, body, po)
		case *corev1.ServiceAccount:
			name, ns, kind = o.Name, o.Namespace, "ServiceAccount"
			_, err = cs.CoreV1().ServiceAccounts(ns).Patch(ctx, name, types.ApplyPatchType, body, po)
		case *rbacv1.Role:
			name, ns, kind = o.Name, o.Namespace, "Role"
			_, err = cs.RbacV1().Roles(ns).Patch(ctx, name, types.ApplyPatchType, body, po)
		case *rbacv1.RoleBinding:
			name, ns, kind = o.Name, o.Namespace, "RoleBinding"
			_, err = cs.RbacV1().RoleBindings(ns).Patch(ctx, name, types.ApplyPatchType, body, po)
		case *corev1.Service:
			name, ns, kind = o.Name, o.Namespace, "Service"
			_, err = cs.CoreV1().Services(ns).Patch(ctx, name, types.ApplyPatchType, body, po)
		case *appsv1.StatefulSet:
			name, ns, kind = o.Name, o.Namespace, "StatefulSet"
			_, err = cs.AppsV1().StatefulSets(ns).Patch(ctx, name, types.ApplyPatchType, body, po)
		case *appsv1.Deployment:
			name, ns, kind = o.Name, o.Namespace, "Deployment"
			_, err = cs.AppsV1().Deployments(ns).Patch(ctx, name, types.ApplyPatchType, body, po)
		case *appsv1.DaemonSet:
			name, ns, kind = o.Name, o.Namespace, "DaemonSet"
			_, err = cs.AppsV1().DaemonSets(ns).Patch(ctx, name, types.ApplyPatchType, body, po)
		default:
			return out, fmt.Errorf("apply: cannot apply a %T; use kubectl apply for it", o)
		}
		if err != nil {
			return out, fmt.Errorf("apply %s %s/%s: %w", kind, ns, name, err)
		}
		out = append(out, Applied{kind, name})
	}
	return out, nil
}

// Selector selects every object rendered for one spec.
func Selector(spec string) string {
	return LabelName + "=" + AppName + "," + LabelInstance + "=" + spec
}

// Delete deletes every Deployment, StatefulSet, DaemonSet, Service,
// ConfigMap, RoleBinding, Role and ServiceAccount in namespace labelled as rendered for spec (Selector), and
// returns what it deleted. Pods go with their workloads.
func Delete(ctx context.Context, cs kubernetes.Interface, namespace, spec string) ([]Applied, error) {
	lo := metav1.ListOptions{LabelSelector: Selector(spec)}
	bg := metav1.DeletePropagationBackground
	do := metav1.DeleteOptions{PropagationPolicy: &bg}
	var out []Applied
	type kind struct {
		name   string
		list   func() ([]string, error)
		delete func(string) error
	}
	names := func(items int, at func(int) string) []string {
		var s []string
		for i := range items {
			s = append(s, at(i))
		}
		return s
	}
	apps, core, rbac := cs.AppsV1(), cs.CoreV1(), cs.RbacV1()
	kinds := []kind{
		{"Deployment", func() ([]string, error) {
			l, err := apps.Deployments(namespace).List(ctx, lo)
			if err != nil {
				return nil, err
			}
			return names(len(l.Items), func(i int) string { return l.Items[i].Name }), nil
		}, func(n string) error { return apps.Deployments(namespace).Delete(ctx, n, do) }},
		{"StatefulSet", func() ([]string, error) {
			l, err := apps.StatefulSets(namespace).List(ctx, lo)
			if err != nil {
				return nil, err
			}
			return names(len(l.Items), func(i int) string { return l.Items[i].Name }), nil
		}, func(n string) error { return apps.StatefulSets(namespace).Delete(ctx, n, do) }},
		{"DaemonSet", func() ([]string, error) {
			l, err := apps.DaemonSets(namespace).List(ctx, lo)
			if err != nil {
				return nil, err
			}
			return names(len(l.Items), func(i int) string { return l.Items[i].Name }), nil
		}, func(n string) error { return apps.DaemonSets(namespace).Delete(ctx, n, do) }},
		{"Service", func() ([]string, error) {
			l, err := core.Services(namespace).List(ctx, lo)
			if err != nil {
				return nil, err
			}
			return names(len(l.Items), func(i int) string { return l.Items[i].Name }), nil
		}, func(n string) error { return core.Services(namespace).Delete(ctx, n, do) }},
		{"ConfigMap", func() ([]string, error) {
			l, err := core.ConfigMaps(namespace).List(ctx, lo)
			if err != nil {
				return nil, err
			}
			return names(len(l.Items), func(i int) string { return l.Items[i].Name }), nil
		}, func(n string) error { return core.ConfigMaps(namespace).Delete(ctx, n, do) }},
		{"RoleBinding", func() ([]string, error) {
			l, err := rbac.RoleBindings(namespace).List(ctx, lo)
			if err != nil {
				return nil, err
			}
			return names(len(l.Items), func(i int) string { return l.Items[i].Name }), nil
		}, func(n string) error { return rbac.RoleBindings(namespace).Delete(ctx, n, do) }},
		{"Role", func() ([]string, error) {
			l, err := rbac.Roles(namespace).List(ctx, lo)
			if err != nil {
				return nil, err
			}
			return names(len(l.Items), func(i int) string { return l.Items[i].Name }), nil
		}, func(n string) error { return rbac.Roles(namespace).Delete(ctx, n, do) }},
		{"ServiceAccount", func() ([]string, error) {
			l, err := core.ServiceAccounts(namespace).List(ctx, lo)
			if err != nil {
				return nil, err
			}
			return names(len(l.Items), func(i int) string { return l.Items[i].Name }), nil
		}, func(n string) error { return core.ServiceAccounts(namespace).Delete(ctx, n, do) }},
	}
	for _, k := range kinds {
		ns, err := k.list()
		if err != nil {
			return out, fmt.Errorf("list %ss labelled %s: %w", k.name, Selector(spec), err)
		}
		slices.Sort(ns)
		for _, n := range ns {
			if err := k.delete(n); err != nil {
				return out, fmt.Errorf("delete %s %s/%s: %w", k.name, namespace, n, err)
			}
			out = append(out, Applied{k.name, n})
		}
	}
	return out, nil
}

// Readiness is a step of Wait.
type Readiness struct {
	Ready, Want int
	Waiting     []string // pods not Ready, and workloads short of pods
	Elapsed     time.Duration
	Done        bool
}

// WantPods is how many pods the objects' workloads run (DaemonSets aside:
// their count is the cluster's).
func WantPods(objs []runtime.Object) int {
	n := 0
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.StatefulSet:
			n += int(*o.Spec.Replicas)
		case *appsv1.Deployment:
			n += int(*o.Spec.Replicas)
		}
	}
	return n
}

// Wait polls, every interval, the pods labelled for spec until want of
// them are Ready, calling progress after each poll, or until timeout.
func Wait(ctx context.Context, cs kubernetes.Interface, namespace, spec string, want int, timeout, interval time.Duration, progress func(Readiness)) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		l, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector(spec)})
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("list pods labelled %s: %w", Selector(spec), err)
		}
		r := Readiness{Want: want, Elapsed: time.Since(start)}
		if l != nil {
			for _, p := range l.Items {
				if podReady(&p) {
					r.Ready++
				} else {
					r.Waiting = append(r.Waiting, p.Name+" ("+podPhase(&p)+")")
				}
			}
			slices.Sort(r.Waiting)
		}
		r.Done = r.Ready >= want
		if progress != nil {
			progress(r)
		}
		if r.Done {
			return nil
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("%d of %d pods Ready after %s; waiting for %s", r.Ready, want, timeout, strings.Join(r.Waiting, ", "))
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podPhase says why a pod is not Ready: a waiting container's reason
// (ImagePullBackOff, CrashLoopBackOff) when there is one, else its phase.
func podPhase(p *corev1.Pod) string {
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason
		}
	}
	if p.Status.Phase == "" {
		return "Pending"
	}
	return string(p.Status.Phase)
}
