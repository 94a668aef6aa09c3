package diagnose

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/hone-llm/hone/schema"
)

// DaemonSnapshot is what diagnose reads of one daemon snapshot (hone
// daemon --once -o FILE, or GET /v1/snapshot): the kernel evidence
// (ReadKernelEvidence) and the KV-transfer connections (ReadKVConns).
type DaemonSnapshot struct {
	Kernel KernelEvidence
	KV     []KVConn
}

// ReadDaemonSnapshot reads a daemon snapshot file once for both.
func ReadDaemonSnapshot(path string) (DaemonSnapshot, error) {
	s, err := readSnapshot(path)
	if err != nil {
		return DaemonSnapshot{}, err
	}
	k, err := evidenceOf(s)
	if err != nil {
		return DaemonSnapshot{}, err
	}
	return DaemonSnapshot{Kernel: k, KV: kvConns(s)}, nil
}

// readSnapshot reads and decodes a daemon snapshot file.
func readSnapshot(path string) (*schema.Snapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read daemon snapshot: %w", err)
	}
	return parseSnapshot(b)
}

// parseSnapshot decodes a daemon snapshot of the layout and clock diagnose
// reads.
func parseSnapshot(b []byte) (*schema.Snapshot, error) {
	var s schema.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("daemon snapshot: %w", err)
	}
	if s.SchemaVersion != schema.SnapshotVersion || s.Clock != schema.SnapshotClock {
		return nil, fmt.Errorf("daemon snapshot: schema_version %d clock %q: want %d and %s", s.SchemaVersion, s.Clock,
			schema.SnapshotVersion, schema.SnapshotClock)
	}
	return &s, nil
}
