package replay

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hone-llm/hone/schema"
)

// ProgressPrinter renders a replay's Progress for people: on a terminal a
// bar redrawn in place (level, done/failed, rate, ETA); elsewhere plain
// lines, one per finished level and one every PlainEvery, so logs in CI
// stay short. Use Update as Options.Progress and call Close at the end.
type ProgressPrinter struct {
	W          io.Writer
	TTY        bool
	PlainEvery time.Duration // 0: 30 s

	drawn     bool
	lastPlain time.Time
}

// Update draws p.
func (pp *ProgressPrinter) Update(p Progress) {
	if p.LevelDone != nil {
		pp.clear()
		fmt.Fprintln(pp.W, LevelLine(p.Run, p.Runs, p.LevelDone))
		return
	}
	if pp.TTY {
		fmt.Fprintf(pp.W, "\r\x1b[K%s", barLine(p))
		pp.drawn = true
		return
	}
	every := pp.PlainEvery
	if every == 0 {
		every = 30 * time.Second
	}
	if time.Since(pp.lastPlain) >= every {
		pp.lastPlain = time.Now()
		fmt.Fprintln(pp.W, barLine(p))
	}
}

// Close ends a bar so later output starts on a clean line.
func (pp *ProgressPrinter) Close() { pp.clear() }

func (pp *ProgressPrinter) clear() {
	if pp.drawn {
		fmt.Fprint(pp.W, "\r\x1b[K")
		pp.drawn = false
	}
}

func barLine(p Progress) string {
	const width = 20
	filled := 0
	if p.Planned > 0 {
		filled = min(width, p.Done*width/p.Planned)
	}
	rate := 0.0
	if s := p.Elapsed.Seconds(); s > 0 {
		rate = float64(p.TotalDone) / s
	}
	load := fmt.Sprintf("%g qps", p.QPS)
	if n := ClosedClients(p.QPS); n > 0 {
		load = fmt.Sprintf("%d clients", n)
	}
	return fmt.Sprintf("run %d/%d level %d/%d (%s) [%s%s] %d/%d done, %d failed  %.1f req/s  ETA %s",
		p.Run+1, p.Runs, p.Level+1, p.Levels, load, strings.Repeat("#", filled), strings.Repeat("-", width-filled),
		p.Done, p.Planned, p.Failed, rate, p.ETA.Round(time.Second))
}

// LevelLine is the one-line summary of a finished level.
func LevelLine(run, runs int, l *schema.LevelRecord) string {
	verdict := "passed"
	if !l.Passed {
		verdict = "FAILED"
		if !l.Complete {
			verdict = string(schema.ReasonIncomplete)
		}
	}
	failed := l.Sent - l.Outcomes[schema.OutcomeOK]
	hit := "n/a"
	if r := l.HitRateMetricsMeasure; r != nil {
		hit = fmt.Sprintf("%.1f%% (metrics)", *r*100)
	} else if r := l.HitRateCachedTokens; r != nil {
		hit = fmt.Sprintf("%.1f%% (cached_tokens)", *r*100)
	}
	load := fmt.Sprintf("qps %g", l.OfferedQPS)
	if l.Concurrency > 0 {
		load = fmt.Sprintf("%d clients", l.Concurrency)
	}
	return fmt.Sprintf("run %d/%d %s: p99 TTFT %.1f ms, p99 TPOT %.2f ms, effective %.3f req/s, %s; %d/%d sent, %d failed, prefix hit %s",
		run+1, runs, load, l.P99TTFTMs, l.P99TPOTMs, l.EffectiveQPS, verdict, l.Sent, l.Planned, failed, hit)
}
