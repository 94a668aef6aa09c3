package kubernetes

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/deploy/proxy"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml")

// refused are the specs Render must refuse, and the start of the message.
var refused = map[string]string{
	"disagg-p2pnccl-1p1d.yaml":  "spec.model.path: ",
	"emulator-disagg-1p2d.yaml": "spec.emulator.trace_dir: ",
}

func specFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, g := range []string{"../testdata/specs/*.yaml", "../../examples/*.yaml"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 11 {
		t.Fatalf("found %d specs, want the 6 of deploy/testdata/specs and the 5 of examples at least", len(files))
	}
	return files
}

func TestRenderEverySpec(t *testing.T) {
	for _, file := range specFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			s, err := deploy.LoadSpec(file)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Render(s, Options{Namespace: "ns1"})
			if want, ok := refused[filepath.Base(file)]; ok {
				if err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("Render: %v, want an error starting %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkRoundTrip(t, m.Objects)
			checkGPUs(t, s, m)
			checkWorkers(t, s, m)
			checkSelectorsAndPorts(t, m)
			checkProxyConfig(t, s, m)
		})
	}
}

func checkRoundTrip(t *testing.T, objs []runtime.Object) {
	t.Helper()
	y, err := YAML(objs)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(y)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(objs) {
		t.Fatalf("decoded %d objects, rendered %d", len(back), len(objs))
	}
	for i := range objs {
		if !apiequality.Semantic.DeepEqual(objs[i], back[i]) {
			t.Errorf("object %d changed in the YAML round trip:\n%#v\n%#v", i, objs[i], back[i])
		}
	}
	// Strictness: a field the type lacks is refused.
	bad := bytes.Replace(y, []byte("spec:\n"), []byte("spec:\n  notAField: 1\n"), 1)
	if _, err := Decode(bad); err == nil || !strings.Contains(err.Error(), "notAField") {
		t.Errorf("Decode of an unknown field: %v, want an error naming it", err)
	}
}

func statefulSets(m *Manifest) []*appsv1.StatefulSet {
	var out []*appsv1.StatefulSet
	for _, o := range m.Objects {
		if s, ok := o.(*appsv1.StatefulSet); ok {
			out = append(out, s)
		}
	}
	return out
}

func checkGPUs(t *testing.T, s *deploy.Spec, m *Manifest) {
	t.Helper()
	total := int64(0)
	for _, o := range m.Objects {
		var replicas int64 = 1
		var pod corev1.PodSpec
		switch o := o.(type) {
		case *appsv1.StatefulSet:
			replicas, pod = int64(*o.Spec.Replicas), o.Spec.Template.Spec
		case *appsv1.Deployment:
			replicas, pod = int64(*o.Spec.Replicas), o.Spec.Template.Spec
		default:
			continue
		}
		for _, c := range pod.Containers {
			req, lim := c.Resources.Requests[GPUResource], c.Resources.Limits[GPUResource]
			if req.Cmp(lim) != 0 {
				t.Errorf("%s: GPU request %s != limit %s", c.Name, req.String(), lim.String())
			}
			total += replicas * lim.Value()
		}
	}
	want := int64(s.GPUsNeeded())
	if s.Engine == deploy.EngineEmulator {
		want = 0 // the emulator models GPUs; its pods request none
	}
	if total != want {
		t.Errorf("nvidia.com/gpu requested in all: %d, want %d (GPUsNeeded %d, engine %s)", total, want, s.GPUsNeeded(), s.Engine)
	}
}

