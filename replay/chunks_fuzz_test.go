package replay

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// FuzzDecodeChunks feeds arbitrary bytes to the packed decoder: it never
// panics, and whatever it accepts re-encodes to data that decodes to the
// same chunks (encode(decode(x)) == decode(x)), through the JSON form too.
func FuzzDecodeChunks(f *testing.F) {
	for _, c := range []schema.Chunks{
		{MonoNs: []int64{}, UnixNs: []int64{}, TokenIDs: [][]int{}},
		{MonoNs: []int64{322695735892, 322695771078, 322695799491}, UnixNs: []int64{1796074842176421997, 1796074842176457173, 1796074842176485576},
			TokenIDs: [][]int{{7815}, {15734, 23653}, {}}},
		{MonoNs: []int64{-1 << 63, 1<<63 - 1}, UnixNs: []int64{1<<63 - 1, -1 << 63}, TokenIDs: [][]int{{-1, 0}, {151935}}},
	} {
		data, err := schema.EncodeChunks(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, int64(len(c.MonoNs)))
	}
	f.Add([]byte{0x80, 0x80, 0x80}, int64(1))
	f.Add(binary.AppendUvarint([]byte{2, 2}, 1<<62), int64(1))
	f.Add([]byte{2, 2, 0, 2, 2, 0}, int64(-1))
	f.Fuzz(func(t *testing.T, data []byte, count int64) {
		c, err := schema.DecodeChunks(data, count)
		if err != nil {
			return
		}
		if len(c.MonoNs) != int(count) || len(c.UnixNs) != int(count) || len(c.TokenIDs) != int(count) {
			t.Fatalf("count %d: decoded %d/%d/%d chunks", count, len(c.MonoNs), len(c.UnixNs), len(c.TokenIDs))
		}
		again, err := schema.EncodeChunks(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := schema.DecodeChunks(again, count)
		if err != nil {
			t.Fatalf("re-encoded chunks do not decode: %v", err)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("decode(encode(decode(x))) = %+v, decode(x) = %+v", back, c)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var viaJSON schema.Chunks
		if err := json.Unmarshal(b, &viaJSON); err != nil || !reflect.DeepEqual(viaJSON, c) {
			t.Fatalf("%s: %v, read back %+v, want %+v", b, err, viaJSON, c)
		}
	})
}
