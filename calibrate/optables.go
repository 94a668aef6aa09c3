package calibrate

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/parquet-go/parquet-go"

	"github.com/hone-llm/hone/engine"
)

// Per-operation tables (hone profile derive): measured latencies of one
// GPU's GEMMs and attention kernels under vLLM, in the layout of
// ai-dynamo/aiconfigurator's systems/data/<gpu>/:
//
//	gemm/vllm/<version>/gemm_perf.parquet                      gemm_dtype, m, n, k, latency (ms)
//	attention/vllm/<version>/context_attention_perf.parquet    batch_size, isl, num_heads, num_key_value_heads, head_dim, kv_cache_dtype, window_size, latency
//	attention/vllm/<version>/generation_attention_perf.parquet the same, step = the KV length
//	comm/vllm/<version>/custom_allreduce_perf.parquet          (ReadAllReduceTable)
//
// Context attention is measured for fresh prompts only; a chunk on cached
// context is costed as the fresh prompt of its full length scaled by its
// share of the attention pairs.

// OpTables are one GPU's per-operation tables.
type OpTables struct {
	Dir     string
	Version string
	gemm    map[string]map[[2]int64][]mPoint // dtype → (n, k) → points by m
	ctx     map[[3]int64][]attnPoint         // (heads, kv heads, head dim) → (batch, isl) points
	ctxFP8  map[[3]int64][]attnPoint         // the same with an fp8 KV cache (empty where the tables have none)
	gen     map[[3]int64][]attnPoint         // (heads, kv heads, head dim) → (batch, kv length) points
	genFP8  map[[3]int64][]attnPoint         // the same with an fp8 KV cache (empty where the tables have none)
}

type mPoint struct{ m, ms float64 }

type attnPoint struct{ b, l, ms float64 }

type gemmRow struct {
	Dtype   string  `parquet:"gemm_dtype,optional"`
	M       int64   `parquet:"m,optional"`
	N       int64   `parquet:"n,optional"`
	K       int64   `parquet:"k,optional"`
	Latency float64 `parquet:"latency,optional"`
}

type attnRow struct {
	Batch   int64   `parquet:"batch_size,optional"`
	ISL     int64   `parquet:"isl,optional"`
	Heads   int64   `parquet:"num_heads,optional"`
	KVHeads int64   `parquet:"num_key_value_heads,optional"`
	HeadDim int64   `parquet:"head_dim,optional"`
	KVDtype string  `parquet:"kv_cache_dtype,optional"`
	Step    int64   `parquet:"step,optional"`
	Window  int64   `parquet:"window_size,optional"`
	Latency float64 `parquet:"latency,optional"`
}

// readParquet reads every row of a parquet file into T.
func readParquet[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := parquet.NewGenericReader[T](pf)
	defer r.Close()
	rows := make([]T, pf.NumRows())
	n, err := r.Read(rows)
	if err != nil && n < len(rows) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows[:n], nil
}

