package kubernetes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Defaults for zero DaemonOptions fields.
const (
	DefaultDaemonName   = "hone-daemon"
	DefaultDaemonPort   = 9464
	DefaultRuntimeClass = "nvidia"
	// DefaultGPUNodeLabel is the label NVIDIA's GPU feature discovery puts
	// on GPU nodes.
	DefaultGPUNodeLabel = "nvidia.com/gpu.present=true"
	PoolDaemon          = "daemon"
	daemonTokenDir      = "/etc/hone/token"
	daemonTokenKey      = "token"
)

// Kernel releases that decide what the daemon needs (daemon/caps.go):
// CAP_BPF, CAP_PERFMON and BPF ring buffers arrived in Linux 5.8, the
// oldest kernel the daemon runs on; uprobe_multi links in 6.6. Before 6.6
// the daemon attaches its libcuda probes as perf-event uprobes, which need
// CAP_SYS_ADMIN at every attach, so it starts with and keeps CAP_SYS_ADMIN
// instead of CAP_BPF + CAP_PERFMON. (Its socket programs also want the
// sock_send_length/sock_recv_length tracepoints of Linux 5.19; hone
// preflight --target daemon checks them.)
const (
	DaemonMinKernel   = "5.8"
	UprobeMultiKernel = "6.6"
)

// NodeUprobeMulti says whether GPU nodes running kernel release (as
// `uname -r` prints it, e.g. 5.15.0-105-generic, and hone preflight
// reports it in host.kernel) have uprobe_multi links: the argument of
// daemon.StartCapabilities. "" stands for UprobeMultiKernel or later. A
// release that does not parse, or one the daemon cannot run on, is an
// error naming --node-kernel.
func NodeUprobeMulti(release string) (bool, error) {
	if release == "" {
		return true, nil
	}
	v, ok := kernelVersion(release)
	if !ok {
		return false, fmt.Errorf("--node-kernel %q: want a kernel release as uname -r prints it (e.g. 5.15.0-105-generic)", release)
	}
	if min, _ := kernelVersion(DaemonMinKernel); slices.Compare(v, min) < 0 {
		return false, fmt.Errorf("--node-kernel %q: the daemon needs Linux >= %s (CAP_BPF, CAP_PERFMON, BPF ring buffers)", release, DaemonMinKernel)
	}
	multi, _ := kernelVersion(UprobeMultiKernel)
	return slices.Compare(v, multi) >= 0, nil
}

// kernelVersion reads the major and minor numbers that lead a kernel
// release ("6.8.0-1015-aws" → [6 8]).
func kernelVersion(release string) ([]int, bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return nil, false
	}
	major, err := strconv.Atoi(parts[0])
	if err != nil || major < 0 {
		return nil, false
	}
	// The minor number may have a suffix when there is no patch (5.15-rc1).
	digits := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(parts[1])
	}
	minor, err := strconv.Atoi(parts[1][:digits])
	if err != nil {
		return nil, false
	}
	return []int{major, minor}, true
}

// DaemonOptions says how to render hone's daemon.
type DaemonOptions struct {
	Namespace string // DefaultNamespace when empty
	Name      string // DefaultDaemonName when empty: the objects' name and instance label
	HoneImage string // DefaultHoneImage when empty
	// Capabilities are added to the container, without the CAP_ prefix
	// (BPF, PERFMON): the daemon's start capabilities, which the caller
	// takes from daemon.StartCapabilities for the nodes' kernel
	// (NodeUprobeMulti). Required.
	Capabilities []string
	// NodeKernel is the GPU nodes' kernel release the capabilities were
	// chosen for, recorded in the DaemonSet's hone.dev/node-kernel
	// annotation; "" for UprobeMultiKernel or later.
	NodeKernel   string
	Port         int    // metrics and API port; DefaultDaemonPort when zero
	RuntimeClass string // DefaultRuntimeClass when empty
	// NodeSelector is key=value; DefaultGPUNodeLabel when empty.
	NodeSelector string
	// TokenSecret is the Secret (key "token", at least 16 characters) with
	// the bearer token the daemon requires off loopback and Prometheus
	// sends; <Name>-token when empty. Create it before applying.
	TokenSecret string
	// PodSelector selects the serving pods in the daemon's namespace whose
	// processes it traces, through their cgroups (hone daemon
	// --pod-selector); DefaultServingSelector when empty.
	PodSelector string
}

