package replay

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
)

// Packed chunks (Chunks.Pack, as a trace replay keeps them) are the same
// chunks: the same count, columns, JSON and encoding as the columns they
// came from; absent chunks stay absent, an empty stream stays empty.
func TestChunksPack(t *testing.T) {
	rec := briefRecord(t, 7)
	reqs := rec.Runs[0].Levels[0].Requests
	reqs[1].Chunks = Chunks{}                                                          // no stream
	reqs[2].Chunks = Chunks{MonoNs: []int64{}, UnixNs: []int64{}, TokenIDs: [][]int{}} // a stream without output
	for i := range reqs {
		cols := reqs[i].Chunks
		before, err := json.Marshal(cols)
		if err != nil {
			t.Fatal(err)
		}
		c := cols
		if err := c.Pack(); err != nil {
			t.Fatal(err)
		}
		after, _ := json.Marshal(c)
		if !bytes.Equal(before, after) {
			t.Fatalf("request %d: packed JSON %.80s, columns %.80s", i, after, before)
		}
		if c.Len() != len(cols.MonoNs) || c.MonoNs != nil || c.Packed() == (i == 1) {
			t.Errorf("request %d: Len %d (want %d), columns kept %t, packed %t", i, c.Len(), len(cols.MonoNs), c.MonoNs != nil, c.Packed())
		}
		if got := c.Columns(); !reflect.DeepEqual(got, cols) {
			t.Errorf("request %d: columns after packing differ: %d chunks, want %d", i, len(got.MonoNs), len(cols.MonoNs))
		}
		var back Chunks
		if i != 1 {
			if err := json.Unmarshal(after, &back); err != nil || !reflect.DeepEqual(back, cols) {
				t.Errorf("request %d: read back %v, %v", i, back.MonoNs, err)
			}
		}
	}
}

// EncodeRecord writes json.Marshal's bytes, a request at a time: for the
// fixture, a record whose chunks are packed, and nil runs, levels and
// requests (null, as json.Marshal writes them).
func TestEncodeRecord(t *testing.T) {
	fixture, err := ReadRecord(filepath.Join("testdata", "record.example.v3.json"))
	if err != nil {
		t.Fatal(err)
	}
	packed := briefRecord(t, 3)
	for i := range packed.Runs[0].Levels[0].Requests {
		packed.Runs[0].Levels[0].Requests[i].Chunks.Pack()
	}
	noLevels := briefRecord(t, 4)
	noLevels.Runs = append(noLevels.Runs, RunRecord{Run: 1})
	noRequests := briefRecord(t, 5)
	noRequests.Runs[0].Levels = append(noRequests.Runs[0].Levels, LevelRecord{Level: LevelOf(8)})
	for name, rec := range map[string]*Record{"fixture": fixture, "packed": packed, "no runs": {}, "no levels": noLevels, "no requests": noRequests} {
		cp := *rec
		cp.SchemaVersion = SchemaVersion
		want, err := json.Marshal(&cp)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := EncodeRecord(&got, rec); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s: EncodeRecord differs from json.Marshal:\n%.300s\n%.300s", name, got.Bytes(), want)
		}
	}
}
