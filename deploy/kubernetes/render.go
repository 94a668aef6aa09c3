package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/engine"
)

// Labels every rendered object carries; selectors match them exactly.
const (
	LabelName     = "app.kubernetes.io/name" // always "hone"
	LabelInstance = "app.kubernetes.io/instance"
	LabelPool     = "hone.dev/pool" // prefill | decode | colocated | proxy | daemon
	AppName       = "hone"
	PoolProxy     = "proxy"
)

// GPUResource is the NVIDIA device plugin's extended resource.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// Defaults for zero Options fields.
const (
	DefaultNamespace   = "default"
	DefaultGPUsPerNode = 8
	// DefaultHoneImage is the image `docker build -t hone .` (the
	// repository's Dockerfile) makes; push it where the cluster can pull
	// it and pass --hone-image.
	DefaultHoneImage = "hone:latest"
	// PodHost is what a worker binds in its pod, in place of the spec's
	// network.host: the Service and the probes reach it on the pod IP.
	PodHost = "0.0.0.0"
	// ProxyConfigKey is the proxy's configuration file in its ConfigMap.
	ProxyConfigKey = "proxy.json"
	proxyConfigDir = "/etc/hone"
	// maxNameLen keeps <name>-<pool> within a StatefulSet's 52 characters
	// (its pods' controller-revision-hash label adds 11 to reach 63).
	maxNameLen = 52 - len("-replica")
)

// Substitutions: what a pod's engine container changes in the argv and
// environment deploy.Render gives the same worker locally, and nothing else.
//
//   - --host <network.host> becomes --host 0.0.0.0 (PodHost);
//   - --port <worker port> becomes the pool's port (its first worker's):
//     every pod has its own IP, so a pool's pods share one port;
//   - CUDA_VISIBLE_DEVICES is dropped: the device plugin hands the pod its
//     nvidia.com/gpu and the container sees only those;
//   - VLLM_NIXL_SIDE_CHANNEL_HOST comes from the downward API (status.podIP);
//   - VLLM_NIXL_SIDE_CHANNEL_PORT is the pool's (its first worker's).
//
// Render checks that a pool's workers differ in nothing else.
const (
	EnvNixlHost = "VLLM_NIXL_SIDE_CHANNEL_HOST"
	EnvNixlPort = "VLLM_NIXL_SIDE_CHANNEL_PORT"
	EnvGPUs     = "CUDA_VISIBLE_DEVICES"
)

// Options says where and with which images to render.
type Options struct {
	// Namespace of every object; DefaultNamespace when empty.
	Namespace string
	// Image is the vLLM image; DefaultImage() when empty. Its tag, when it
	// is a vLLM version (v0.26.0), adapts the flags as deploy.Render does
	// for an installed vLLM.
	Image string
	// HoneImage runs the proxy and emulator workers; DefaultHoneImage when
	// empty.
	HoneImage string
	// GPUsPerNode is the most GPUs one pod can get; DefaultGPUsPerNode when
	// zero.
	GPUsPerNode int
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Image == "" {
		o.Image = DefaultImage()
	}
	if o.HoneImage == "" {
		o.HoneImage = DefaultHoneImage
	}
	if o.GPUsPerNode == 0 {
		o.GPUsPerNode = DefaultGPUsPerNode
	}
	return o
}

// DefaultVLLMVersion is the newest vLLM release the engine's version table
// (engine.VersionTable) names: deploy names no single target release, and
// this is the newest one whose flags it has checked.
func DefaultVLLMVersion() string {
	t := engine.FactsOf(engine.VLLM).Versions
	best := engine.MustVersion(t.Floor)
	for _, f := range t.Features {
		if v := engine.MustVersion(f.Since); newer(v, best) {
			best = v
		}
	}
	return best.Raw
}

func newer(a, b engine.Version) bool {
	x := []int{a.Major, a.Minor, a.Patch, a.Micro}
	y := []int{b.Major, b.Minor, b.Patch, b.Micro}
	return slices.Compare(x, y) > 0
}

// DefaultImage is vLLM's official OpenAI server image at DefaultVLLMVersion.
func DefaultImage() string { return "vllm/vllm-openai:v" + DefaultVLLMVersion() }

// ImageVLLMVersion is the vLLM version an image's tag names
// (vllm/vllm-openai:v0.26.0 → 0.26.0), "" when the tag is not a version.
func ImageVLLMVersion(image string) string {
	if i := strings.LastIndex(image, "@"); i >= 0 {
		image = image[:i]
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return ""
	}
	v, err := engine.ParseVLLMVersion(image[i+1:])
	if err != nil {
		return ""
	}
	return v.Raw
}

