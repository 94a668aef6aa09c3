package replay

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/hone-llm/hone/schema"
)

// PrefixGenerator names the recipe that turns a seed into session prefix
// text. Change it whenever the generated text changes, so records made with
// different text never compare as identical inputs.
const PrefixGenerator = "hone-code/v1"

// DefaultSeed is the workload seed when none is given.
const DefaultSeed = 1

// DefaultWorkload is the seed workload's public instance with the default seed.
func DefaultWorkload() schema.Workload {
	p := DefaultParams(1)
	return schema.Workload{Seed: DefaultSeed, Requests: p.Requests, InputTokens: p.InputTokens,
		UncachedTokens: p.UncachedTokens, OutputTokens: p.OutputTokens}
}

// ParamsOf is the schedule's shape at one offered rate.
func ParamsOf(w schema.Workload, qps float64) Params {
	return Params{Requests: w.Requests, InputTokens: w.InputTokens, UncachedTokens: w.UncachedTokens,
		OutputTokens: w.OutputTokens, OfferedQPS: qps, LengthRatio: w.LengthRatio, Seed: w.Seed}
}

// Prompts holds the tokenized session prefixes and draws each request's
// suffix. It is built once per run and shared by every level.
type Prompts struct {
	Workload schema.Workload
	Prefixes []schema.SessionPrefix
	// ids are each session's prefix ids (CachedTokens of them), by session.
	ids [][]int
	// vocab is every distinct id the prefixes tokenized to, sorted: suffix
	// ids are drawn from it, so they are valid ids of the served model's
	// tokenizer without knowing its vocabulary size.
	vocab []int
}

// TokenizeFunc turns text into the served model's token ids, without
// special tokens (vLLM: POST /tokenize with add_special_tokens false).
type TokenizeFunc func(ctx context.Context, text string) ([]int, error)

// BuildPrompts generates the eight session texts from w.Seed, tokenizes each
// once and cuts it to w.CachedTokens(). A text that tokenizes shorter than
// that is an error: the workload would silently change.
func BuildPrompts(ctx context.Context, w schema.Workload, tokenize TokenizeFunc) (*Prompts, error) {
	if err := ParamsOf(w, 1).Validate(); err != nil {
		return nil, err
	}
	want := w.CachedTokens()
	p := &Prompts{Workload: w}
	seen := map[int]bool{}
	for s := range Sessions {
		// Code runs 3-4 characters per BPE token; 8 per wanted token leaves
		// a wide margin for tokenizers with long tokens.
		text := PrefixText(w.Seed, s, 8*want+512)
		ids, err := tokenize(ctx, text)
		if err != nil {
			return nil, fmt.Errorf("tokenize session %d prefix: %w", s, err)
		}
		if len(ids) < want {
			return nil, fmt.Errorf("session %d prefix tokenized to %d tokens, fewer than the %d cached tokens the workload needs (generator %s, %d bytes of text)",
				s, len(ids), want, PrefixGenerator, len(text))
		}
		for _, id := range ids {
			if id < 0 {
				return nil, fmt.Errorf("tokenize session %d prefix: negative token id %d", s, id)
			}
			seen[id] = true
		}
		sum := sha256.Sum256([]byte(text))
		kept := ids[:want:want]
		p.Prefixes = append(p.Prefixes, schema.SessionPrefix{Session: s, TextBytes: len(text), TextSHA256: hex.EncodeToString(sum[:]),
			TextTokens: len(ids), PrefixSHA256: HashTokens(kept)})
		p.ids = append(p.ids, kept)
	}
	for id := range seen {
		p.vocab = append(p.vocab, id)
	}
	slices.Sort(p.vocab)
	return p, nil
}

// VocabSize is the number of distinct ids suffixes are drawn from.
func (p *Prompts) VocabSize() int { return len(p.vocab) }

// Prompt returns the token ids of request req at offered rate qps in run
// run (0-based): its session's prefix and UncachedTokens suffix ids drawn
// from a generator seeded by (seed, run, qps, id). The suffix differs
// between runs and levels so a repeated request never hits the prefix cache
// beyond its session prefix; it is the same for every config compared.
func (p *Prompts) Prompt(run int, qps float64, req Request) []int {
	return p.AppendPrompt(nil, run, qps, req)
}

// AppendPrompt appends Prompt(run, qps, req) to dst and returns the
// extended slice (for callers that want room after the prompt).
func (p *Prompts) AppendPrompt(dst []int, run int, qps float64, req Request) []int {
	prefix := p.ids[req.Session]
	out := slices.Grow(dst, len(prefix)+max(req.InputTokens-len(prefix), 0))
	return p.AppendSuffix(append(out, prefix...), run, qps, req)
}

// PrefixLen is the length in tokens of session's shared prefix.
func (p *Prompts) PrefixLen(session int) int { return len(p.ids[session]) }

// AppendSuffix appends the part of Prompt(run, qps, req) after its
// session's prefix: for a caller whose dst already ends with that prefix
// (a buffer reused for the session's next request).
func (p *Prompts) AppendSuffix(dst []int, run int, qps float64, req Request) []int {
	n := req.InputTokens - len(p.ids[req.Session])
	dst = slices.Grow(dst, max(n, 0))
	rng := rand.New(rand.NewPCG(p.Workload.Seed^uint64(run+1)*0x9E3779B97F4A7C15, math.Float64bits(qps)^uint64(req.ID)<<1))
	for range n {
		dst = append(dst, p.vocab[rng.IntN(len(p.vocab))])
	}
	return dst
}

