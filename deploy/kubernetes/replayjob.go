package kubernetes

import (
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hone-llm/hone/deploy"
)

// PoolReplay labels the sharded replay's pods.
const PoolReplay = "replay"

// ReplayJob configures the sharded load generation of a rendered spec:
// `hone replay --shard I/N` (replay/shard.go) as an Indexed Job, one pod
// per shard, each sending its share of the schedule to the spec's proxy
// Service from the common start instant.
type ReplayJob struct {
	// Shards is N, the pods (completions and parallelism).
	Shards int
	// StartAt is every shard's --start-at (RFC 3339 or unix ns), far
	// enough ahead for the pods to be scheduled and pulled.
	StartAt string
	// Args are further `hone replay` flags (workload, rates, runs, SLO,
	// time scale), passed as given after the ones the Job sets.
	Args []string
	// ResultsClaim, when set, is a PersistentVolumeClaim mounted at
	// /results, where each shard writes shard-<index>.json.gz; empty: an
	// emptyDir, which the records do not outlive.
	ResultsClaim string
}

// ReplayJobArgs is what pod index i of the Job runs after `hone`: the
// replay of shard i of n against endpoint.
func ReplayJobArgs(index string, j ReplayJob, endpoint, model string) []string {
	args := []string{"replay", "--shard", index + "/" + fmt.Sprint(j.Shards), "--start-at", j.StartAt,
		"--endpoint", endpoint, "--model", model, "--out", "/results/shard-" + index + ".json.gz"}
	return append(args, j.Args...)
}

// RenderReplayJob renders j for spec s (rendered with the same Options):
// a batch/v1 Job with completionMode Indexed, whose pod i runs
// ReplayJobArgs("$(JOB_COMPLETION_INDEX)", ...) in the hone image.
// backoffLimit is 0: a retried shard would start after --start-at and be
// refused, so a failed shard is rerun by hand (all of them, from a new
// instant). Errors name the field.
func RenderReplayJob(s *deploy.Spec, o Options, j ReplayJob) (*batchv1.Job, error) {
	o = o.withDefaults()
	switch {
	case j.Shards < 1:
		return nil, fmt.Errorf("replay-shards %d: want at least 1", j.Shards)
	case strings.TrimSpace(j.StartAt) == "":
		return nil, fmt.Errorf("replay-start-at: required, the instant every shard starts from")
	}
	for _, a := range j.Args {
		for _, f := range []string{"--shard", "--start-at", "--endpoint", "--out"} {
			if a == f || strings.HasPrefix(a, f+"=") {
				return nil, fmt.Errorf("replay-arg %s: set by the Job", f)
			}
		}
	}
	endpoint := fmt.Sprintf("http://%s-proxy.%s.svc:%d", s.Name, o.Namespace, s.Network.ProxyPort)
	labels := Labels(s.Name, PoolReplay)
	n := int32(j.Shards)
	zero := int32(0)
	indexed := batchv1.IndexedCompletion
	results := corev1.Volume{Name: "results", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	if j.ResultsClaim != "" {
		results.VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: j.ResultsClaim}}
	}
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: objectMeta(s.Name+"-replay", o.Namespace, labels),
		Spec: batchv1.JobSpec{
			CompletionMode: &indexed,
			Completions:    &n,
			Parallelism:    &n,
			BackoffLimit:   &zero,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name:    "replay",
						Image:   o.HoneImage,
						Command: []string{"hone"},
						// Kubernetes sets JOB_COMPLETION_INDEX in every pod
						// of an Indexed Job; $(...) expands it in args.
						Args:         ReplayJobArgs("$(JOB_COMPLETION_INDEX)", j, endpoint, s.ServedName()),
						VolumeMounts: []corev1.VolumeMount{{Name: "results", MountPath: "/results"}},
					}},
					Volumes: []corev1.Volume{results},
				},
			},
		},
	}, nil
}
