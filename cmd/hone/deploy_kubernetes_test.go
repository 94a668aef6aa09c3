package main

import (
	"cmp"
	"runtime"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"

	"github.com/hone-llm/hone/deploy/kubernetes"
)

func TestDeployRenderKubernetesCLI(t *testing.T) {
	spec := "../../deploy/testdata/specs/disagg-nixl-2p2d.yaml"
	args := []string{"deploy", "render", "--target", "kubernetes", "--namespace", "llm", spec}
	want := 10 // ConfigMap, proxy ServiceAccount, Role, RoleBinding, 2 × (Service, StatefulSet), proxy Service and Deployment
	if runtime.GOOS == "linux" {
		args = append(args, "--daemonset")
		want += 6 // daemon ServiceAccount, Role, RoleBinding, DaemonSet, Service, ServiceMonitor
	}
	out, errs, code := runCLI(t, "", args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	objs, err := kubernetes.Decode([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != want {
		t.Fatalf("%d objects, want %d:\n%s", len(objs), want, out)
	}
	if want > 10 {
		ds, ok := objs[13].(*appsv1.DaemonSet)
		if !ok || ds.Namespace != "llm" || len(kubernetes.AddedCapabilities(ds)) == 0 {
			t.Errorf("object 13: %T %+v", objs[13], objs[13])
		}
	}
	if !strings.Contains(out, `"service": "disagg-nixl-2p2d-decode",`) || !strings.Contains(out, `"namespace": "llm",`) {
		t.Errorf("no discovery of the decode Service in namespace llm in the proxy config:\n%s", out)
	}
}

// TestDeployRenderReplayJobCLI: --replay-shards appends the sharded
// replay's Indexed Job, its pods running hone replay --shard against the
// proxy with the --replay-arg flags after.
func TestDeployRenderReplayJobCLI(t *testing.T) {
	out, errs, code := runCLI(t, "", "deploy", "render", "--target", "kubernetes", "--replay-shards", "3", "--replay-start-at", "2026-12-01T10:00:00Z",
		"--replay-arg=--qps", "--replay-arg=64,128", "../../deploy/testdata/specs/disagg-nixl-2p2d.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	objs, err := kubernetes.Decode([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	j, ok := objs[len(objs)-1].(*batchv1.Job)
	if !ok || *j.Spec.Completions != 3 || *j.Spec.BackoffLimit != 0 {
		t.Fatalf("last object %T %+v", objs[len(objs)-1], objs[len(objs)-1])
	}
	args := strings.Join(j.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.HasPrefix(args, "replay --shard $(JOB_COMPLETION_INDEX)/3 --start-at 2026-12-01T10:00:00Z --endpoint http://disagg-nixl-2p2d-proxy.default.svc:") ||
		!strings.HasSuffix(args, "--qps 64,128") {
		t.Errorf("args %q", args)
	}
}

func TestDeployKubernetesCLIErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"deploy", "render", "--target", "k8s", "x.yaml"}, `--target: "k8s" is not a target`},
		{[]string{"deploy", "render", "--target", "kubernetes", "../../deploy/testdata/specs/disagg-p2pnccl-1p1d.yaml"}, "spec.model.path: "},
		{[]string{"deploy", "render", "--target", "kubernetes", "--gpus-per-node", "1", "../../deploy/testdata/specs/colocated-tp2.yaml"}, "spec.topology.tp: a worker needs 2 GPUs"},
		{[]string{"deploy", "render", "--target", "kubernetes"}, "give a SPEC, --daemonset, or both"},
		{[]string{"deploy", "render", "--daemonset", "../../deploy/testdata/specs/colocated-tp2.yaml"}, "--daemonset needs --target kubernetes"},
		{[]string{"deploy", "up", "--target", "kubernetes", "--kubeconfig", "/nonexistent/kubeconfig", "../../deploy/testdata/specs/colocated-tp2.yaml"}, "--kubeconfig: "},
		{[]string{"deploy", "down", "--target", "kubernetes"}, "name the deployment"},
		{[]string{"deploy", "render", "--target", "kubernetes", "--replay-shards", "2", "../../deploy/testdata/specs/colocated-tp2.yaml"}, "replay-start-at: required"},
		{[]string{"deploy", "render", "--target", "kubernetes", "--replay-shards", "2", "--replay-start-at", "2026-12-01T10:00:00Z",
			"--replay-arg=--out=x.json", "../../deploy/testdata/specs/colocated-tp2.yaml"}, "replay-arg --out: set by the Job"},
		{[]string{"deploy", "render", "--target", "kubernetes", "--daemonset", "--replay-shards", "2"}, "--replay-shards needs a SPEC"},
		{[]string{"deploy", "render", "--target", "kubernetes", "--node-kernel", "5.15", "../../deploy/testdata/specs/colocated-dp4.yaml"}, "--node-kernel: only with --daemonset"},
	} {
		_, errs, code := runCLI(t, "", c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// TestDeployRenderDaemonSetKernelCLI: --node-kernel chooses the
// DaemonSet's capabilities: CAP_BPF + CAP_PERFMON from Linux 6.6 (uprobe_multi
// links), CAP_SYS_ADMIN before; a kernel the daemon cannot run on, or one
// that does not parse, is bad input.
func TestDeployRenderDaemonSetKernelCLI(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the daemon's capability sets are defined on Linux (daemon/caps.go)")
	}
	for _, c := range []struct {
		kernel string
		want   []string
	}{
		{"", []string{"BPF", "PERFMON"}},
		{"6.6.0", []string{"BPF", "PERFMON"}},
		{"6.8.0-1015-aws", []string{"BPF", "PERFMON"}},
		{"6.5.13-generic", []string{"SYS_ADMIN"}},
		{"5.15.0-105-generic", []string{"SYS_ADMIN"}},
		{"5.8", []string{"SYS_ADMIN"}},
	} {
		args := []string{"deploy", "render", "--target", "kubernetes", "--daemonset"}
		if c.kernel != "" {
			args = append(args, "--node-kernel", c.kernel)
		}
		out, errs, code := runCLI(t, "", args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", c.kernel, code, errs)
		}
		objs, err := kubernetes.Decode([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		var ds *appsv1.DaemonSet
		for _, o := range objs {
			if d, ok := o.(*appsv1.DaemonSet); ok {
				ds = d
			}
		}
		if ds == nil {
			t.Fatalf("%q: no DaemonSet in\n%s", c.kernel, out)
		}
		if got := kubernetes.AddedCapabilities(ds); !slices.Equal(got, c.want) {
			t.Errorf("--node-kernel %q: adds %q, want %q", c.kernel, got, c.want)
		}
		if want := cmp.Or(c.kernel, ">= 6.6"); ds.Annotations["hone.dev/node-kernel"] != want {
			t.Errorf("--node-kernel %q: annotation %q", c.kernel, ds.Annotations)
		}
	}
	for _, bad := range []string{"5.4.0-150-generic", "linux", "6"} {
		_, errs, code := runCLI(t, "", "deploy", "render", "--target", "kubernetes", "--daemonset", "--node-kernel", bad)
		if code != 2 || !strings.Contains(errs, `--node-kernel "`+bad+`"`) {
			t.Errorf("--node-kernel %q: exit %d, stderr %q", bad, code, errs)
		}
	}
}
