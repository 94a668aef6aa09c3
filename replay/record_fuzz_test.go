package replay

import (
	"bytes"
	"compress/gzip"
	"testing"
)

// FuzzGunzipRecord: whatever the bytes, gunzipRecord returns at most its
// limit or an error, and what gzip wrote within the limit comes back
// exactly.
func FuzzGunzipRecord(f *testing.F) {
	for _, s := range []string{"", "{}", `{"schema_version":3}`, "\x1f\x8b", "\x1f\x8b\x08\x00"} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte, compress bool) {
		in := data
		if compress {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(data)
			zw.Close()
			in = b.Bytes()
		}
		out, err := gunzipRecord(in, limit)
		if err == nil && int64(len(out)) > limit && compress {
			t.Fatalf("%d bytes out, over the limit %d", len(out), limit)
		}
		if compress && len(data) <= limit && (err != nil || !bytes.Equal(out, data)) {
			t.Fatalf("round trip of %d bytes: %v", len(data), err)
		}
		if compress && len(data) > limit && err == nil {
			t.Fatalf("%d bytes inflated past the limit %d", len(data), limit)
		}
	})
}
