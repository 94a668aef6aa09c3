package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/hone-llm/hone/schema"
)

// ImpliedHitRule states how TraceInfo.ImpliedHitRate is computed.
const ImpliedHitRule = "unbounded prefix cache, requests in trace order, each finishing its prefill before the next arrives: " +
	"a request's cached tokens are its first k full trace blocks whose hash-id chain an earlier request already sent " +
	"(the first occurrence of a block is a miss), cut to whole engine blocks and to input_length - 1 (the engine computes at least the last token: " +
	"floor(min(k × block_size, input_length - 1) / engine_block_size) × engine_block_size); a partial last block and the tail are the request's own"

// TraceTokenRecipe states how TraceTokens builds prompts.
const TraceTokenRecipe = "each full trace block: a first token i mod (max(vocab) + 1), i the block's rank among the distinct blocks that followed the same hash-id chain (tails included), " +
	"then block_size - 1 ids drawn uniformly from vocab by PCG(seed, hash_id); the tokens after the last full block with a hash id: " +
	"first token by the same rank, the rest by PCG(seed ^ tail, request index); vocab: the distinct ids of hone's generated code text tokenized by the engine"

// ImpliedHits computes the hit rate a trace's structure implies
// (ImpliedHitRule), a request at a time.
type ImpliedHits struct {
	block, engine int
	seen          map[uint64]struct{}
	Input, Cached int64
}

// NewImpliedHits is an empty cache for a trace of block-token blocks on
// an engine of engineBlock-token blocks.
func NewImpliedHits(block, engineBlock int) *ImpliedHits {
	return &ImpliedHits{block: block, engine: engineBlock, seen: map[uint64]struct{}{}}
}