// checkWorkers compares every pod's container with the local render of the
// same worker, the substitutions spelled out here rather than by PodArgv.
func checkWorkers(t *testing.T, s *deploy.Spec, m *Manifest) {
	t.Helper()
	local, err := deploy.Render(s, deploy.RenderOptions{VLLM: "vllm", Hone: "hone", VLLMVersion: vllmVersionFor(s)})
	if err != nil {
		t.Fatal(err)
	}
	sets := statefulSets(m)
	n := 0
	for _, ss := range sets {
		n += int(*ss.Spec.Replicas)
	}
	if n != len(local.Workers) {
		t.Fatalf("%d pods in StatefulSets, %d local workers", n, len(local.Workers))
	}
	for _, w := range local.Workers {
		pool := w.Role
		name := w.Name[:strings.LastIndex(w.Name, "-")] // replica | prefill | decode
		var ss *appsv1.StatefulSet
		for _, x := range sets {
			if x.Name == s.Name+"-"+name {
				ss = x
			}
		}
		if ss == nil {
			t.Fatalf("no StatefulSet for worker %s", w.Name)
		}
		if got := ss.Spec.Template.Labels[LabelPool]; got != pool {
			t.Errorf("%s: pool label %q, want %q", ss.Name, got, pool)
		}
		c := ss.Spec.Template.Spec.Containers[0]
		podPort := int(c.Ports[0].ContainerPort)
		// argv: --host becomes 0.0.0.0 and --port the pool's; nothing else.
		want := slices.Clone(w.Argv)
		hostAt, portAt := slices.Index(want, "--host"), slices.Index(want, "--port")
		if hostAt < 0 || portAt < 0 || want[hostAt+1] != s.Network.Host || want[portAt+1] != strconv.Itoa(w.Port) {
			t.Fatalf("%s: local argv has no --host %s --port %d: %q", w.Name, s.Network.Host, w.Port, want)
		}
		want[hostAt+1], want[portAt+1] = "0.0.0.0", strconv.Itoa(podPort)
		if got := append(slices.Clone(c.Command), c.Args...); !slices.Equal(got, want) {
			t.Errorf("%s: pod argv\n%q\nwant\n%q", w.Name, got, want)
		}
		// env: CUDA_VISIBLE_DEVICES dropped, the NIXL host the pod IP,
		// the NIXL port the pool's; nothing else.
		var wantEnv []string
		for _, kv := range w.Env {
			k, _, _ := strings.Cut(kv, "=")
			switch k {
			case "CUDA_VISIBLE_DEVICES":
			case "VLLM_NIXL_SIDE_CHANNEL_HOST":
				wantEnv = append(wantEnv, k+"=<status.podIP>")
			case "VLLM_NIXL_SIDE_CHANNEL_PORT":
				wantEnv = append(wantEnv, k+"="+strconv.Itoa(int(containerPort(t, c, "nixl"))))
			default:
				wantEnv = append(wantEnv, kv)
			}
		}
		var gotEnv []string
		for _, e := range c.Env {
			v := e.Value
			if e.ValueFrom != nil {
				if e.ValueFrom.FieldRef == nil || e.Value != "" {
					t.Fatalf("%s: env %s: unexpected source %+v", w.Name, e.Name, e.ValueFrom)
				}
				v = "<" + e.ValueFrom.FieldRef.FieldPath + ">"
			}
			gotEnv = append(gotEnv, e.Name+"="+v)
		}
		if !slices.Equal(gotEnv, wantEnv) {
			t.Errorf("%s: pod env %q, want %q", w.Name, gotEnv, wantEnv)
		}
		// GPUs: the worker's TP, for vLLM.
		lim := c.Resources.Limits[GPUResource]
		if s.Engine == deploy.EngineVLLM && lim.Value() != int64(len(w.GPUs)) {
			t.Errorf("%s: %d GPUs, want TP %d", w.Name, lim.Value(), len(w.GPUs))
		}
		wantImage := DefaultImage()
		if s.Engine == deploy.EngineEmulator {
			wantImage = DefaultHoneImage
		}
		if c.Image != wantImage {
			t.Errorf("%s: image %s, want %s", w.Name, c.Image, wantImage)
		}
	}
}

