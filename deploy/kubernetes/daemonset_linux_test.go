//go:build linux

package kubernetes

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hone-llm/hone/daemon"
	"github.com/hone-llm/hone/deploy"
)

// DaemonCapabilities are the start capabilities the DaemonSet is rendered
// with: kernels with uprobe_multi links (Linux >= 6.6), no --bpf-stats.
func daemonCapabilities() []string {
	var out []string
	for _, c := range daemon.StartCapabilities(true, false) {
		out = append(out, strings.TrimPrefix(strings.ToUpper(c.String()), "CAP_"))
	}
	return out
}

func TestDaemonSetCapabilities(t *testing.T) {
	want := daemonCapabilities()
	slices.Sort(want)
	if !slices.Equal(want, []string{"BPF", "PERFMON"}) {
		t.Logf("daemon.StartCapabilities(true, false) = %q", want)
	}
	objs, err := RenderDaemon(DaemonOptions{Capabilities: daemonCapabilities()})
	if err != nil {
		t.Fatal(err)
	}
	checkRoundTrip(t, objs)
	ds := objs[3].(*appsv1.DaemonSet)
	if got := AddedCapabilities(ds); !slices.Equal(got, want) {
		t.Errorf("DaemonSet adds %q, daemon.StartCapabilities(true, false) is %q", got, want)
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostPID || pod.HostNetwork || pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" {
		t.Errorf("hostPID %v hostNetwork %v runtimeClass %v", pod.HostPID, pod.HostNetwork, pod.RuntimeClassName)
	}
	if pod.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("node selector %v", pod.NodeSelector)
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 0 {
		t.Fatalf("security context %+v: want privileged false set explicitly", sc)
	}
	ro := map[string]string{}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("mount %s is writable", m.MountPath)
		}
		ro[m.Name] = m.MountPath
	}
	host := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			host[ro[v.Name]] = v.HostPath.Path
		}
	}
	for in, h := range map[string]string{"/sys/kernel/btf": "/sys/kernel/btf", "/sys/fs/cgroup": "/sys/fs/cgroup", "/host/proc": "/proc"} {
		if host[in] != h {
			t.Errorf("mount %s: host path %q, want %q", in, host[in], h)
		}
	}
	if len(host) != 3 {
		t.Errorf("host paths %v, want exactly btf, cgroup and proc", host)
	}
	// The Service and the ServiceMonitor reach the container's metrics port.
	svc := objs[4].(*corev1.Service)
	if svc.Spec.Ports[0].Port != containerPort(t, c, "metrics") || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("Service ports %+v", svc.Spec.Ports)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, ds.Spec.Template.Labels) {
		t.Errorf("Service selector %v, pod labels %v", svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	if !reflect.DeepEqual(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("DaemonSet selector %v, pod labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}
	sm := objs[5].(*monitoringv1.ServiceMonitor)
	if !reflect.DeepEqual(sm.Spec.Selector.MatchLabels, svc.Labels) || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Errorf("ServiceMonitor selects %v port %q; Service labels %v port %q", sm.Spec.Selector.MatchLabels, sm.Spec.Endpoints[0].Port, svc.Labels, svc.Spec.Ports[0].Name)
	}
	var secret string
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	if a := sm.Spec.Endpoints[0].Authorization; a == nil || a.Credentials == nil || a.Credentials.Name != secret || secret == "" {
		t.Errorf("ServiceMonitor authorization %+v; the daemon's token Secret %q", a, secret)
	}
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "--listen 0.0.0.0:9464 --allow-remote --token-file /etc/hone/token/token --pod-selector "+DefaultServingSelector+" --pod-namespace default") {
		t.Errorf("daemon args %q", args)
	}
	// Its identity may read pods in its namespace and nothing else, and the
	// pod runs as it, with the node's name from the downward API and the
	// token readable by the nobody group the daemon drops to.
	sa, role, rb := objs[0].(*corev1.ServiceAccount), objs[1].(*rbacv1.Role), objs[2].(*rbacv1.RoleBinding)
	if pod.ServiceAccountName != sa.Name || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("pod runs as %q; ServiceAccount %s/%s; binding %+v -> %+v", pod.ServiceAccountName, sa.Namespace, sa.Name, rb.Subjects, rb.RoleRef)
	}
	if want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}; !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("daemon Role rules %+v, want %+v", role.Rules, want)
	}
	if len(c.Env) != 3 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" ||
		c.Env[1] != (corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}) || c.Env[2] != (corev1.EnvVar{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "utility"}) {
		t.Errorf("daemon env %+v: want NODE_NAME from spec.nodeName, every GPU visible, the utility (NVML) driver capability", c.Env)
	}
	if _, ok := c.Resources.Limits[GPUResource]; ok {
		t.Errorf("the daemon requests GPUs: %v", c.Resources.Limits)
	}
	if psc := pod.SecurityContext; psc == nil || psc.FSGroup == nil || *psc.FSGroup != 65534 {
		t.Errorf("pod security context %+v: want fsGroup 65534 (the daemon drops to nobody and re-reads its token)", psc)
	}
}

// TestDaemonSelectsServingPods: the DaemonSet's default selector takes
// every serving pod Render makes, and not the proxy's or the daemon's.
func TestDaemonSelectsServingPods(t *testing.T) {
	sel, err := labels.Parse(DefaultServingSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range specFiles(t) {
		if _, ok := refused[filepath.Base(file)]; ok {
			continue
		}
		s, err := deploy.LoadSpec(file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Render(s, Options{})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		serving := 0
		for _, o := range m.Objects {
			var tmpl map[string]string
			switch o := o.(type) {
			case *appsv1.StatefulSet:
				tmpl = o.Spec.Template.Labels
			case *appsv1.Deployment:
				tmpl = o.Spec.Template.Labels
			default:
				continue
			}
			want := tmpl[LabelPool] != PoolProxy
			if got := sel.Matches(labels.Set(tmpl)); got != want {
				t.Errorf("%s: pod labels %v selected %v, want %v", file, tmpl, got, want)
			}
			if want {
				serving++
			}
		}
		if serving == 0 {
			t.Errorf("%s: no serving workload rendered", file)
		}
	}
	ds, err := RenderDaemon(DaemonOptions{Capabilities: daemonCapabilities()})
	if err != nil {
		t.Fatal(err)
	}
	if l := ds[3].(*appsv1.DaemonSet).Spec.Template.Labels; sel.Matches(labels.Set(l)) {
		t.Errorf("the daemon's own pods %v are selected", l)
	}
	if _, err := RenderDaemon(DaemonOptions{Capabilities: daemonCapabilities(), PodSelector: "pool in (a"}); err == nil || !strings.Contains(err.Error(), "--pod-selector") {
		t.Errorf("bad selector: %v", err)
	}
}
