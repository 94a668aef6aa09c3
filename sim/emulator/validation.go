package emulator

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// The committed scoreboard of hone's accuracy against measured data (make
// validate writes and checks it; its shape is the Scoreboard type of
// package calibrate's validation test, calibrate/scoreboard_test.go):
// what a prediction states beside a profile's figures.
//
//go:embed profiles/validation-scoreboard.json
var scoreboardJSON []byte

// RequestValidation is how a profile's request-level predictions compared
// with measured rows (hone validate silicon): median and p90 absolute
// percentage errors of mean TTFT and TPOT.
type RequestValidation struct {
	Data         string  // the measured file
	LengthRatio  float64 // how request lengths were drawn (0: exact)
	KVCacheDType string  // the KV cache the rows were predicted with ("": the model's)
	Rows         int
	TTFTMedian   float64
	TTFTP90      float64
	TPOTMedian   float64
	TPOTP90      float64
}

var scoreboard = sync.OnceValue(func() map[string][]RequestValidation {
	var sb struct {
		Silicon []struct {
			File         string  `json:"file"`
			LengthRatio  float64 `json:"length_ratio"`
			KVCacheDType string  `json:"kv_cache_dtype"`
			Profiles     map[string]struct {
				Predicted int `json:"predicted"`
				TTFT      struct {
					Median float64 `json:"median_ape"`
					P90    float64 `json:"p90_ape"`
				} `json:"ttft"`
				TPOT struct {
					Median float64 `json:"median_ape"`
					P90    float64 `json:"p90_ape"`
				} `json:"tpot"`
			} `json:"profiles"`
		} `json:"silicon"`
	}
	if err := json.Unmarshal(scoreboardJSON, &sb); err != nil {
		panic("built-in validation scoreboard: " + err.Error())
	}
	out := map[string][]RequestValidation{}
	for _, b := range sb.Silicon {
		for name, s := range b.Profiles {
			out[name] = append(out[name], RequestValidation{Data: b.File, LengthRatio: b.LengthRatio, KVCacheDType: b.KVCacheDType, Rows: s.Predicted,
				TTFTMedian: s.TTFT.Median, TTFTP90: s.TTFT.P90, TPOTMedian: s.TPOT.Median, TPOTP90: s.TPOT.P90})
		}
	}
	return out
})

// ProfileValidation is how the built-in profile name's predictions
// compared with measured requests, one entry per way of drawing lengths;
// none for a profile no measured row was predicted with.
func ProfileValidation(name string) []RequestValidation {
	return scoreboard()[name]
}

// ValidationNote says in one line how far the profile name's predictions
// were from measured requests, or that they were never compared.
func ValidationNote(name string) string {
	vs := ProfileValidation(name)
	if len(vs) == 0 {
		return "not validated against measured requests"
	}
	var parts []string
	for _, v := range vs {
		lengths := "exact lengths"
		if v.LengthRatio > 0 {
			lengths = fmt.Sprintf("lengths drawn from [%g L, L]", v.LengthRatio)
		}
		if v.KVCacheDType != "" {
			lengths += ", " + v.KVCacheDType + " KV cache"
		}
		parts = append(parts, fmt.Sprintf("TTFT %.1f%%, TPOT %.1f%% (%s)", v.TTFTMedian, v.TPOTMedian, lengths))
	}
	return fmt.Sprintf("validated on %d measured request rows (%s): median error %s", vs[0].Rows, vs[0].Data, strings.Join(parts, "; "))
}