// ReadOpTables reads a GPU's tables for vLLM version from dir (the GPU's
// systems/data folder).
func ReadOpTables(dir, version string) (*OpTables, error) {
	t := &OpTables{Dir: dir, Version: version, gemm: map[string]map[[2]int64][]mPoint{},
		ctx: map[[3]int64][]attnPoint{}, gen: map[[3]int64][]attnPoint{},
		ctxFP8: map[[3]int64][]attnPoint{}, genFP8: map[[3]int64][]attnPoint{}}
	gp := filepath.Join(dir, "gemm", engine.VLLM, version, "gemm_perf.parquet")
	grows, err := readParquet[gemmRow](gp)
	if err != nil {
		return nil, fmt.Errorf("per-operation tables: %w", err)
	}
	for i, r := range grows {
		if r.M <= 0 || r.N <= 0 || r.K <= 0 || !(r.Latency > 0) || math.IsInf(r.Latency, 0) {
			return nil, fmt.Errorf("%s: row %d: want m, n, k > 0 and latency > 0, got %d, %d, %d, %v", gp, i, r.M, r.N, r.K, r.Latency)
		}
		if t.gemm[r.Dtype] == nil {
			t.gemm[r.Dtype] = map[[2]int64][]mPoint{}
		}
		key := [2]int64{r.N, r.K}
		t.gemm[r.Dtype][key] = append(t.gemm[r.Dtype][key], mPoint{float64(r.M), r.Latency})
	}
	for _, byNK := range t.gemm {
		for k, pts := range byNK {
			byNK[k] = dedupM(pts)
		}
	}
	for _, a := range []struct {
		file     string
		dst, fp8 map[[3]int64][]attnPoint
		gen      bool
	}{{"context_attention_perf.parquet", t.ctx, t.ctxFP8, false}, {"generation_attention_perf.parquet", t.gen, t.genFP8, true}} {
		p := filepath.Join(dir, "attention", engine.VLLM, version, a.file)
		rows, err := readParquet[attnRow](p)
		if err != nil {
			return nil, fmt.Errorf("per-operation tables: %w", err)
		}
		for i, r := range rows {
			dst := a.dst
			if r.KVDtype == "fp8" {
				dst = a.fp8
			} else if r.KVDtype != "bfloat16" {
				continue
			}
			if r.Window != 0 {
				continue
			}
			if r.Batch <= 0 || !(r.Latency > 0) || math.IsInf(r.Latency, 0) {
				return nil, fmt.Errorf("%s: row %d: want batch_size > 0 and latency > 0, got %d, %v", p, i, r.Batch, r.Latency)
			}
			l := r.ISL
			if a.gen {
				l = r.Step
			}
			key := [3]int64{r.Heads, r.KVHeads, r.HeadDim}
			dst[key] = append(dst[key], attnPoint{float64(r.Batch), float64(l), r.Latency})
		}
		if len(a.dst) == 0 {
			return nil, fmt.Errorf("%s: no bfloat16-KV rows without a window", p)
		}
	}
	return t, nil
}

// dedupM sorts by m and keeps the median latency of repeated m.
func dedupM(pts []mPoint) []mPoint {
	sort.Slice(pts, func(i, j int) bool { return pts[i].m < pts[j].m || pts[i].m == pts[j].m && pts[i].ms < pts[j].ms })
	var out []mPoint
	for i := 0; i < len(pts); {
		j := i
		for j < len(pts) && pts[j].m == pts[i].m {
			j++
		}
		out = append(out, pts[(i+j-1)/2])
		i = j
	}
	return out
}

// interp is linear interpolation of y at x over points sorted by x,
// extended beyond the last point proportionally (x·y_last/x_last: work
// grows with it) and held at the first below it.
func interp(xs, ys []float64, x float64) float64 {
	i := sort.SearchFloat64s(xs, x)
	switch {
	case i < len(xs) && xs[i] == x:
		return ys[i]
	case i == 0:
		return ys[0]
	case i == len(xs):
		return ys[len(ys)-1] * x / xs[len(xs)-1]
	}
	return ys[i-1] + (ys[i]-ys[i-1])*(x-xs[i-1])/(xs[i]-xs[i-1])
}

// GEMMMs is one GEMM of an m×k by k×n product in dtype: the measured shape
// nearest in n and k (log distance), scaled by n·k, interpolated in m.
func (t *OpTables) GEMMMs(dtype string, m, n, k float64) (float64, error) {
	byNK := t.gemm[dtype]
	if len(byNK) == 0 {
		return 0, fmt.Errorf("%s: no %s GEMMs in the table", t.Dir, dtype)
	}
	var best [2]int64
	bd := math.Inf(1)
	for key := range byNK {
		d := math.Abs(math.Log(float64(key[0])/n)) + math.Abs(math.Log(float64(key[1])/k))
		if d < bd || d == bd && (key[0] < best[0] || key[0] == best[0] && key[1] < best[1]) {
			best, bd = key, d
		}
	}
	pts := byNK[best]
	xs, ys := make([]float64, len(pts)), make([]float64, len(pts))
	for i, p := range pts {
		xs[i], ys[i] = p.m, p.ms
	}
	return interp(xs, ys, m) * n * k / (float64(best[0]) * float64(best[1])), nil
}

// attnKey is the measured head shape nearest to (heads, kv heads, head
// dim): the same head dim and KV heads where there are, heads nearest; the
// latency is scaled by heads/heads'.
func attnKey(m map[[3]int64][]attnPoint, heads, kv, hd int64) ([3]int64, float64, bool) {
	var best [3]int64
	bd := math.Inf(1)
	for key := range m {
		d := math.Abs(math.Log(float64(key[0])/float64(heads))) + 4*math.Abs(math.Log(float64(key[1])/float64(kv))) + 16*math.Abs(math.Log(float64(key[2])/float64(hd)))
		if d < bd || d == bd && (key[0] < best[0] || key[0] == best[0] && (key[1] < best[1] || key[1] == best[1] && key[2] < best[2])) {
			best, bd = key, d
		}
	}
	if math.IsInf(bd, 1) {
		return best, 0, false
	}
	return best, float64(heads) / float64(best[0]), true
}

