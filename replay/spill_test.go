package replay

import (
	"context"
	"net/http"
	"os"
	"reflect"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// Spilled chunks read as the packed ones they were: count, columns,
// JSON and intervals; the spill file is unlinked from the start.
func TestSpilledChunks(t *testing.T) {
	dir := t.TempDir()
	sp, err := newSpill(dir)
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%d files in the spill's directory, want none (unlinked)", len(entries))
	}
	for _, q := range briefRecord(t, 1).Runs[0].Levels[0].Requests[:3] {
		p := q.Chunks
		if err := p.Pack(); err != nil {
			t.Fatal(err)
		}
		s := p
		if err := s.MoveTo(sp); err != nil {
			t.Fatal(err)
		}
		if s.InMemory() || !s.Stored() || s.Len() != p.Len() || !reflect.DeepEqual(s.Columns(), q.Chunks) {
			t.Errorf("request %d: spilled chunks %d, columns equal %t; want %d", q.ID, s.Len(), reflect.DeepEqual(s.Columns(), q.Chunks), p.Len())
		}
		a, _ := p.MarshalJSON()
		b, err := s.MarshalJSON()
		if err != nil || string(a) != string(b) {
			t.Errorf("request %d: spilled JSON differs (%v)", q.ID, err)
		}
		var pi, si []int64
		p.EachInterval(func(g int64) { pi = append(pi, g) })
		s.EachInterval(func(g int64) { si = append(si, g) })
		if len(pi) != q.Chunks.Len()-1 || !reflect.DeepEqual(pi, si) {
			t.Errorf("request %d: %d intervals spilled, %d packed", q.ID, len(si), len(pi))
		}
		if err := s.Pack(); err != nil || !s.Stored() {
			t.Errorf("request %d: Pack on spilled chunks: %v", q.ID, err)
		}
	}
}

// A trace replay with SpillDir holds no request's chunks in memory, and
// its record, written whole or interrupted, holds every chunk measured.
func TestRunTraceSpills(t *testing.T) {
	srv := leanVLLM(t)
	const n, output = 40, 16
	tf, err := OpenTrace(writeBenchTrace(t, n, 25, 600, output), 0, 16)
	if err != nil {
		t.Fatal(err)
	}
	for _, interrupt := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		dir := t.TempDir()
		opts := Options{Endpoint: srv.URL, Model: "m", Cache: schema.CacheReset, SpillDir: dir, HTTPClient: &http.Client{Transport: newTransport()}}
		if interrupt {
			opts.Progress = func(p Progress) { // every 250 ms of a trace that spans 975
				if p.Done > 0 {
					cancel()
				}
			}
		}
		rec, err := RunTrace(ctx, opts, tf, 1)
		cancel()
		if (err != nil) != interrupt || rec == nil {
			t.Fatalf("interrupted %t: %v", interrupt, err)
		}
		l := rec.Runs[0].Levels[0]
		if interrupt && (l.Sent == 0 || l.Sent >= n || !rec.Incomplete) || !interrupt && l.Sent != n {
			t.Errorf("interrupted %t: %d of %d sent, incomplete %t", interrupt, l.Sent, n, rec.Incomplete)
		}
		ok := 0
		for _, q := range l.Requests {
			if q.Outcome == schema.OutcomeOK {
				ok++
				if !q.Chunks.Stored() || q.Chunks.InMemory() || q.Chunks.Len() != output {
					t.Errorf("interrupted %t: request %d: %d chunks, spilled %t, in memory %t", interrupt, q.ID, q.Chunks.Len(), q.Chunks.Stored(), q.Chunks.InMemory())
				}
			}
		}
		path := dir + "/rec.json.gz"
		if err := WriteRecord(path, rec); err != nil {
			t.Fatal(err)
		}
		back, err := ReadRecord(path)
		if err != nil {
			t.Fatal(err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("%d files beside the record, want the record alone", len(entries))
		}
		if ok == 0 || len(back.Runs[0].Levels[0].Requests) != l.Sent {
			t.Fatalf("interrupted %t: %d completed; %d requests read back of %d sent", interrupt, ok, len(back.Runs[0].Levels[0].Requests), l.Sent)
		}
		for i, q := range back.Runs[0].Levels[0].Requests {
			if !reflect.DeepEqual(q.Chunks.Columns(), l.Requests[i].Chunks.Columns()) {
				t.Errorf("interrupted %t: request %d reads back other chunks", interrupt, q.ID)
			}
		}
	}
}