// RenderDaemon renders hone's daemon: its identity (a ServiceAccount with
// a Role that may get, list and watch pods in the namespace, and nothing
// else); a DaemonSet on GPU nodes sharing the host's PID namespace, not
// privileged, with exactly o.Capabilities added, tracing the processes of
// the pods on its node that o.PodSelector selects (found through their
// cgroups); a Service for its metrics port; and a ServiceMonitor scraping
// it with the bearer token.
func RenderDaemon(o DaemonOptions) ([]runtime.Object, error) {
	nk, nv, err := o.fill()
	if err != nil {
		return nil, err
	}
	lbl := Labels(o.Name, PoolDaemon)
	vols, mounts := daemonVolumes(o.TokenSecret)
	ds := daemonSet(o, lbl, map[string]string{nk: nv}, daemonContainer(o, mounts), vols)
	svc, sm := daemonScrape(o, lbl)
	objs := readerIdentity(o.Name, o.Namespace, lbl, "", "pods")
	return append(objs, ds, svc, sm), nil
}

// fill sets o's defaults and checks it; it returns the node selector's
// key and value.
func (o *DaemonOptions) fill() (key, value string, err error) {
	setDefault(&o.Namespace, DefaultNamespace)
	setDefault(&o.Name, DefaultDaemonName)
	setDefault(&o.HoneImage, DefaultHoneImage)
	if o.Port == 0 {
		o.Port = DefaultDaemonPort
	}
	setDefault(&o.RuntimeClass, DefaultRuntimeClass)
	setDefault(&o.NodeSelector, DefaultGPUNodeLabel)
	setDefault(&o.TokenSecret, o.Name+"-token")
	setDefault(&o.PodSelector, DefaultServingSelector)
	if _, err := labels.Parse(o.PodSelector); err != nil {
		return "", "", fmt.Errorf("--pod-selector %q: %w", o.PodSelector, err)
	}
	if len(o.Capabilities) == 0 {
		return "", "", fmt.Errorf("daemon capabilities: none given; take them from daemon.StartCapabilities")
	}
	nk, nv, ok := strings.Cut(o.NodeSelector, "=")
	if !ok || nk == "" {
		return "", "", fmt.Errorf("--node-selector %q: want key=value", o.NodeSelector)
	}
	return nk, nv, nil
}

// setDefault sets *v to def when it is empty.
func setDefault(v *string, def string) {
	if *v == "" {
		*v = def
	}
}

// daemonVolumes are the daemon's read-only host paths and its token
// Secret, and their mounts.
func daemonVolumes(tokenSecret string) ([]corev1.Volume, []corev1.VolumeMount) {
	secretMode := int32(0o400) // the daemon refuses a token file others can read
	hostRO := func(name, path string) (corev1.Volume, corev1.VolumeMount) {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}},
			corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: true}
	}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, hp := range []struct{ name, host, in string }{
		{"btf", "/sys/kernel/btf", "/sys/kernel/btf"},
		{"cgroup", "/sys/fs/cgroup", "/sys/fs/cgroup"},
		// hostPID already shows the host's processes under /proc; the
		// host's procfs is also mounted where tools expect it.
		{"host-proc", "/proc", "/host/proc"},
	} {
		v, m := hostRO(hp.name, hp.host)
		m.MountPath = hp.in
		vols, mounts = append(vols, v), append(mounts, m)
	}
	vols = append(vols, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: tokenSecret, DefaultMode: &secretMode, Items: []corev1.KeyToPath{{Key: daemonTokenKey, Path: daemonTokenKey}}}}})
	mounts = append(mounts, corev1.VolumeMount{Name: "token", MountPath: daemonTokenDir, ReadOnly: true})
	return vols, mounts
}