// HashTokens is the hex SHA-256 of ids as little-endian uint32s: the
// fingerprint records keep of every prompt and output.
func HashTokens(ids []int) string {
	h := sha256.New()
	var b [4]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Word lists for the code generator. Realistic enough that a BPE tokenizer
// sees identifiers, keywords, comments and punctuation in natural ratios.
var (
	codeNouns = []string{"request", "buffer", "config", "session", "token", "cache", "block", "worker", "queue",
		"handler", "metric", "span", "batch", "engine", "router", "client", "stream", "chunk", "record", "level",
		"schedule", "prefix", "decoder", "encoder", "model", "tensor", "kernel", "device", "policy", "budget"}
	codeVerbs = []string{"parse", "load", "build", "flush", "merge", "split", "encode", "decode", "route", "schedule",
		"evict", "fetch", "resolve", "validate", "render", "compute", "drain", "collect", "attach", "release"}
	codeAdjs = []string{"pending", "cached", "active", "stale", "remote", "local", "partial", "ordered", "shared",
		"idle", "full", "empty", "next", "last", "first", "max", "min", "total"}
	codeTypes = []string{"int", "int64", "string", "bool", "float64", "[]byte", "time.Duration", "map[string]int",
		"[]int", "error"}
	codePkgs = []string{"fmt", "strings", "sort", "time", "errors", "context", "sync", "io", "bytes", "strconv"}
)

type codeGen struct {
	rng *rand.Rand
	b   strings.Builder
}

func (g *codeGen) pick(list []string) string { return list[g.rng.IntN(len(list))] }

func (g *codeGen) title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

// ident returns a camelCase identifier of one to three words.
func (g *codeGen) ident(exported bool) string {
	parts := []string{g.pick(codeAdjs), g.pick(codeNouns)}
	if g.rng.IntN(3) == 0 {
		parts = []string{g.pick(codeVerbs), g.pick(codeNouns)}
	}
	if g.rng.IntN(4) == 0 {
		parts = parts[1:]
	}
	s := parts[0]
	if exported {
		s = g.title(s)
	}
	for _, p := range parts[1:] {
		s += g.title(p)
	}
	return s
}

func (g *codeGen) sentence() string {
	n := 4 + g.rng.IntN(8)
	w := make([]string, n)
	for i := range w {
		switch g.rng.IntN(4) {
		case 0:
			w[i] = g.pick(codeVerbs) + "s"
		case 1:
			w[i] = g.pick(codeAdjs)
		default:
			w[i] = g.pick(codeNouns)
		}
	}
	w = append([]string{"the"}, w...)
	return strings.Join(w, " ")
}

func (g *codeGen) printf(format string, args ...any) { fmt.Fprintf(&g.b, format, args...) }

// PrefixText is session s's prefix text for seed: a deterministic Go-like
// source file of at least minBytes bytes whose first line names the
// session, so no two sessions share a cacheable block.
func PrefixText(seed uint64, session, minBytes int) string {
	g := &codeGen{rng: rand.New(rand.NewPCG(seed, uint64(session)+0x5e55))}
	pkg := g.pick(codeNouns)
	g.printf("// File internal/%s/%s_%d.go, session %d of workload seed %d.\n", pkg, g.pick(codeVerbs), session, session, seed)
	g.printf("// Package %s %s.\npackage %s\n\nimport (\n", pkg, g.sentence(), pkg)
	for _, p := range codePkgs[:3+g.rng.IntN(5)] {
		g.printf("\t%q\n", p)
	}
	g.printf(")\n")
	for g.b.Len() < minBytes {
		typ := g.ident(true)
		g.printf("\n// %s holds %s.\ntype %s struct {\n", typ, g.sentence(), typ)
		for range 2 + g.rng.IntN(5) {
			g.printf("\t%s %s // %s\n", g.ident(true), g.pick(codeTypes), g.sentence())
		}
		g.printf("}\n")
		for range 1 + g.rng.IntN(3) {
			g.function(typ)
		}
	}
	return g.b.String()
}

func (g *codeGen) function(recv string) {
	name, arg, res := g.ident(true), g.ident(false), g.ident(false)
	g.printf("\n// %s %s.\n// It returns an error when %s.\n", name, g.sentence(), g.sentence())
	g.printf("func (x *%s) %s(ctx context.Context, %s []%s) (%s int, err error) {\n", recv, name, arg, g.pick(codeTypes), res)
	g.printf("\tif len(%s) == 0 {\n\t\treturn 0, fmt.Errorf(\"%s: no %s\")\n\t}\n", arg, strings.ToLower(name), g.pick(codeNouns))
	for range 1 + g.rng.IntN(3) {
		switch g.rng.IntN(4) {
		case 0:
			g.printf("\tfor i := range %s {\n\t\t%s += x.%s(i) // %s\n\t}\n", arg, res, g.ident(false), g.sentence())
		case 1:
			v := g.ident(false)
			g.printf("\t%s, err := x.%s(ctx, %d)\n\tif err != nil {\n\t\treturn %s, fmt.Errorf(\"%s %s: %%w\", err)\n\t}\n\t%s += len(%s)\n",
				v, g.ident(false), g.rng.IntN(4096), res, g.pick(codeVerbs), g.pick(codeNouns), res, v)
		case 2:
			g.printf("\tswitch %s %% %d {\n\tcase 0:\n\t\t%s = %d\n\tdefault:\n\t\t%s--\n\t}\n", res, 2+g.rng.IntN(30), res, g.rng.IntN(1000), res)
		default:
			g.printf("\t// %s.\n\tx.%s = append(x.%s[:0], %s...)\n", g.sentence(), g.ident(true), g.ident(true), arg)
		}
	}
	g.printf("\treturn %s, nil\n}\n", res)
}
