package replay

import "github.com/hone-llm/hone/schema"

// Agreement compares the outputs of two records request by request: among
// requests present in both (same run, offered rate and id) with the same
// prompt and a valid output in both, the fraction whose output ids are
// identical. Engines are not batch-invariant, so at temperature 0 this is
// a rate to report, not a pass/fail check. compared is 0 (and rate 0) when
// nothing was comparable.
func Agreement(a, b *schema.Record) (rate float64, compared int) {
	type key struct {
		run int
		qps float64
		id  int
	}
	outs := map[key]*schema.RequestRecord{}
	for _, r := range a.Runs {
		for _, l := range r.Levels {
			for i := range l.Requests {
				outs[key{r.Run, l.OfferedQPS, l.Requests[i].ID}] = &l.Requests[i]
			}
		}
	}
	same := 0
	for _, r := range b.Runs {
		for _, l := range r.Levels {
			for i := range l.Requests {
				y := &l.Requests[i]
				x := outs[key{r.Run, l.OfferedQPS, y.ID}]
				if x == nil || !x.Valid || !y.Valid || x.PromptSHA256 != y.PromptSHA256 || x.OutputSHA256 == "" {
					continue
				}
				compared++
				if x.OutputSHA256 == y.OutputSHA256 {
					same++
				}
			}
		}
	}
	if compared == 0 {
		return 0, 0
	}
	return float64(same) / float64(compared), compared
}
