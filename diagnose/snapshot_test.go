package diagnose

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadDaemonSnapshotOnce: one read gives what ReadKernelEvidence and
// ReadKVConns give from the same file, and the same errors.
func TestReadDaemonSnapshotOnce(t *testing.T) {
	snap := strings.TrimSuffix(string(snapshot(5600, 40001, 40002)), "}") + `,
 "exchanges":[{"pid":7,"local":"127.0.0.1:8000","remote":"127.0.0.1:40000","request_start_monotonic_ns":1000,
  "first_send_monotonic_ns":5200,"second_send_monotonic_ns":7200,"last_send_monotonic_ns":9000,"response_sends":4}],
 "steps":[{"pid":7,"start_monotonic_ns":3100,"end_monotonic_ns":5000},{"pid":7,"start_monotonic_ns":1200,"end_monotonic_ns":3000}],
 "targets":[{"pid":7,"ppid":1,"root_pid":7,"comm":"python3","how":"cmdline","added_monotonic_ns":1}]}`
	path := filepath.Join(t.TempDir(), "snapshot.json")
	if err := os.WriteFile(path, []byte(snap), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDaemonSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ReadKernelEvidence(path)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := ReadKVConns(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Kernel, k) || !reflect.DeepEqual(got.KV, kv) {
		t.Errorf("ReadDaemonSnapshot: %+v\nwant kernel %+v\nand KV %+v", got, k, kv)
	}
	if len(got.Kernel.Exchanges) != 1 || len(got.Kernel.Steps[7]) != 2 || len(got.Kernel.Processes) != 1 || len(got.KV) != 2 {
		t.Errorf("ReadDaemonSnapshot read %+v", got)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"schema_version":2,"clock":"CLOCK_MONOTONIC"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err1 := ReadDaemonSnapshot(bad)
	_, err2 := ReadKernelEvidence(bad)
	if err1 == nil || err2 == nil || err1.Error() != err2.Error() {
		t.Errorf("schema_version 2: %v, want %v", err1, err2)
	}
}
