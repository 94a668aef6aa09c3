package report

import (
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
)

// logTicks marks every integer multiple of each power of ten on a log
// axis, so a reader can read a value off it, and labels them all where the
// axis spans up to a decade, 1, 2 and 5 times each power up to three
// decades, and only the powers beyond.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	first, last := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
	decades := math.Log10(hi / lo)
	var ts []plot.Tick
	for e := first; e <= last; e++ {
		for m := 1; m < 10; m++ {
			v := float64(m) * math.Pow10(e)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || decades <= 1 || (decades <= 3 && (m == 2 || m == 5)) {
				t.Label = decimal(m, e)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// decimal writes m·10^e without rounding noise: 2000, 0.05.
func decimal(m, e int) string {
	if e >= 0 {
		return strconv.Itoa(m) + strings.Repeat("0", e)
	}
	return "0." + strings.Repeat("0", -e-1) + strconv.Itoa(m)
}
