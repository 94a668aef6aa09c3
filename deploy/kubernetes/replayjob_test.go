package kubernetes

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hone-llm/hone/deploy"
)

// TestReplayJob: the sharded replay renders as an Indexed Job of N pods
// with no retries, each running `hone replay --shard $(JOB_COMPLETION_INDEX)/N`
// against the spec's proxy Service from the common instant, with the
// caller's flags after; it round-trips strictly, and flags the Job sets
// are refused in the caller's.
func TestReplayJob(t *testing.T) {
	s, err := deploy.LoadSpec("../testdata/specs/disagg-nixl-2p2d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Namespace: "bench", HoneImage: "hone:test"}
	j := ReplayJob{Shards: 4, StartAt: "2026-12-01T10:00:00Z", Args: []string{"--qps", "64,128", "--runs", "3"}, ResultsClaim: "hone-results"}
	job, err := RenderReplayJob(s, o, j)
	if err != nil {
		t.Fatal(err)
	}
	sp := job.Spec
	if *sp.CompletionMode != batchv1.IndexedCompletion || *sp.Completions != 4 || *sp.Parallelism != 4 || *sp.BackoffLimit != 0 ||
		sp.Template.Spec.RestartPolicy != "Never" || sp.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "hone-results" {
		t.Errorf("job spec %+v", sp)
	}
	endpoint := "http://" + s.Name + "-proxy.bench.svc:" + itoa(s.Network.ProxyPort)
	want := []string{"replay", "--shard", "$(JOB_COMPLETION_INDEX)/4", "--start-at", "2026-12-01T10:00:00Z", "--endpoint", endpoint,
		"--model", s.ServedName(), "--out", "/results/shard-$(JOB_COMPLETION_INDEX).json.gz", "--qps", "64,128", "--runs", "3"}
	c := sp.Template.Spec.Containers[0]
	if c.Image != "hone:test" || !slices.Equal(c.Command, []string{"hone"}) || !slices.Equal(c.Args, want) {
		t.Errorf("container %s %v %v, want args %v", c.Image, c.Command, c.Args, want)
	}
	// Pod 2's command line, once Kubernetes has expanded the index.
	expanded := make([]string, len(c.Args))
	for i, a := range c.Args {
		expanded[i] = strings.ReplaceAll(a, "$(JOB_COMPLETION_INDEX)", "2")
	}
	if got := ReplayJobArgs("2", j, endpoint, s.ServedName()); !slices.Equal(got, expanded) {
		t.Errorf("pod 2 runs %v, want %v", expanded, got)
	}
	y, err := YAML([]runtime.Object{job})
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(y)
	if err != nil || len(back) != 1 {
		t.Fatalf("decode: %v (%d objects)", err, len(back))
	}
	if b := back[0].(*batchv1.Job); !slices.Equal(b.Spec.Template.Spec.Containers[0].Args, want) || *b.Spec.Completions != 4 {
		t.Errorf("round trip: %+v", b.Spec)
	}
	if _, err := Decode([]byte(strings.Replace(string(y), "backoffLimit: 0", "backoffLimit: 0\n  bogus: 1", 1))); err == nil {
		t.Error("an unknown field decoded")
	}
	for _, bad := range []struct {
		j    ReplayJob
		want string
	}{
		{ReplayJob{Shards: 0, StartAt: "x"}, "replay-shards 0"},
		{ReplayJob{Shards: 2}, "replay-start-at: required"},
		{ReplayJob{Shards: 2, StartAt: "x", Args: []string{"--out=elsewhere.json"}}, "replay-arg --out: set by the Job"},
		{ReplayJob{Shards: 2, StartAt: "x", Args: []string{"--shard", "0/1"}}, "replay-arg --shard: set by the Job"},
	} {
		if _, err := RenderReplayJob(s, o, bad.j); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want %q", bad.j, err, bad.want)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
