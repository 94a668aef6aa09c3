package kubernetes

import (
	"fmt"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Decode reads a stream YAML wrote back into typed objects, strictly: a
// field the type does not have, or a duplicate key, is an error.
func Decode(b []byte) ([]runtime.Object, error) {
	var out []runtime.Object
	for i, doc := range splitDocuments(b) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var o runtime.Object
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Service":
			o = &corev1.Service{}
		case "v1 ConfigMap":
			o = &corev1.ConfigMap{}
		case "v1 ServiceAccount":
			o = &corev1.ServiceAccount{}
		case "rbac.authorization.k8s.io/v1 Role":
			o = &rbacv1.Role{}
		case "rbac.authorization.k8s.io/v1 RoleBinding":
			o = &rbacv1.RoleBinding{}
		case "apps/v1 StatefulSet":
			o = &appsv1.StatefulSet{}
		case "apps/v1 Deployment":
			o = &appsv1.Deployment{}
		case "apps/v1 DaemonSet":
			o = &appsv1.DaemonSet{}
		case "batch/v1 Job":
			o = &batchv1.Job{}
		case monitoringv1.SchemeGroupVersion.String() + " " + monitoringv1.ServiceMonitorsKind:
			o = &monitoringv1.ServiceMonitor{}
		default:
			return nil, fmt.Errorf("document %d: unexpected kind %q %q", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, o); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, tm.Kind, err)
		}
		out = append(out, o)
	}
	return out, nil
}

func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range strings.Split("\n"+string(b), "\n---\n") {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}