// Pool is one workload: the local workers it stands for, in order.
type Pool struct {
	Role string // deploy.RoleColocated | RolePrefill | RoleDecode
	// Name is the StatefulSet's and its headless Service's name,
	// <spec>-replica | <spec>-prefill | <spec>-decode, so pod i is
	// <spec>-<local worker i's name>.
	Name    string
	TP      int
	Port    int // the serving port of every pod of the pool
	KVPort  int // NIXL side-channel port; 0 without one
	Workers []deploy.Worker
}

// Manifest is a rendered spec.
type Manifest struct {
	// Plan is the local render the pods are derived from.
	Plan  *deploy.Plan
	Pools []Pool
	// Objects in apply order: the proxy's ConfigMap, ServiceAccount, Role
	// and RoleBinding (get/list/watch EndpointSlices, to discover its
	// workers), then per pool its headless Service and StatefulSet, then
	// the proxy's Service and Deployment.
	Objects   []runtime.Object
	Namespace string
}

// Render turns a spec into Kubernetes objects. Errors name the spec field
// (or the option) that cannot be rendered.
func Render(s *deploy.Spec, o Options) (*Manifest, error) {
	o = o.withDefaults()
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	vv := ""
	f := engine.FactsOf(s.Engine)
	if f.Versioned {
		vv = ImageVLLMVersion(o.Image)
	}
	// argv[0] is each engine's own binary name, on the image's PATH.
	plan, err := deploy.Render(s, deploy.RenderOptions{VLLMVersion: vv})
	if err != nil {
		return nil, err
	}
	if err := refuse(s, o); err != nil {
		return nil, err
	}
	if f.Cache.ResetEnv != "" && s.ColdStart == deploy.ColdStartReset {
		// In a pod the engine binds PodHost: its development-mode routes
		// are on the pod network, which hone does not fence.
		plan.Warnings = append(plan.Warnings, "cold_start: "+deploy.ColdStartReset+" renders "+deploy.EnvServerDevMode+
			"=1: the vLLM pods serve unauthenticated admin routes (/reset_prefix_cache, /sleep, /collective_rpc, ...) "+
			"on their pod IPs, reachable from every pod of the cluster unless a NetworkPolicy lets only the proxy in")
	}
	m := &Manifest{Plan: plan, Pools: pools(plan), Namespace: o.Namespace}
	cm, err := proxyConfigMap(m)
	if err != nil {
		return nil, err
	}
	m.Objects = append(m.Objects, cm)
	m.Objects = append(m.Objects, proxyRBAC(s, o.Namespace)...)
	for _, p := range m.Pools {
		c, err := engineContainer(s, p, o)
		if err != nil {
			return nil, err
		}
		m.Objects = append(m.Objects, headlessService(s, p, o.Namespace), statefulSet(s, p, c, o.Namespace))
	}
	m.Objects = append(m.Objects, proxyService(s, o.Namespace), proxyDeployment(s, cm, o))
	return m, nil
}

// refuse says why a valid spec cannot be rendered for Kubernetes.
func refuse(s *deploy.Spec, o Options) error {
	if len(s.Name) > maxNameLen || len(validation.IsDNS1035Label(s.Name)) > 0 {
		return fmt.Errorf("spec.name: %q is not usable as a Kubernetes name: want lowercase letters, digits and '-', starting with a letter, at most %d characters", s.Name, maxNameLen)
	}
	if s.Model.Path != "" {
		return fmt.Errorf("spec.model.path: a local model directory is not in the pods; name a hub model (model.id with a pinned revision) for --target kubernetes")
	}
	if s.Topology.Kind == deploy.Disaggregated && s.KV.Name == deploy.P2pNcclConnector {
		return fmt.Errorf("spec.kv_connector.name: P2pNcclConnector addresses workers by IP (its ZMQ socket and the proxy's request ids), which pods learn only at run time; --target kubernetes renders NixlConnector")
	}
	if s.Emulator.TraceDir != "" {
		return fmt.Errorf("spec.emulator.trace_dir: trace files are per worker on one host; not rendered for --target kubernetes (remove it)")
	}
	if len(s.Emulator.Faults) > 0 {
		return fmt.Errorf("spec.emulator.faults: a fault names one worker, but a pool's pods share one template; not rendered for --target kubernetes (remove it)")
	}
	if engine.Emulated(s.Engine) {
		return nil // the emulator requests no GPUs
	}
	t := s.Topology
	check := func(field string, tp int) error {
		if tp > o.GPUsPerNode {
			return fmt.Errorf("spec.%s: a worker needs %d GPUs in one pod, more than a node has (--gpus-per-node %d)", field, tp, o.GPUsPerNode)
		}
		return nil
	}
	if t.Kind == deploy.Colocated {
		return check("topology.tp", t.TP)
	}
	if err := check("topology.prefill.tp", t.Prefill.TP); err != nil {
		return err
	}
	return check("topology.decode.tp", t.Decode.TP)
}

