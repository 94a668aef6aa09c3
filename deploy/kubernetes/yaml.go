package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// YAML writes objects as one multi-document YAML stream (--- between
// documents), in order. The empty status a rendered object carries is left
// out: it is the cluster's to write.
func YAML(objs []runtime.Object) ([]byte, error) {
	var b bytes.Buffer
	for i, o := range objs {
		j, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		delete(m, "status")
		y, err := yaml.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}
