package replay

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// Packed chunks (Chunks.Pack, as a trace replay keeps them) are the same
// chunks: the same count, columns, JSON and encoding as the columns they
// came from; absent chunks stay absent, an empty stream stays empty.
func TestChunksPack(t *testing.T) {
	rec := briefRecord(t, 7)
	reqs := rec.Runs[0].Levels[0].Requests
	reqs[1].Chunks = schema.Chunks{}                                                          // no stream
	reqs[2].Chunks = schema.Chunks{MonoNs: []int64{}, UnixNs: []int64{}, TokenIDs: [][]int{}} // a stream without output
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
		if c.Len() != len(cols.MonoNs) || c.MonoNs != nil || (!c.InMemory()) != (i == 1) {
			t.Errorf("request %d: Len %d (want %d), columns kept %t, packed %t", i, c.Len(), len(cols.MonoNs), c.MonoNs != nil, c.InMemory())
		}
		if got := c.Columns(); !reflect.DeepEqual(got, cols) {
			t.Errorf("request %d: columns after packing differ: %d chunks, want %d", i, len(got.MonoNs), len(cols.MonoNs))
		}
		var back schema.Chunks
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
	noLevels.Runs = append(noLevels.Runs, schema.RunRecord{Run: 1})
	noRequests := briefRecord(t, 5)
	noRequests.Runs[0].Levels = append(noRequests.Runs[0].Levels, schema.LevelRecord{Level: LevelOf(8)})
	for name, rec := range map[string]*schema.Record{"fixture": fixture, "packed": packed, "no runs": {}, "no levels": noLevels, "no requests": noRequests} {
		cp := *rec
		cp.SchemaVersion = schema.SchemaVersion
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

// intervalDist gives dist's figures, bit for bit, over intervals read from
// packed and unpacked chunks alike: ties, a negative interval (a clock
// that stepped back), one of more than 2^32 ns.
func TestIntervalDist(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var reqs []schema.Chunks
	for r := range 300 {
		var c schema.Chunks
		mono := int64(1e12)
		for k := range 1 + rng.IntN(40) {
			switch {
			case r == 7 && k == 3:
				mono -= 5
			case r == 9 && k == 1:
				mono += 5 << 32
			default:
				mono += 6_500_000 + int64(rng.IntN(8))*1000
			}
			c.MonoNs, c.UnixNs, c.TokenIDs = append(c.MonoNs, mono), append(c.UnixNs, mono+7), append(c.TokenIDs, []int{k})
		}
		if r%2 == 0 {
			c.Pack()
		}
		reqs = append(reqs, c)
	}
	ms := func(ns int64) float64 { return float64(ns) / 1e6 / 0.25 }
	var all []float64
	for _, c := range reqs {
		mono := c.Columns().MonoNs
		for k := 1; k < len(mono); k++ {
			all = append(all, ms(mono[k]-mono[k-1]))
		}
	}
	want := dist(all)
	got := intervalDist(func(f func(int64)) {
		for _, c := range reqs {
			c.EachInterval(f)
		}
	}, ms)
	if got != want || got.N < 1000 {
		t.Errorf("intervalDist %+v, dist %+v", got, want)
	}
	if d := intervalDist(func(func(int64)) {}, ms); d != (Dist{}) {
		t.Errorf("no intervals: %+v", d)
	}
}