// pools groups a plan's workers by role, in plan order.
func pools(plan *deploy.Plan) []Pool {
	var out []Pool
	for _, w := range plan.Workers {
		if n := len(out); n == 0 || out[n-1].Role != w.Role {
			suffix := w.Role
			if w.Role == deploy.RoleColocated {
				suffix = "replica"
			}
			p := Pool{Role: w.Role, Name: plan.Spec.Name + "-" + suffix, TP: len(w.GPUs), Port: w.Port}
			if plan.Spec.Topology.Kind == deploy.Disaggregated && plan.Spec.KV.Name == deploy.NixlConnector && len(w.KVPorts) > 0 {
				p.KVPort = w.KVPorts[0]
			}
			out = append(out, p)
		}
		out[len(out)-1].Workers = append(out[len(out)-1].Workers, w)
	}
	return out
}

// Labels are an object's labels, and its selector's.
func Labels(spec, pool string) map[string]string {
	return map[string]string{LabelName: AppName, LabelInstance: spec, LabelPool: pool}
}

// PodArgv is worker w's argv in pool p's pods (see Substitutions).
func PodArgv(w deploy.Worker, p Pool) []string {
	argv := slices.Clone(w.Argv)
	for i := 0; i+1 < len(argv); i++ {
		switch argv[i] {
		case "--host":
			argv[i+1] = PodHost
		case "--port":
			argv[i+1] = strconv.Itoa(p.Port)
		}
	}
	return argv
}

// PodEnv is worker w's environment in pool p's pods (see Substitutions).
func PodEnv(w deploy.Worker, p Pool) []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, kv := range w.Env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case EnvGPUs:
			continue
		case EnvNixlHost:
			env = append(env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}})
			continue
		case EnvNixlPort:
			v = strconv.Itoa(p.KVPort)
		}
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	return env
}

func engineContainer(s *deploy.Spec, p Pool, o Options) (corev1.Container, error) {
	argv, env := PodArgv(p.Workers[0], p), PodEnv(p.Workers[0], p)
	for _, w := range p.Workers[1:] {
		if !slices.Equal(PodArgv(w, p), argv) {
			return corev1.Container{}, fmt.Errorf("%s: workers %s and %s differ in argv beyond host and port; one pod template cannot hold both", p.Name, p.Workers[0].Name, w.Name)
		}
		if !slices.EqualFunc(PodEnv(w, p), env, func(a, b corev1.EnvVar) bool { return a.Name == b.Name && a.Value == b.Value }) {
			return corev1.Container{}, fmt.Errorf("%s: workers %s and %s differ in environment beyond the GPUs and the NIXL side channel", p.Name, p.Workers[0].Name, w.Name)
		}
	}
	c := corev1.Container{
		Name:    "engine",
		Image:   o.Image,
		Command: argv[:1],
		Args:    argv[1:],
		Env:     env,
		Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: int32(p.Port), Protocol: corev1.ProtocolTCP}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}},
			PeriodSeconds:    5,
			FailureThreshold: 3,
		},
	}
	if p.KVPort > 0 {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: "nixl", ContainerPort: int32(p.KVPort), Protocol: corev1.ProtocolTCP})
	}
	if engine.Emulated(s.Engine) {
		c.Image = o.HoneImage
		return c, nil
	}
	gpus := resource.MustParse(strconv.Itoa(p.TP))
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{GPUResource: gpus},
		Limits:   corev1.ResourceList{GPUResource: gpus},
	}
	// Tensor-parallel ranks share tensors through /dev/shm, which a
	// container gets at 64 MiB unless given a memory volume.
	c.VolumeMounts = []corev1.VolumeMount{{Name: "dshm", MountPath: "/dev/shm"}}
	return c, nil
}

func objectMeta(name, namespace string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
}

