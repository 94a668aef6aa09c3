package optimizer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// The regret check (issue 16) scores the loop's choices against the whole
// grid measured live once. Measuring a grid takes hours on a small host,
// so it is done once into a fixture directory (MeasureGrid: resumable, one
// record per config, named by SpecKey) and the loop is then run against
// the fixture (FixtureEvaluator), which serves each config's first
// measurement and sends a second one of the same config (the verification
// re-run) to a live evaluator, so that the re-run is a measurement too.

// The fixture keeps each record without its requests' chunks
// (replay.Record.DropChunks): a quarter of the bytes, so that a grid
// measured over hours can be committed beside the test that reads it
// (optimizer/testdata/regret) and outlive the host that measured it.
// The whole record stays with the trial (the evaluator's OutDir).

// FixturePath is where MeasureGrid keeps a config's record in dir.
func FixturePath(dir string, s *deploy.Spec) string {
	return filepath.Join(dir, SpecKey(s)+".json.gz")
}

// FailedPath is where MeasureGrid notes that a config's trial failed (its
// error, one line): the grid is measured whole with it, the config being
// one the loop would find failing too, and a rerun tries it again.
func FailedPath(dir string, s *deploy.Spec) string {
	return failedBeside(FixturePath(dir, s))
}

// failedBeside is the failure note beside a config's record path.
func failedBeside(record string) string {
	return strings.TrimSuffix(record, ".json.gz") + ".failed"
}

// MeasureGrid measures every spec of grid with ev into dir, skipping those
// already there (a rerun resumes), and returns how many it measured. A
// trial that failed leaves its error at FailedPath instead of a record,
// and a rerun measures it again. A record already there that still has
// its chunks is rewritten without.
func MeasureGrid(ctx context.Context, grid []*deploy.Spec, ev Evaluator, dir string, progress io.Writer) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	n := 0
	for i, s := range grid {
		path := FixturePath(dir, s)
		if _, err := os.Stat(path); err == nil {
			if err := dropChunks(path); err != nil {
				return n, err
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return n, err
		}
		start := time.Now()
		t := ev.Evaluate(ctx, s, fmt.Sprintf("grid-%03d", i))
		if t.Error != "" || t.Record == "" {
			if progress != nil {
				fmt.Fprintf(progress, "grid %d/%d %s: failed: %s\n", i+1, len(grid), SpecKey(s), t.Error)
			}
			if ctx.Err() != nil {
				return n, ctx.Err() // interrupted, not failed: no note
			}
			msg := t.Error
			if msg == "" {
				msg = "the trial wrote no record"
			}
			if err := atomicfile.Write(FailedPath(dir, s), []byte(strings.ReplaceAll(msg, "\n", " ")+"\n")); err != nil {
				return n, err
			}
			continue
		}
		rec, err := replay.ReadRecord(t.Record)
		if err != nil {
			return n, err
		}
		rec.DropChunks()
		if err := replay.WriteRecord(path, rec); err != nil {
			return n, err
		}
		if err := os.Remove(FailedPath(dir, s)); err != nil && !os.IsNotExist(err) {
			return n, err
		}
		n++
		if progress != nil {
			fmt.Fprintf(progress, "grid %d/%d %s: objective %.3f req/s (%d valid runs) in %s\n", i+1, len(grid), SpecKey(s),
				t.Objective, len(t.Objectives), time.Since(start).Round(time.Second))
		}
	}
	return n, nil
}

// dropChunks rewrites the record at path without its chunks, unless they
// were dropped already.
func dropChunks(path string) error {
	rec, err := replay.ReadRecord(path)
	if err != nil || rec.ChunksDropped {
		return err
	}
	rec.DropChunks()
	return replay.WriteRecord(path, rec)
}

// FixtureEvaluator serves trials from a grid measured by MeasureGrid. The
// first trial of a config gets its fixture record; a later one (the
// verification re-run) goes to Live, when set, else fails saying so.
type FixtureEvaluator struct {
	Dir  string
	Live Evaluator
	// Served counts the configs served from the fixture; Remeasured the
	// trials sent to Live.
	Served, Remeasured int
	seen               map[string]bool
}

// Evaluate implements Evaluator.
func (e *FixtureEvaluator) Evaluate(ctx context.Context, spec *deploy.Spec, tag string) Trial {
	if e.seen == nil {
		e.seen = map[string]bool{}
	}
	key := SpecKey(spec)
	if e.seen[key] {
		if e.Live == nil {
			return Trial{Kind: schema.KindUnverified, Error: "fixture: " + key + " was served once; a second measurement needs a live evaluator"}
		}
		e.Remeasured++
		return e.Live.Evaluate(ctx, spec, tag)
	}
	e.seen[key] = true
	t := e.serve(spec)
	if t.Error == "" {
		e.Served++
	}
	return t
}

// serve reads spec's trial from the fixture.
func (e *FixtureEvaluator) serve(spec *deploy.Spec) Trial {
	key := SpecKey(spec)
	path := FixturePath(e.Dir, spec)
	rec, err := replay.ReadRecord(path)
	if err != nil {
		msg := err.Error()
		if errors.Is(err, fs.ErrNotExist) {
			msg = fmt.Sprintf("fixture: %s not measured (MeasureGrid into %s)", key, e.Dir)
			if b, ferr := os.ReadFile(FailedPath(e.Dir, spec)); ferr == nil {
				msg = fmt.Sprintf("fixture: %s failed when measured: %s", key, strings.TrimSpace(string(b)))
			}
		}
		return Trial{Kind: schema.KindUnverified, Error: msg}
	}
	t := Trial{Kind: rec.Kind, Record: path, Started: rec.StartedAt, Seconds: rec.FinishedAt.Sub(rec.StartedAt).Seconds()}
	summarizeRecord(&t, rec)
	return t
}
