package report

import (
	"fmt"
	"strings"
)

func joinF(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%g", x)
	}
	return strings.Join(s, ", ")
}

func joinF3(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " / ")
}

func fmtPtr(v *float64, f string) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf(f, *v)
}

func fmtPtrPct(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

func pct(ref, x float64) string {
	if ref == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", 100*(x-ref)/ref)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
