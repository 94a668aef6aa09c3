package replay

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// The seed workload's fixed schedule constants. They are part of the exercise's
// interface and do not change between public and private instances.
const (
	// Sessions is the number of distinct code prefixes (session = id % Sessions).
	Sessions = schema.Sessions
	// WarmupSpacingMillis separates the cold warm-up requests 0..7.
	WarmupSpacingMillis = 2000.0
	// MeasureStartMillis is the arrival time of request 8, the first
	// measured request.
	MeasureStartMillis = 16000.0
	// DefaultUncachedTokens is the number of input tokens of a measurement
	// request that are not covered by its session's prefix.
	DefaultUncachedTokens = 128
)

// Request is one request of the replayed workload, with the seed workload's field
// names in JSON.
type Request struct {
	ID           int     `json:"id"`
	ArrivalMs    float64 `json:"arrival_ms"`
	Session      int     `json:"session"`
	InputTokens  int     `json:"input_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	OutputTokens int     `json:"output_tokens"`
}

// Warmup reports whether r is one of the eight cold warm-up requests, which
// occupy the queues but never enter statistics.
func (r Request) Warmup() bool { return r.ID < Sessions }

// Params sets the shape of one load level of the workload.
type Params struct {
	Requests       int     // total requests, warm-up included (128 in the public instance)
	InputTokens    int     // tokens per prompt (4096; privately 4096, 6144 or 8192)
	UncachedTokens int     // tokens of a measurement prompt beyond its session prefix (128)
	OutputTokens   int     // tokens generated per request (128; privately 64, 128 or 256)
	OfferedQPS     float64 // arrival rate of the measurement phase
	// LengthRatio and Seed: see Workload.LengthRatio (0: fixed lengths).
	LengthRatio float64
	Seed        uint64
}

// DefaultParams is the seed workload's public instance at the given offered QPS.
func DefaultParams(qps float64) Params {
	return Params{Requests: 128, InputTokens: 4096, UncachedTokens: DefaultUncachedTokens, OutputTokens: 128, OfferedQPS: qps}
}

// ParamError is a rejected workload parameter. Field is the user-facing
// name (the flag or JSON field), so callers can report it as is.
type ParamError struct {
	Field string
	Value any
	Want  string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("invalid %s %v: want %s", e.Field, e.Value, e.Want)
}

// Validate rejects parameters that cannot describe the seed workload.
func (p Params) Validate() error {
	switch {
	case p.Requests < Sessions+1:
		return &ParamError{"requests", p.Requests, fmt.Sprintf("at least %d (8 warm-up requests and one measured)", Sessions+1)}
	case p.InputTokens < 1:
		return &ParamError{"input-tokens", p.InputTokens, "at least 1"}
	case p.UncachedTokens < 1:
		return &ParamError{"uncached-tokens", p.UncachedTokens, "at least 1 (cached tokens must be fewer than input tokens)"}
	case p.UncachedTokens > p.InputTokens:
		return &ParamError{"input-tokens", p.InputTokens, fmt.Sprintf("more than the %d uncached measurement tokens (cached tokens must be >= 0)", p.UncachedTokens)}
	case p.OutputTokens < 1:
		return &ParamError{"output-tokens", p.OutputTokens, "at least 1"}
	case math.IsNaN(p.OfferedQPS) || math.IsInf(p.OfferedQPS, 0):
		return &ParamError{"qps", p.OfferedQPS, "a finite number"}
	case p.OfferedQPS <= 0:
		return &ParamError{"qps", p.OfferedQPS, "greater than 0"}
	case math.IsNaN(p.LengthRatio) || p.LengthRatio < 0 || p.LengthRatio > 1:
		return &ParamError{"length-ratio", p.LengthRatio, "a fraction in (0, 1]: each request's lengths drawn from [ratio × L, L]; 0 or 1 for fixed lengths"}
	}
	return nil
}

// Generate returns the seed workload for one load level: requests 0..7
// warm the eight sessions cold (arrival i*2000 ms, nothing cached); request
// i >= 8 arrives at 16000+(i-8)*1000/qps ms with all but UncachedTokens of
// its input cached. The expressions keep the order of operations of the workload's definition so
// arrival times are bit-for-bit those of the original generator.
func Generate(p Params) ([]Request, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	reqs := make([]Request, p.Requests)
	for i := range reqs {
		r := Request{ID: i, Session: i % Sessions, InputTokens: p.InputTokens, OutputTokens: p.OutputTokens}
		if i < Sessions {
			r.ArrivalMs = float64(i * 2000)
		} else {
			r.ArrivalMs = MeasureStartMillis + float64((i-Sessions)*1000)/p.OfferedQPS
			r.CachedTokens = p.InputTokens - p.UncachedTokens
			if p.LengthRatio > 0 && p.LengthRatio < 1 {
				r.InputTokens, r.OutputTokens = drawLengths(p, i, r.CachedTokens)
			}
		}
		reqs[i] = r
	}
	return reqs, nil
}

// GenerateClosed returns the schedule of a closed-loop level of
// concurrency n: the warm-ups as Generate gives them, and every measured
// request planned at MeasureStartMillis. The first n measured requests are
// sent then; each later one, in id order, when a measured request ends
// (the sender overwrites its arrival with that instant). p.OfferedQPS is
// not read.
func GenerateClosed(p Params, n int) ([]Request, error) {
	if n < 1 {
		return nil, &ParamError{"concurrency", n, "at least 1 client"}
	}
	p.OfferedQPS = 1
	reqs, err := Generate(p)
	if err != nil {
		return nil, err
	}
	for i := Sessions; i < len(reqs); i++ {
		reqs[i].ArrivalMs = MeasureStartMillis
	}
	return reqs, nil
}

// ClosedLevelKey is a closed-loop level of concurrency n's key: what it
// passes as the rate to Prompts (AppendPrompt, AppendSuffix), request ids
// and seeds; a key no open level's rate can take, so the two never share
// suffixes. An open level's key is its offered rate.
func ClosedLevelKey(n int) float64 { return -float64(n) }

// ClosedClients is the clients of the level with key, 0 for an open
// level.
func ClosedClients(key float64) int {
	if key < 0 {
		return int(-key)
	}
	return 0
}

// LevelKeys are the keys of the levels at offered rates qps or, instead,
// closed loops of clients.
func LevelKeys(qps []float64, clients []int) []float64 {
	if len(clients) == 0 {
		return qps
	}
	out := make([]float64, len(clients))
	for i, n := range clients {
		out[i] = ClosedLevelKey(n)
	}
	return out
}

// LevelOf is the level with key, as a record states it.
func LevelOf(key float64) slo.Level {
	if n := ClosedClients(key); n > 0 {
		return slo.Level{Concurrency: n}
	}
	return slo.Level{OfferedQPS: key}
}

// GenerateLevel is the schedule of the level with key: Generate at its
// rate, or GenerateClosed.
func GenerateLevel(w schema.Workload, key float64) ([]Request, error) {
	if n := ClosedClients(key); n > 0 {
		return GenerateClosed(ParamsOf(w, 1), n)
	}
	return Generate(ParamsOf(w, key))
}

// drawLengths draws request id's input and output lengths uniformly from
// [ratio × L, L] (whole tokens), the input never reaching into its
// session's cached prefix: a pure function of the seed, the ratio and id.
func drawLengths(p Params, id, cached int) (in, out int) {
	rng := rand.New(rand.NewPCG(p.Seed^0x6c656e67746873, uint64(id)))
	draw := func(l, floor int) int {
		lo := max(int(math.Ceil(p.LengthRatio*float64(l))), floor)
		if lo >= l {
			return l
		}
		return lo + rng.IntN(l-lo+1)
	}
	in = draw(p.InputTokens, cached+1)
	out = draw(p.OutputTokens, 1)
	return in, out
}

// ParamUsage is a rejected workload parameter as hone's commands report
// it: a usage.Error naming the flag, the value and what it wants.
func ParamUsage(pe *ParamError) error {
	return usage.Errorf("--%s: %v is invalid: want %s", pe.Field, pe.Value, pe.Want)
}