// daemonContainer is the daemon's container: not privileged, root with
// exactly o.Capabilities added, tracing the pods o.PodSelector selects.
func daemonContainer(o DaemonOptions, mounts []corev1.VolumeMount) corev1.Container {
	var caps []corev1.Capability
	for _, c := range o.Capabilities {
		caps = append(caps, corev1.Capability(strings.TrimPrefix(strings.ToUpper(c), "CAP_")))
	}
	no := false
	root := int64(0)
	port := strconv.Itoa(o.Port)
	return corev1.Container{
		Name:    "daemon",
		Image:   o.HoneImage,
		Command: []string{"hone"},
		Args: []string{"daemon", "--listen", "0.0.0.0:" + port, "--allow-remote",
			"--token-file", daemonTokenDir + "/" + daemonTokenKey,
			"--pod-selector", o.PodSelector, "--pod-namespace", o.Namespace},
		Env: []corev1.EnvVar{
			{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}},
			// NVML without requesting a GPU: the NVIDIA
			// container runtime mounts the driver's
			// libraries for these (as for dcgm-exporter);
			// "utility" is NVML and nothing more.
			{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"},
			{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "utility"},
		},
		Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: int32(o.Port), Protocol: corev1.ProtocolTCP}},
		// Root in the container so the added capabilities are
		// effective (Kubernetes grants no ambient ones). The
		// runtime's default set stays: dropping to nobody and
		// CAP_PERFMON after attaching (daemon/caps.go) needs
		// its CAP_SETPCAP, CAP_SETUID and CAP_SETGID.
		SecurityContext: &corev1.SecurityContext{
			Privileged:               &no,
			AllowPrivilegeEscalation: &no,
			RunAsUser:                &root,
			Capabilities:             &corev1.Capabilities{Add: caps},
		},
		VolumeMounts: mounts,
	}
}

// daemonSet runs c on the GPU nodes nodeSelector picks, in the host's PID
// namespace.
func daemonSet(o DaemonOptions, lbl, nodeSelector map[string]string, c corev1.Container, vols []corev1.Volume) *appsv1.DaemonSet {
	// The daemon drops to nobody after attaching (daemon/caps.go) and
	// client-go re-reads the rotating ServiceAccount token: with fsGroup
	// set the kubelet makes the token file 0640, group fsGroup.
	nogroup := int64(65534)
	dsMeta := objectMeta(o.Name, o.Namespace, lbl)
	kernel := o.NodeKernel
	if kernel == "" {
		kernel = ">= " + UprobeMultiKernel
	}
	dsMeta.Annotations = map[string]string{"hone.dev/node-kernel": kernel}
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: dsMeta,
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{
					ServiceAccountName: o.Name,
					SecurityContext:    &corev1.PodSecurityContext{FSGroup: &nogroup},
					HostPID:            true,
					RuntimeClassName:   &o.RuntimeClass,
					NodeSelector:       nodeSelector,
					Tolerations:        []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers:         []corev1.Container{c},
					Volumes:            vols,
				},
			},
		},
	}
}

// daemonScrape is the daemon's metrics Service and the ServiceMonitor
// scraping it with the bearer token.
func daemonScrape(o DaemonOptions, lbl map[string]string) (*corev1.Service, *monitoringv1.ServiceMonitor) {
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(o.Name, o.Namespace, lbl),
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, // Prometheus scrapes each pod
			Selector:  lbl,
			Ports:     []corev1.ServicePort{{Name: "metrics", Port: int32(o.Port), TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP}},
		},
	}
	sm := &monitoringv1.ServiceMonitor{
		TypeMeta:   metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.ServiceMonitorsKind},
		ObjectMeta: objectMeta(o.Name, o.Namespace, lbl),
		Spec: monitoringv1.ServiceMonitorSpec{
			Selector: metav1.LabelSelector{MatchLabels: lbl},
			Endpoints: []monitoringv1.Endpoint{{
				Port:     "metrics",
				Path:     "/metrics",
				Interval: "15s",
			}},
		},
	}
	sm.Spec.Endpoints[0].Authorization = &monitoringv1.SafeAuthorization{
		Type:        "Bearer",
		Credentials: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: o.TokenSecret}, Key: daemonTokenKey},
	}
	return svc, sm
}

// AddedCapabilities are the capabilities a rendered DaemonSet's daemon
// container adds, sorted.
func AddedCapabilities(ds *appsv1.DaemonSet) []string {
	var out []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil {
			for _, a := range sc.Capabilities.Add {
				out = append(out, string(a))
			}
		}
	}
	slices.Sort(out)
	return out
}
