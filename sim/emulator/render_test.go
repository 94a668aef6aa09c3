package emulator

import (
	"fmt"
	"reflect"
	"testing"
)

// A request whose prompt is rendered at its arrival (Render) is served
// exactly as one given its prompt, colocated and disaggregated alike;
// each prompt is rendered once and dropped when its request has ended.
func TestSimulateRender(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers []Config
		decode  int
	}{
		{"colocated", []Config{{Profile: "exercise"}}, -1},
		{"disaggregated", []Config{{Profile: "exercise", Role: RolePrefill}, {Profile: "exercise", Role: RoleDecode}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var given, rendered []VirtualRequest
			renders := make([]int, 12)
			for i := range 12 {
				q := VirtualRequest{ID: fmt.Sprint(i), Prompt: suffix(i%3, 64+16*i), MaxTokens: 4 + i%5, ArrivalMs: float64(i) * 7, Decode: tc.decode}
				given = append(given, q)
				r := q
				r.Prompt, r.PromptLen = nil, len(q.Prompt)
				r.Render = func() []int { renders[i]++; return suffix(i%3, 64+16*i) }
				rendered = append(rendered, r)
			}
			want, err := Simulate(tc.workers, given)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Simulate(tc.workers, rendered)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("rendered prompts served differently:\n%+v\n%+v", got[0], want[0])
			}
			for i, n := range renders {
				// Simulate works on the caller's requests: the prompt it
				// rendered is gone once the request ended.
				if n != 1 || rendered[i].Prompt != nil || got[i].Result.OutputTokens != given[i].MaxTokens {
					t.Errorf("request %d: rendered %d times (want once), prompt kept %t, %d tokens out (want %d)",
						i, n, rendered[i].Prompt != nil, got[i].Result.OutputTokens, given[i].MaxTokens)
				}
			}
		})
	}
}