// grid2 interpolates ms over (batch, length) points: linear in length at
// the two measured batches around b, then linear in batch.
func grid2(pts []attnPoint, b, l float64) float64 {
	byB, bs := groupBy(pts, func(p attnPoint) float64 { return p.b })
	sort.Float64s(bs)
	at := func(bb float64) float64 {
		ps := byB[bb]
		sort.Slice(ps, func(i, j int) bool { return ps[i].l < ps[j].l })
		xs, ys := make([]float64, 0, len(ps)), make([]float64, 0, len(ps))
		for _, p := range ps {
			if len(xs) > 0 && xs[len(xs)-1] == p.l {
				ys[len(ys)-1] = math.Max(ys[len(ys)-1], p.ms)
				continue
			}
			xs, ys = append(xs, p.l), append(ys, p.ms)
		}
		return interp(xs, ys, l)
	}
	ys := make([]float64, len(bs))
	for i, bb := range bs {
		ys[i] = at(bb)
	}
	return interp(bs, ys, b)
}

// ContextAttnMs is prefill attention of one prompt chunk of n tokens on c
// cached, per layer, at the given per-rank head shape.
func (t *OpTables) ContextAttnMs(n, c float64, heads, kv, hd int64) (float64, error) {
	return contextAttnMs(t.ctx, t.Dir, "", n, c, heads, kv, hd)
}

// ContextAttnMsFP8 is ContextAttnMs with an fp8 KV cache, from the
// tables' fp8-KV rows.
func (t *OpTables) ContextAttnMsFP8(n, c float64, heads, kv, hd int64) (float64, error) {
	return contextAttnMs(t.ctxFP8, t.Dir, "fp8-KV ", n, c, heads, kv, hd)
}

func contextAttnMs(rows map[[3]int64][]attnPoint, dir, what string, n, c float64, heads, kv, hd int64) (float64, error) {
	key, scale, ok := attnKey(rows, heads, kv, hd)
	if !ok {
		return 0, fmt.Errorf("%s: no %scontext attention rows", dir, what)
	}
	full := n + c
	ms := grid2(rows[key], 1, full) * scale
	pairs := func(n, c float64) float64 { return n*c + n*(n+1)/2 }
	return ms * pairs(n, c) / pairs(full, 0), nil
}

// GenAttnMs is decode attention of b sequences of kvLen KV tokens each,
// per layer, at the given per-rank head shape.
func (t *OpTables) GenAttnMs(b, kvLen float64, heads, kv, hd int64) (float64, error) {
	return genAttnMs(t.gen, t.Dir, "", b, kvLen, heads, kv, hd)
}

// HasFP8KV says whether the tables measured attention (context and
// decode) with an fp8 KV cache.
func (t *OpTables) HasFP8KV() bool { return len(t.genFP8) > 0 && len(t.ctxFP8) > 0 }

// GenAttnMsFP8 is GenAttnMs with an fp8 KV cache (vLLM's --kv-cache-dtype
// fp8), from the tables' fp8-KV rows.
func (t *OpTables) GenAttnMsFP8(b, kvLen float64, heads, kv, hd int64) (float64, error) {
	return genAttnMs(t.genFP8, t.Dir, "fp8-KV ", b, kvLen, heads, kv, hd)
}

func genAttnMs(rows map[[3]int64][]attnPoint, dir, what string, b, kvLen float64, heads, kv, hd int64) (float64, error) {
	key, scale, ok := attnKey(rows, heads, kv, hd)
	if !ok {
		return 0, fmt.Errorf("%s: no %sgeneration attention rows", dir, what)
	}
	return grid2(rows[key], b, kvLen) * scale, nil
}

// groupBy groups xs by key, the keys in the order they first appear.
func groupBy[T any, K comparable](xs []T, key func(T) K) (map[K][]T, []K) {
	out := map[K][]T{}
	var keys []K
	for _, x := range xs {
		k := key(x)
		if _, ok := out[k]; !ok {
			keys = append(keys, k)
		}
		out[k] = append(out[k], x)
	}
	return out, keys
}