func vllmVersionFor(s *deploy.Spec) string {
	if s.Engine == deploy.EngineVLLM {
		return DefaultVLLMVersion()
	}
	return ""
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

func checkSelectorsAndPorts(t *testing.T, m *Manifest) {
	t.Helper()
	type workload struct {
		labels map[string]string
		pod    corev1.PodTemplateSpec
	}
	var workloads []workload
	for _, o := range m.Objects {
		var sel map[string]string
		var tmpl corev1.PodTemplateSpec
		var meta map[string]string
		switch o := o.(type) {
		case *appsv1.StatefulSet:
			sel, tmpl, meta = o.Spec.Selector.MatchLabels, o.Spec.Template, o.Labels
			if len(o.Spec.Selector.MatchExpressions) > 0 {
				t.Errorf("%s: selector has expressions", o.Name)
			}
		case *appsv1.Deployment:
			sel, tmpl, meta = o.Spec.Selector.MatchLabels, o.Spec.Template, o.Labels
		default:
			continue
		}
		if !reflect.DeepEqual(sel, tmpl.Labels) || !reflect.DeepEqual(meta, tmpl.Labels) {
			t.Errorf("selector %v, object labels %v, pod labels %v: want all equal", sel, meta, tmpl.Labels)
		}
		if tmpl.Labels[LabelName] != "hone" || tmpl.Labels[LabelInstance] != m.Plan.Spec.Name || tmpl.Labels[LabelPool] == "" {
			t.Errorf("pod labels %v", tmpl.Labels)
		}
		workloads = append(workloads, workload{tmpl.Labels, tmpl})
		// Probes and --port name the container's ports.
		for _, c := range tmpl.Spec.Containers {
			http := containerPort(t, c, "http")
			if p := c.ReadinessProbe.HTTPGet; p == nil || p.Path != "/health" || p.Port.String() != "http" {
				t.Errorf("%s: readiness probe %+v, want GET /health on port http", c.Name, c.ReadinessProbe)
			}
			args := append(slices.Clone(c.Command), c.Args...)
			if i := slices.Index(args, "--port"); i >= 0 && args[i+1] != strconv.Itoa(int(http)) {
				t.Errorf("%s: --port %s, container port http %d", c.Name, args[i+1], http)
			}
		}
	}
	nsvc := 0
	for _, o := range m.Objects {
		svc, ok := o.(*corev1.Service)
		if !ok {
			continue
		}
		nsvc++
		var match []workload
		for _, w := range workloads {
			if reflect.DeepEqual(w.labels, svc.Spec.Selector) {
				match = append(match, w)
			}
		}
		if len(match) != 1 {
			t.Fatalf("Service %s: selector %v matches %d workloads, want 1", svc.Name, svc.Spec.Selector, len(match))
		}
		c := match[0].pod.Spec.Containers[0]
		for _, sp := range svc.Spec.Ports {
			cp := containerPort(t, c, sp.TargetPort.String())
			if sp.Port != cp || sp.Name != sp.TargetPort.String() {
				t.Errorf("Service %s port %s: %d → %s, container port %d", svc.Name, sp.Name, sp.Port, sp.TargetPort.String(), cp)
			}
		}
	}
	if nsvc != len(workloads) {
		t.Errorf("%d Services for %d workloads", nsvc, len(workloads))
	}
}

func checkProxyConfig(t *testing.T, s *deploy.Spec, m *Manifest) {
	t.Helper()
	var cm *corev1.ConfigMap
	for _, o := range m.Objects {
		if c, ok := o.(*corev1.ConfigMap); ok {
			cm = c
		}
	}
	var c proxy.Config
	if err := json.Unmarshal([]byte(cm.Data[ProxyConfigKey]), &c); err != nil {
		t.Fatal(err)
	}
	if want := "0.0.0.0:" + strconv.Itoa(s.Network.ProxyPort); c.Listen != want {
		t.Errorf("proxy listens on %s, want %s", c.Listen, want)
	}
	if len(c.Workers) != 0 {
		t.Errorf("proxy config lists %d static workers; it should discover them", len(c.Workers))
	}
	want := &proxy.Discovery{Kind: proxy.DiscoveryKubernetes, Namespace: "ns1"}
	for _, p := range m.Pools {
		want.Pools = append(want.Pools, proxy.DiscoveryPool{Role: p.Role, Service: p.Name, Port: p.Port})
	}
	if c.Discovery == nil || !reflect.DeepEqual(*c.Discovery, *want) {
		t.Errorf("proxy discovery %+v, want %+v", c.Discovery, want)
	}
	if _, err := proxy.New(c, nil); err != nil {
		t.Errorf("the rendered proxy config does not load: %v", err)
	}
	checkProxyRBAC(t, s, m)
}

// checkProxyRBAC: the proxy runs as its own ServiceAccount, bound to a Role
// that grants exactly get, list and watch on EndpointSlices.
func checkProxyRBAC(t *testing.T, s *deploy.Spec, m *Manifest) {
	t.Helper()
	name := s.Name + "-proxy"
	var sa *corev1.ServiceAccount
	var role *rbacv1.Role
	var rb *rbacv1.RoleBinding
	var dep *appsv1.Deployment
	for _, o := range m.Objects {
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			sa = o
		case *rbacv1.Role:
			role = o
		case *rbacv1.RoleBinding:
			rb = o
		case *appsv1.Deployment:
			dep = o
		}
	}
	if sa == nil || role == nil || rb == nil || dep == nil {
		t.Fatalf("ServiceAccount %v, Role %v, RoleBinding %v, Deployment %v: want all four", sa != nil, role != nil, rb != nil, dep != nil)
	}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("proxy Role rules %+v, want %+v", role.Rules, wantRules)
	}
	wantSubj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "ns1"}}
	if sa.Name != name || sa.Namespace != "ns1" || !reflect.DeepEqual(rb.Subjects, wantSubj) ||
		rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}) {
		t.Errorf("RoleBinding %+v -> %+v does not bind ServiceAccount %s/%s", rb.Subjects, rb.RoleRef, sa.Namespace, sa.Name)
	}
	if got := dep.Spec.Template.Spec.ServiceAccountName; got != name {
		t.Errorf("proxy Deployment runs as %q, want %q", got, name)
	}
}

