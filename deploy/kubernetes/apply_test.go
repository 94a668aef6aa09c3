package kubernetes

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hone-llm/hone/deploy"
)

func renderSpec(t *testing.T, file string) *Manifest {
	t.Helper()
	s, err := deploy.LoadSpec(file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Render(s, Options{Namespace: "ns1"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// inCluster lists every Deployment, StatefulSet, Service, ConfigMap,
// ServiceAccount, Role and RoleBinding in ns as Kind/name, sorted.
func inCluster(t *testing.T, cs kubernetes.Interface, ns string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	d, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range d.Items {
		out = append(out, "Deployment/"+x.Name)
	}
	ss, _ := cs.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
	for _, x := range ss.Items {
		out = append(out, "StatefulSet/"+x.Name)
	}
	svc, _ := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	for _, x := range svc.Items {
		out = append(out, "Service/"+x.Name)
	}
	cm, _ := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	for _, x := range cm.Items {
		out = append(out, "ConfigMap/"+x.Name)
	}
	sa, _ := cs.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
	for _, x := range sa.Items {
		out = append(out, "ServiceAccount/"+x.Name)
	}
	ro, _ := cs.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{})
	for _, x := range ro.Items {
		out = append(out, "Role/"+x.Name)
	}
	rb, _ := cs.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{})
	for _, x := range rb.Items {
		out = append(out, "RoleBinding/"+x.Name)
	}
	slices.Sort(out)
	return out
}

func TestApplyIdempotentAndDelete(t *testing.T) {
	ctx := context.Background()
	m := renderSpec(t, "../testdata/specs/disagg-nixl-2p2d.yaml")
	other := renderSpec(t, "../testdata/specs/colocated-tp2.yaml")
	// Unlabelled objects in the same namespace must survive Delete.
	stranger := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "stranger", Namespace: "ns1", Labels: map[string]string{LabelInstance: "disagg-nixl-2p2d"}}}
	cs := fake.NewClientset(stranger)

	applied, err := Apply(ctx, cs, m.Objects)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != len(m.Objects) {
		t.Fatalf("applied %d objects, rendered %d", len(applied), len(m.Objects))
	}
	var want []string
	for _, a := range applied {
		want = append(want, a.String())
	}
	want = append(want, "Service/stranger")
	slices.Sort(want)
	first := inCluster(t, cs, "ns1")
	if !slices.Equal(first, want) {
		t.Fatalf("in the cluster after apply:\n%q\nwant\n%q", first, want)
	}
	ss1, err := cs.AppsV1().StatefulSets("ns1").Get(ctx, "disagg-nixl-2p2d-decode", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *ss1.Spec.Replicas != 2 || ss1.Spec.Template.Spec.Containers[0].Args[1] != "Qwen/Qwen2.5-Coder-7B-Instruct" {
		t.Errorf("decode StatefulSet as applied: replicas %d, args %q", *ss1.Spec.Replicas, ss1.Spec.Template.Spec.Containers[0].Args)
	}
	if !slices.ContainsFunc(ss1.ManagedFields, func(f metav1.ManagedFieldsEntry) bool {
		return f.Manager == FieldManager && f.Operation == metav1.ManagedFieldsOperationApply
	}) {
		t.Errorf("managed fields %+v: want an Apply entry by %q", ss1.ManagedFields, FieldManager)
	}

	// A second apply: no new objects, the same specs.
	if _, err := Apply(ctx, cs, m.Objects); err != nil {
		t.Fatal(err)
	}
	if again := inCluster(t, cs, "ns1"); !slices.Equal(again, first) {
		t.Fatalf("after a second apply:\n%q\nwant\n%q", again, first)
	}
	ss2, _ := cs.AppsV1().StatefulSets("ns1").Get(ctx, "disagg-nixl-2p2d-decode", metav1.GetOptions{})
	if !equalSpec(ss1, ss2) {
		t.Errorf("second apply changed the StatefulSet:\n%+v\n%+v", ss1.Spec, ss2.Spec)
	}

	// A changed spec (decode replicas 2 → 3) updates in place.
	changed := renderSpec(t, "../testdata/specs/disagg-nixl-2p2d.yaml")
	for _, o := range changed.Objects {
		if s, ok := o.(*appsv1.StatefulSet); ok && s.Name == "disagg-nixl-2p2d-decode" {
			three := int32(3)
			s.Spec.Replicas = &three
		}
	}
	if _, err := Apply(ctx, cs, changed.Objects); err != nil {
		t.Fatal(err)
	}
	ss3, _ := cs.AppsV1().StatefulSets("ns1").Get(ctx, "disagg-nixl-2p2d-decode", metav1.GetOptions{})
	if *ss3.Spec.Replicas != 3 {
		t.Errorf("replicas after re-apply %d, want 3", *ss3.Spec.Replicas)
	}
	if again := inCluster(t, cs, "ns1"); !slices.Equal(again, first) {
		t.Fatalf("after an updating apply:\n%q\nwant\n%q", again, first)
	}

	// Another spec in the same namespace.
	if _, err := Apply(ctx, cs, other.Objects); err != nil {
		t.Fatal(err)
	}
	deleted, err := Delete(ctx, cs, "ns1", "disagg-nixl-2p2d")
	if err != nil {
		t.Fatal(err)
	}
	var gotDeleted []string
	for _, d := range deleted {
		gotDeleted = append(gotDeleted, d.String())
	}
	slices.Sort(gotDeleted)
	wantDeleted := slices.DeleteFunc(slices.Clone(first), func(s string) bool { return s == "Service/stranger" })
	if !slices.Equal(gotDeleted, wantDeleted) {
		t.Errorf("deleted %q, want %q", gotDeleted, wantDeleted)
	}
	left := inCluster(t, cs, "ns1")
	for _, l := range left {
		if strings.Contains(l, "disagg-nixl-2p2d") {
			t.Errorf("%s left after Delete", l)
		}
	}
	if !slices.Contains(left, "Service/stranger") || !slices.Contains(left, "StatefulSet/coloc-tp2-replica") || !slices.Contains(left, "Deployment/coloc-tp2-proxy") {
		t.Errorf("Delete removed objects it does not own: left %q", left)
	}
	if n := len(left); n != 1+len(other.Objects) {
		t.Errorf("%d objects left, want the stranger and coloc-tp2's %d: %q", n, len(other.Objects), left)
	}
}

func equalSpec(a, b *appsv1.StatefulSet) bool {
	x, y := a.DeepCopy(), b.DeepCopy()
	return x.Spec.String() == y.Spec.String() && x.ResourceVersion == y.ResourceVersion
}

func TestApplyRefusesServiceMonitor(t *testing.T) {
	objs, err := RenderDaemon(DaemonOptions{Capabilities: []string{"BPF", "PERFMON"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Apply(context.Background(), fake.NewClientset(), objs)
	if err == nil || !strings.Contains(err.Error(), "ServiceMonitor") {
		t.Errorf("Apply of a ServiceMonitor: %v, want a refusal naming it", err)
	}
}

func pod(name, spec string, ready bool, waiting string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns1", Labels: Labels(spec, "decode")}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if waiting != "" {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}}
	}
	return p
}

func TestWait(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(
		pod("s-decode-0", "s", true, ""),
		pod("s-decode-1", "s", false, "ImagePullBackOff"),
		pod("x-decode-0", "x", true, ""), // another spec's: not counted
	)
	var steps []Readiness
	err := Wait(ctx, cs, "ns1", "s", 2, 50*time.Millisecond, 10*time.Millisecond, func(r Readiness) { steps = append(steps, r) })
	if err == nil || !strings.Contains(err.Error(), "1 of 2 pods Ready") || !strings.Contains(err.Error(), "s-decode-1 (ImagePullBackOff)") {
		t.Fatalf("Wait: %v, want a timeout naming s-decode-1 (ImagePullBackOff)", err)
	}
	if len(steps) == 0 || steps[0].Ready != 1 || steps[0].Done {
		t.Fatalf("progress %+v", steps)
	}
	// The pod becomes Ready while Wait polls.
	go func() {
		time.Sleep(30 * time.Millisecond)
		cs.CoreV1().Pods("ns1").UpdateStatus(ctx, pod("s-decode-1", "s", true, ""), metav1.UpdateOptions{})
	}()
	steps = nil
	if err := Wait(ctx, cs, "ns1", "s", 2, 10*time.Second, 10*time.Millisecond, func(r Readiness) { steps = append(steps, r) }); err != nil {
		t.Fatal(err)
	}
	if last := steps[len(steps)-1]; !last.Done || last.Ready != 2 || len(last.Waiting) != 0 {
		t.Errorf("last progress %+v, want 2 Ready and done", last)
	}
}

// TestWatchNodePods feeds a fake clientset pods on two nodes, in two
// namespaces, with and without the serving labels, and moves them while
// the watch runs: the set is exactly the matching pods on the node.
func TestWatchNodePods(t *testing.T) {
	cs := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mk := func(name, ns, node, pool string, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), Labels: Labels("s", pool)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(mk("s-decode-0", "llm", "gpu-1", "decode", "u1"))
	create(mk("s-prefill-0", "llm", "gpu-2", "prefill", "u2"))       // another node
	create(mk("s-proxy-abc", "llm", "gpu-1", PoolProxy, "u3"))       // not serving
	create(mk("s-colocated-0", "other", "gpu-1", "colocated", "u4")) // another namespace
	if _, err := WatchNodePods(ctx, cs, "llm", "pool in (a", "gpu-1", time.Second); err == nil || !strings.Contains(err.Error(), "--pod-selector") {
		t.Errorf("bad selector: %v", err)
	}
	if _, err := WatchNodePods(ctx, cs, "llm", DefaultServingSelector, "", time.Second); err == nil || !strings.Contains(err.Error(), "--node-name") {
		t.Errorf("no node: %v", err)
	}
	np, err := WatchNodePods(ctx, cs, "llm", DefaultServingSelector, "gpu-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := func(w map[string]string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !maps.Equal(np.Pods(), w) {
			if time.Now().After(deadline) {
				t.Fatalf("pods %v, want %v", np.Pods(), w)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want(map[string]string{"u1": "llm/s-decode-0"})
	create(mk("s-prefill-1", "llm", "gpu-1", "prefill", "u5"))
	want(map[string]string{"u1": "llm/s-decode-0", "u5": "llm/s-prefill-1"})
	done := mk("s-prefill-1", "llm", "gpu-1", "prefill", "u5")
	done.Status.Phase = corev1.PodSucceeded
	if _, err := cs.CoreV1().Pods("llm").Update(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want(map[string]string{"u1": "llm/s-decode-0"})
	if err := cs.CoreV1().Pods("llm").Delete(ctx, "s-decode-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want(map[string]string{})
}