func headlessService(s *deploy.Spec, p Pool, ns string) *corev1.Service {
	labels := Labels(s.Name, p.Role)
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(p.Name, ns, labels),
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  labels,
			// The proxy checks /health itself; pods resolve while they
			// load weights, so it sees them come up.
			PublishNotReadyAddresses: true,
			Ports:                    []corev1.ServicePort{{Name: "http", Port: int32(p.Port), TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}},
		},
	}
	if p.KVPort > 0 {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "nixl", Port: int32(p.KVPort), TargetPort: intstr.FromString("nixl"), Protocol: corev1.ProtocolTCP})
	}
	return svc
}

func statefulSet(s *deploy.Spec, p Pool, c corev1.Container, ns string) *appsv1.StatefulSet {
	labels := Labels(s.Name, p.Role)
	replicas := int32(len(p.Workers))
	pod := corev1.PodSpec{Containers: []corev1.Container{c}}
	if len(c.VolumeMounts) > 0 {
		pod.Volumes = []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
	}
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: objectMeta(p.Name, ns, labels),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &replicas,
			ServiceName: p.Name,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			// Workers of a pool do not depend on each other: start them
			// together.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod,
			},
		},
	}
}

// ProxyConfigOf is the proxy configuration in the pods: deploy.ProxyConfig
// listening on every address, with no static workers: it discovers them
// from each pool's headless Service (its EndpointSlices), so a pod
// rescheduled, added or removed changes the proxy's set without a restart.
func ProxyConfigOf(m *Manifest) ([]byte, error) {
	c := deploy.ProxyConfig(m.Plan)
	c.Listen = fmt.Sprintf("%s:%d", PodHost, m.Plan.Spec.Network.ProxyPort)
	c.Workers = nil
	d := &proxy.Discovery{Kind: proxy.DiscoveryKubernetes, Namespace: m.Namespace}
	for _, p := range m.Pools {
		d.Pools = append(d.Pools, proxy.DiscoveryPool{Role: p.Role, Service: p.Name, Port: p.Port})
	}
	c.Discovery = d
	return json.MarshalIndent(c, "", "  ")
}

// proxyRBAC is the proxy's identity: a ServiceAccount that may get, list
// and watch EndpointSlices in the namespace, and nothing else.
func proxyRBAC(s *deploy.Spec, ns string) []runtime.Object {
	return readerIdentity(s.Name+"-proxy", ns, Labels(s.Name, PoolProxy), "discovery.k8s.io", "endpointslices")
}

// readerIdentity is a ServiceAccount name in ns and a Role, bound to it,
// that may get, list and watch one resource in ns, and nothing else.
func readerIdentity(name, ns string, labels map[string]string, group, resource string) []runtime.Object {
	return []runtime.Object{
		&corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: objectMeta(name, ns, labels),
		},
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: objectMeta(name, ns, labels),
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{group},
				Resources: []string{resource},
				Verbs:     []string{"get", "list", "watch"},
			}},
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: objectMeta(name, ns, labels),
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		},
	}
}

func proxyConfigMap(m *Manifest) (*corev1.ConfigMap, error) {
	b, err := ProxyConfigOf(m)
	if err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	s := m.Plan.Spec
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(s.Name+"-proxy", m.Namespace, Labels(s.Name, PoolProxy)),
		Data:       map[string]string{ProxyConfigKey: string(b)},
	}, nil
}

func proxyService(s *deploy.Spec, ns string) *corev1.Service {
	labels := Labels(s.Name, PoolProxy)
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(s.Name+"-proxy", ns, labels),
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: int32(s.Network.ProxyPort), TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}},
		},
	}
}

func proxyDeployment(s *deploy.Spec, cm *corev1.ConfigMap, o Options) *appsv1.Deployment {
	labels := Labels(s.Name, PoolProxy)
	one := int32(1)
	sum := sha256.Sum256([]byte(cm.Data[ProxyConfigKey]))
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: objectMeta(s.Name+"-proxy", o.Namespace, labels),
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: labels,
					// A changed worker list rolls the proxy.
					Annotations: map[string]string{"hone.dev/proxy-config-sha256": hex.EncodeToString(sum[:])},
				},
				Spec: corev1.PodSpec{
					ServiceAccountName: s.Name + "-proxy",
					Containers: []corev1.Container{{
						Name:    "proxy",
						Image:   o.HoneImage,
						Command: []string{"hone"},
						Args:    []string{"proxy", "--config", proxyConfigDir + "/" + ProxyConfigKey},
						Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: int32(s.Network.ProxyPort), Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}},
							PeriodSeconds: 5,
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: proxyConfigDir, ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}},
				},
			},
		},
	}
}
