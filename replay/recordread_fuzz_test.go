package replay

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// FuzzDecodeRecord: the streaming reader (decodeRecord, behind ReadRecord)
// never accepts a record the whole-document check (ValidateRecord, then
// json.Unmarshal) rejects, and accepts every one that check accepts at a
// schema version hone reads: streaming changes the memory, not the verdict.
func FuzzDecodeRecord(f *testing.F) {
	for _, p := range []string{"testdata/record.example.json", "testdata/record.example.v3.json"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"schema_version":3}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
			return // gzip: FuzzGunzipRecord's
		}
		got, err := decodeRecord(bytes.NewReader(data), 1<<20, false)
		whole := ValidateRecord(data)
		var rec schema.Record
		if whole == nil {
			whole = json.Unmarshal(data, &rec)
		}
		var head struct {
			SchemaVersion *int `json:"schema_version"`
		}
		readable := whole == nil && json.Unmarshal(data, &head) == nil && head.SchemaVersion != nil &&
			*head.SchemaVersion >= schema.OldestSchemaVersion && *head.SchemaVersion <= schema.SchemaVersion
		switch {
		case err == nil && whole != nil:
			t.Fatalf("the streaming reader accepted what the whole-document check rejects: %v", whole)
		case err == nil && got == nil:
			t.Fatal("no error and no record")
		case err != nil && readable:
			t.Fatalf("the streaming reader rejected a record the whole-document check accepts: %v", err)
		}
	})
}