func TestRenderRefusesBigWorkers(t *testing.T) {
	s, err := deploy.LoadSpec("../testdata/specs/disagg-nixl-2p2d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Render(s, Options{GPUsPerNode: 1})
	if want := "spec.topology.decode.tp: a worker needs 2 GPUs in one pod, more than a node has (--gpus-per-node 1)"; err == nil || err.Error() != want {
		t.Errorf("Render: %v, want %q", err, want)
	}
	if _, err := Render(s, Options{GPUsPerNode: 2}); err != nil {
		t.Errorf("Render with 2 GPUs a node: %v", err)
	}
}

func TestImageVLLMVersion(t *testing.T) {
	for image, want := range map[string]string{
		"vllm/vllm-openai:v0.26.0":               "0.26.0",
		"registry:5000/vllm/vllm-openai:v0.11.1": "0.11.1",
		"vllm/vllm-openai:latest":                "",
		"registry:5000/vllm":                     "",
		"vllm/vllm-openai:v0.12.0@sha256:abc":    "0.12.0",
	} {
		if got := ImageVLLMVersion(image); got != want {
			t.Errorf("ImageVLLMVersion(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestGolden(t *testing.T) {
	for _, name := range []string{"colocated-tp2", "disagg-nixl-2p2d"} {
		t.Run(name, func(t *testing.T) {
			s, err := deploy.LoadSpec("../testdata/specs/" + name + ".yaml")
			if err != nil {
				t.Fatal(err)
			}
			m, err := Render(s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := YAML(m.Objects)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the render; if the change is intended, run go test ./deploy/kubernetes -run TestGolden -update\n%s", path, got)
			}
		})
	}
}

// TestRenderEngineEnvAndDevMode: spec.engine_env and cold_start's
// VLLM_SERVER_DEV_MODE=1 reach the engine containers, and the render warns
// that in a pod the development-mode routes are on the pod network.
func TestRenderEngineEnvAndDevMode(t *testing.T) {
	s, err := deploy.LoadSpec("../../examples/vllm-disagg-nixl-1p1d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s.EngineEnv = map[string]string{"VLLM_LOGGING_LEVEL": "DEBUG"}
	m, err := Render(s, Options{Image: "vllm/vllm-openai:v0.26.0"})
	if err != nil {
		t.Fatal(err)
	}
	sets := 0
	for _, o := range m.Objects {
		ss, ok := o.(*appsv1.StatefulSet)
		if !ok {
			continue
		}
		sets++
		env := map[string]string{}
		for _, e := range ss.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env[deploy.EnvServerDevMode] != "1" || env["VLLM_LOGGING_LEVEL"] != "DEBUG" {
			t.Errorf("%s: env %v", ss.Name, env)
		}
	}
	if sets != 2 {
		t.Fatalf("%d StatefulSets", sets)
	}
	if w := strings.Join(m.Plan.Warnings, "\n"); !strings.Contains(w, "reachable from every pod of the cluster") {
		t.Errorf("warnings: %q", m.Plan.Warnings)
	}
}
