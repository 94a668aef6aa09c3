package gate

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The gate parses replay records itself (readReplayRecord): a version 3
// record (packed chunks) gives exactly the runs its version 2 form does.
func TestReadReplayRecordVersions(t *testing.T) {
	var runs [2][]Run
	for i, name := range []string{"record.example.json", "record.example.v3.json"} {
		b, err := os.ReadFile(filepath.Join("..", "replay", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if runs[i], err = ParseRuns(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if len(runs[0]) == 0 || !reflect.DeepEqual(runs[0], runs[1]) {
		t.Errorf("version 2 and 3 records give different runs:\n%+v\n%+v", runs[0], runs[1])
	}
}
