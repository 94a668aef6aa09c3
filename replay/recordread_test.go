package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// ReadRecord streams: every request is checked against the schema as it
// comes, and a bad one is an error naming the file, the request and its
// field; a document that is no run record says so (ErrNotRecord).
func TestReadRecordNamesTheRequestField(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "record.example.v3.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct{ name, old, new, want string }{
		{"outcome", `"outcome":"ok"`, `"outcome":"fine"`, "runs[0].levels[0].requests[0]: "},
		{"level field", `"offered_qps":`, `"offered_qps":"x","o":`, "/runs/0/levels/0/offered_qps"},
		{"requests an object", `"requests":[`, `"requests":{"a":[`, "runs[0].levels[0].requests: an object where an array belongs"},
	} {
		bad := filepath.Join(dir, "bad.json")
		os.WriteFile(bad, bytes.Replace(data, []byte(tc.old), []byte(tc.new), 1), 0o644)
		_, err := ReadRecord(bad)
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrNotRecord) {
			t.Errorf("%s: %v, want an error naming %s and %q", tc.name, err, bad, tc.want)
		}
		if tc.name == "outcome" && !strings.Contains(err.Error(), "outcome") {
			t.Errorf("%s: %v, want the field named", tc.name, err)
		}
	}
	sim := filepath.Join(dir, "sim.json")
	os.WriteFile(sim, []byte(`{"kind":"simulation_only","levels":[]}`), 0o644)
	if _, err := ReadRecord(sim); !errors.Is(err, ErrNotRecord) {
		t.Errorf("a simulation result: %v, want ErrNotRecord", err)
	}
	trunc := filepath.Join(dir, "trunc.json")
	os.WriteFile(trunc, data[:len(data)/2], 0o644)
	if _, err := ReadRecord(trunc); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("a truncated record: %v", err)
	}
}

// Every request comes back packed, holding exactly the chunks written.
func TestReadRecordPacksChunks(t *testing.T) {
	v2, err := ReadRecord(filepath.Join("testdata", "record.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	var plain schema.Record
	data, _ := os.ReadFile(filepath.Join("testdata", "record.example.json"))
	json.Unmarshal(data, &plain)
	for i, q := range v2.Runs[0].Levels[0].Requests {
		if !q.Chunks.InMemory() && !q.Chunks.Absent() {
			t.Errorf("request %d: chunks not packed", q.ID)
		}
		if want := plain.Runs[0].Levels[0].Requests[i].Chunks; !reflect.DeepEqual(q.Chunks.Columns(), want) {
			t.Errorf("request %d: chunks %+v, want %+v", q.ID, q.Chunks.Columns(), want)
		}
	}
}

// The reader's bounds are memory bounds: a gzip bomb stops after limit
// bytes of JSON inflated, and one value (here a header field) after
// maxValueBytes, each having allocated about what it held, not what it
// counted.
func TestDecodeRecordIsBounded(t *testing.T) {
	bomb := func(prefix string, n int) []byte {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
		zw.Write([]byte(prefix))
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for range n >> 20 {
			zw.Write(chunk)
		}
		zw.Close()
		return b.Bytes()
	}
	for _, tc := range []struct {
		name       string
		data       []byte
		limit      int64
		want       string
		allocBound uint64
	}{
		{"record", bomb(`{"schema_version":3,"config":{"x":"`, 8<<20), 1 << 20, "more than 1048576 bytes of JSON (MaxRecordBytes", 8 << 20},
		{"value", bomb(`{"schema_version":3,"config":{"x":"`, maxValueBytes+(2<<20)), MaxRecordBytes, "a single value", 8 * maxValueBytes},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := decodeRecord(bytes.NewReader(tc.data), tc.limit, false)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > tc.allocBound {
			t.Errorf("%s: allocated %d bytes, want under %d", tc.name, alloc, tc.allocBound)
		}
	}
}

// ReadRecordSummary is ReadRecord then DropChunks, exactly.
func TestReadRecordSummary(t *testing.T) {
	path := filepath.Join("testdata", "record.example.v3.json")
	want, err := ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	want.DropChunks()
	got, err := ReadRecordSummary(path)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ReadRecordSummary: %v; equal to ReadRecord + DropChunks: %t", err, reflect.DeepEqual(got, want))
	}
}