// chainKey extends the key of a chain of hash ids by h (the root's is 0):
// a block is the same block only after the same blocks.
func chainKey(parent uint64, h int64) uint64 {
	z := parent*0x9E3779B97F4A7C15 ^ uint64(h) + 0x632BE59BD9B4E019
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// fullBlocks is how many of q's blocks have a hash id and are whole.
func fullBlocks(q *TraceRequest, block int) int {
	return min(len(q.HashIDs), q.InputLength/block)
}

// Add counts q's cached tokens and caches its full blocks.
func (m *ImpliedHits) Add(q *TraceRequest) int {
	n := fullBlocks(q, m.block)
	k, key, hit := 0, uint64(0), true
	for i := range n {
		key = chainKey(key, q.HashIDs[i])
		if _, ok := m.seen[key]; ok && hit {
			k++
		} else {
			hit = false
			m.seen[key] = struct{}{}
		}
	}
	cached := min(k*m.block, q.InputLength-1) / m.engine * m.engine
	m.Input += int64(q.InputLength)
	m.Cached += int64(cached)
	return cached
}

// Rate is cached / input tokens so far.
func (m *ImpliedHits) Rate() float64 {
	if m.Input == 0 {
		return 0
	}
	return float64(m.Cached) / float64(m.Input)
}

// TraceTokens builds a trace's prompts as token ids (TraceTokenRecipe):
// two requests whose hash lists agree on their first k full blocks share
// exactly their first k × block tokens, and nothing more — every block and
// tail begins with a token none of its siblings (the other blocks after
// the same chain) begins with, as long as no chain has more than Vocab
// successors (FirstTokenReuses counts those that had). Requests must come
// in trace order: a block's first token is its rank among its siblings.
// First tokens are the ids 0 to the vocabulary's largest: a Hugging Face
// vocabulary's regular ids are contiguous from 0, its special ones after
// them, so every id below one its tokenizer gave for plain text is a
// regular id; the rest of a block is drawn from the vocabulary itself.
type TraceTokens struct {
	block int
	seed  uint64
	vocab []int
	first int // first-token ids: 0 to first-1
	// rank of every block seen (by chain key), and the number of
	// successors given a rank so far, by parent chain key.
	rank     map[uint64]int
	children map[uint64]int
	reuses   int
	n        uint64
}

// NewTraceTokens draws prompts of block-token blocks from vocab (distinct
// valid ids, sorted, non-empty: TraceVocab's), seeded by seed.
func NewTraceTokens(vocab []int, block int, seed uint64) *TraceTokens {
	return &TraceTokens{block: block, seed: seed, vocab: vocab, first: slices.Max(vocab) + 1, rank: map[uint64]int{}, children: map[uint64]int{}}
}

// Reuses is how many blocks so far began with a sibling's first token.
func (t *TraceTokens) Reuses() int { return t.reuses }

func (t *TraceTokens) nextRank(parent uint64) int {
	r := t.children[parent]
	t.children[parent] = r + 1
	if r >= t.first {
		t.reuses++
	}
	return r
}

// Append appends q's prompt (q.InputLength ids) to dst: Render of Plan.
func (t *TraceTokens) Append(dst []int, q *TraceRequest) []int {
	p := t.Plan(q)
	return t.Render(dst, &p)
}

// TracePrompt is one request's prompt as TraceTokens planned it: what
// Render needs to write its ids, at any time and in any order, in a few
// bytes a block where the ids take 8 a token.
type TracePrompt struct {
	hashIDs  []int64 // the full blocks', in order
	ranks    []int32 // each full block's first token
	tail     int     // tokens after the full blocks
	tailRank int     // the tail's first token
	n        uint64  // the request's number, from 1: the tail's stream
	length   int
}

// Len is the prompt's length in tokens.
func (p *TracePrompt) Len() int { return p.length }

// Plan takes q's place in the trace (requests in trace order: a block's
// first token is its rank among its siblings) and returns its prompt,
// which Render writes.
func (t *TraceTokens) Plan(q *TraceRequest) TracePrompt {
	n := fullBlocks(q, t.block)
	// A copy: a trace source reuses q.HashIDs for its next request.
	p := TracePrompt{hashIDs: slices.Clone(q.HashIDs[:n]), ranks: make([]int32, n), length: q.InputLength}
	key := uint64(0)
	for i := range n {
		child := chainKey(key, q.HashIDs[i])
		r, ok := t.rank[child]
		if !ok {
			r = t.nextRank(key)
			t.rank[child] = r
		}
		key = child
		p.ranks[i] = int32(r % t.first)
	}
	t.n++
	p.n = t.n
	if p.tail = q.InputLength - n*t.block; p.tail > 0 {
		p.tailRank = t.nextRank(key) % t.first
	}
	return p
}

// Render appends p's ids to dst. It reads nothing Plan changes: prompts
// may be rendered in any order, from any goroutine.
func (t *TraceTokens) Render(dst []int, p *TracePrompt) []int {
	dst = slices.Grow(dst, len(p.hashIDs)*t.block+p.tail)
	for i, h := range p.hashIDs {
		dst = append(dst, int(p.ranks[i]))
		rng := rand.New(rand.NewPCG(t.seed, uint64(h)))
		for range t.block - 1 {
			dst = append(dst, t.vocab[rng.IntN(len(t.vocab))])
		}
	}
	if p.tail > 0 {
		dst = append(dst, p.tailRank)
		rng := rand.New(rand.NewPCG(t.seed^0x7461696c, p.n))
		for range p.tail - 1 {
			dst = append(dst, t.vocab[rng.IntN(len(t.vocab))])
		}
	}
	return dst
}

// TraceVocabBytes is how much generated code text TraceVocab tokenizes.
const TraceVocabBytes = 1 << 20

// TraceVocab is the distinct ids, sorted, that the engine's tokenizer
// gives hone's generated code text (PrefixText of seed's eight sessions,
// TraceVocabBytes in all): valid ids of the served model without knowing
// its vocabulary size.
func TraceVocab(ctx context.Context, seed uint64, tokenize TokenizeFunc) ([]int, error) {
	seen := map[int]bool{}
	for s := range Sessions {
		ids, err := tokenize(ctx, PrefixText(seed, s, TraceVocabBytes/Sessions))
		if err != nil {
			return nil, fmt.Errorf("tokenize the vocabulary text: %w", err)
		}
		for _, id := range ids {
			if id < 0 {
				return nil, fmt.Errorf("tokenize the vocabulary text: negative token id %d", id)
			}
			seen[id] = true
		}
	}
	if len(seen) < 2 {
		return nil, fmt.Errorf("tokenize the vocabulary text: %d distinct ids, want at least 2", len(seen))
	}
	out := make([]int, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// RecordTrace turns a hone run record's requests into a trace: every
// level of every run in order, each level after the previous one's last
// arrival plus LevelGapMs, at the requests' scheduled times (model time).
// The seed workload is what makes its structure: a session's prefix
// is the same blocks in every request of the session within one level,
// and nothing else is shared (levels started cold; the rest of every
// prompt is the request's own). The block size returned is the largest
// power of two up to MooncakeBlockSize that divides the prefix, so the
// trace shares exactly the prefix tokens.
func RecordTrace(rec *schema.Record) ([]TraceRequest, int, error) {
	if rec.Workload.Kind == schema.WorkloadTrace {
		return nil, 0, fmt.Errorf("a record of a trace replay (trace sha256 %s): replay that trace itself", rec.Workload.Trace.SHA256)
	}
	prefix := rec.Workload.CachedTokens()
	block := MooncakeBlockSize
	for block > 1 && (prefix <= 0 || prefix%block != 0) {
		block /= 2
	}
	var out []TraceRequest
	offset, next := 0.0, int64(1)<<40
	level := int64(0)
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			last := 0.0
			for _, q := range l.Requests {
				if q.InputTokens < 1 {
					continue
				}
				tq := TraceRequest{TimestampMs: offset + q.ScheduledMs, InputLength: q.InputTokens, OutputLength: requestedOutput(rec, q)}
				shared := min(prefix, q.InputTokens) / block
				for j := range shared {
					tq.HashIDs = append(tq.HashIDs, (level*Sessions+int64(q.Session))<<20|int64(j))
				}
				for range (q.InputTokens+block-1)/block - shared {
					tq.HashIDs = append(tq.HashIDs, next)
					next++
				}
				out = append(out, tq)
				last = max(last, q.ScheduledMs)
			}
			level++
			offset += last + LevelGapMs
		}
	}
	if len(out) == 0 {
		return nil, 0, fmt.Errorf("the record holds no request to replay")
	}
	slices.SortStableFunc(out, func(a, b TraceRequest) int {
		switch {
		case a.TimestampMs < b.TimestampMs:
			return -1
		case a.TimestampMs > b.TimestampMs:
			return 1
		}
		return 0
	})
	return out, block, nil
}

// LevelGapMs separates a converted record's levels (RecordTrace), model
// time: long enough for a level's last requests to finish.
const LevelGapMs = 10000

// requestedOutput is what the record's workload asked of q: its requests
// ran with ignore_eos to exactly this many tokens (a failed request may
// record fewer).
func requestedOutput(rec *schema.Record, q schema.RequestRecord) int {
	w := rec.Workload
	if w.LengthRatio > 0 && w.LengthRatio < 1 && q.ID >= Sessions && q.Outcome == schema.OutcomeOK && q.OutputTokens > 0 {
		return q.OutputTokens
	}
	return max(w.OutputTokens, 1)
}
