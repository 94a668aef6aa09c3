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

// linearTicks labels a linear axis every 1, 2 or 5 times a power of ten,
// the step that gives two to ten intervals, with an unlabelled tick between:
// gonum's default gives two labels, 0.00 and 25.00, on an axis of loads
// up to 26 req/s.
type linearTicks struct{}

// Ticks implements plot.Ticker.
func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return nil
	}
	e := int(math.Floor(math.Log10((hi - lo) / 4)))
	m := 1
	for _, c := range []int{1, 2, 5, 10} {
		if (hi-lo)/(float64(c)*math.Pow10(e)) < 10 {
			m = c
			break
		}
	}
	if m == 10 {
		m, e = 1, e+1
	}
	step := float64(m) * math.Pow10(e)
	var ts []plot.Tick
	for i := math.Ceil(lo/step*2 - 1e-9); i <= math.Floor(hi/step*2+1e-9); i++ {
		t := plot.Tick{Value: i*step/2 + 0} // + 0: no "-0"
		if int(i)%2 == 0 {
			// To the step's digits: i·step/2 carries rounding noise.
			t.Label = strconv.FormatFloat(t.Value, 'f', max(0, -e), 64)
		}
		ts = append(ts, t)
	}
	return ts
}
