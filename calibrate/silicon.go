package calibrate

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// SiliconRow is one measured deployment of a silicon file (aiconfigurator's
// systems/silicon_sample.csv layout): a model served on a GPU at one
// parallelism under a closed loop of Concurrency clients with fixed input
// and output lengths, and its measured TTFT and TPOT.
type SiliconRow struct {
	Line        int // in the file, the header being line 1
	ID          string
	Backend     string
	Version     string
	Model       string // Hugging Face id (model_path)
	System      string // GPU name as aiconfigurator spells it (h100_sxm)
	Precision   string // "" (the model's own dtype), bf16, fp8, ...
	Mode        string // agg or disagg
	ISL, OSL    int
	Concurrency int // clients in flight: silicon_concurrency in the provenance, else batch_size
	TP, PP      int
	// Prefill and Decode are a disaggregated row's worker pools.
	Prefill, Decode SiliconPool
	TTFTMs          float64
	TPOTMs          float64
	Source          string // silicon_data_source
}

// SiliconPool is a disaggregated row's pool: Workers engines of TP
// GPUs each, Batch the sequences per worker it was sized for.
type SiliconPool struct {
	Workers int `json:"workers"`
	TP      int `json:"tp"`
	Batch   int `json:"batch"`
}

// siliconColumns are the columns ReadSilicon needs (the prefill_ and
// decode_ worker columns are read where the file has them).
var siliconColumns = []string{"id", "silicon_data_source", "backend", "backend_version", "model_path", "system", "precision", "mode",
	"isl", "osl", "batch_size", "tp_size", "pp_size", "silicon_ttft_ms", "silicon_tpot_ms"}

var concurrencyRe = regexp.MustCompile(`(?:^|;\s*)silicon_concurrency=(\d+)`)

// ReadSilicon reads a silicon file. A missing column, a field that is
// not a number where one is needed, or a latency that is not positive is
// an error naming the file, the line and the column.
func ReadSilicon(path string) ([]SiliconRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(io.LimitReader(f, 256<<20))
	r.FieldsPerRecord = -1
	head, col, err := siliconHeader(r, path)
	if err != nil {
		return nil, err
	}
	var rows []SiliconRow
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, line, err)
		}
		if len(rec) != len(head) {
			return nil, fmt.Errorf("%s: line %d: %d fields, the header has %d", path, line, len(rec), len(head))
		}
		row, err := siliconRecord{rec: rec, col: col, path: path, line: line}.row()
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no rows after the header", path)
	}
	return rows, nil
}

// siliconHeader reads a silicon file's header and returns it and each
// column's index; every one of siliconColumns must be there.
func siliconHeader(r *csv.Reader, path string) ([]string, map[string]int, error) {
	head, err := r.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: line 1 (header): %w", path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	for _, c := range siliconColumns {
		if _, ok := col[c]; !ok {
			return nil, nil, fmt.Errorf("%s: line 1 (header): missing column %q (want %s)", path, c, strings.Join(siliconColumns, ", "))
		}
	}
	return head, col, nil
}

// siliconRecord is one line of a silicon file, with its columns' indexes.
type siliconRecord struct {
	rec  []string
	col  map[string]int
	path string
	line int
}

// get is column c's field, trimmed; "" where the file has no such column.
func (s siliconRecord) get(c string) string {
	if i, ok := s.col[c]; ok {
		return strings.TrimSpace(s.rec[i])
	}
	return ""
}

// bad says column c is not what is wanted.
func (s siliconRecord) bad(c, want string) error {
	return fmt.Errorf("%s: line %d: column %s: %q: want %s", s.path, s.line, c, s.get(c), want)
}

// num is column c as a whole number >= 0; an optional column may be empty
// (0).
func (s siliconRecord) num(c string, optional bool) (int, error) {
	v := s.get(c)
	if v == "" && optional {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, s.bad(c, "a whole number >= 0")
	}
	return n, nil
}

// ms is column c as a latency in ms > 0.
func (s siliconRecord) ms(c string) (float64, error) {
	v, err := strconv.ParseFloat(s.get(c), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return 0, s.bad(c, "a latency in ms > 0")
	}
	return v, nil
}

// row parses the record; every bad number is named, joined in one error.
func (s siliconRecord) row() (SiliconRow, error) {
	get := s.get
	row := SiliconRow{Line: s.line, ID: get("id"), Backend: get("backend"), Version: get("backend_version"), Model: get("model_path"),
		System: get("system"), Precision: get("precision"), Mode: get("mode"), Source: get("silicon_data_source")}
	if row.ID == "" {
		return row, s.bad("id", "a row id")
	}
	var errs []error
	var e error
	row.ISL, e = s.num("isl", false)
	errs = append(errs, e)
	row.OSL, e = s.num("osl", false)
	errs = append(errs, e)
	batch, e := s.num("batch_size", true)
	errs = append(errs, e)
	row.TP, e = s.num("tp_size", true)
	errs = append(errs, e)
	row.PP, e = s.num("pp_size", true)
	errs = append(errs, e)
	for _, p := range []struct {
		pool *SiliconPool
		side string
	}{{&row.Prefill, "prefill"}, {&row.Decode, "decode"}} {
		p.pool.Workers, e = s.num(p.side+"_num_workers", true)
		errs = append(errs, e)
		p.pool.TP, e = s.num(p.side+"_tp_size", true)
		errs = append(errs, e)
		p.pool.Batch, e = s.num(p.side+"_batch_size", true)
		errs = append(errs, e)
	}
	row.TTFTMs, e = s.ms("silicon_ttft_ms")
	errs = append(errs, e)
	row.TPOTMs, e = s.ms("silicon_tpot_ms")
	errs = append(errs, e)
	if err := errors.Join(errs...); err != nil {
		return row, err
	}
	return row, s.concurrency(&row, batch)
}

// concurrency sets row's clients in flight: batch_size, the decode pool's
// sequences for a disaggregated row without one, or silicon_concurrency=
// in the provenance where it is given.
func (s siliconRecord) concurrency(row *SiliconRow, batch int) error {
	row.Concurrency = batch
	if row.Mode == "disagg" && batch == 0 {
		// aiconfigurator's batch sizes are per worker: the decode
		// pool holds the clients.
		row.Concurrency = row.Decode.Batch * row.Decode.Workers
	}
	if m := concurrencyRe.FindStringSubmatch(row.Source); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil || n > 1<<20 {
			return s.bad("silicon_data_source", "silicon_concurrency= a number of clients up to 1048576")
		}
		row.Concurrency = n
	}
	return nil
}

// SiliconConfig is how PredictSilicon predicts rows.
type SiliconConfig struct {
	// Profiles are the candidates a row's profile is chosen from (the
	// built-ins and --profiles).
	Profiles []*emulator.Profile
	// RequestsPerClient: each closed loop sends Concurrency × this many
	// measured requests (after the 8 warm-ups). 0: 10, as the
	// InferenceX/vllm bench serve runs behind the H100 rows did.
	RequestsPerClient int
	// LengthRatio draws each request's ISL and OSL from [ratio × L, L]
	// (replay.Workload.LengthRatio); 0: exactly ISL and OSL.
	LengthRatio float64
	// KVCacheDType is every row's KV cache dtype (vLLM's
	// --kv-cache-dtype); "": the model's.
	KVCacheDType string
	// Workers predicts rows in parallel; 0: GOMAXPROCS.
	Workers int
}

// SiliconStat is one figure of one row.
type SiliconStat struct {
	Measured  float64 `json:"measured"`
	Predicted float64 `json:"predicted"`
	APE       float64 `json:"ape"`
}

// SiliconPrediction is one predicted row.
type SiliconPrediction struct {
	ID        string `json:"id"`
	Line      int    `json:"line"`
	Model     string `json:"model"`
	System    string `json:"system"`
	Precision string `json:"precision"`
	Mode      string `json:"mode"`
	TP        int    `json:"tp"`
	// Prefill and Decode: a disaggregated row's pools.
	Prefill       *SiliconPool `json:"prefill,omitempty"`
	Decode        *SiliconPool `json:"decode,omitempty"`
	ISL           int          `json:"isl"`
	OSL           int          `json:"osl"`
	Concurrency   int          `json:"concurrency"`
	Profile       string       `json:"profile"`
	ProfileSource string       `json:"profile_source"`
	TTFT          SiliconStat  `json:"ttft_ms"`
	TPOT          SiliconStat  `json:"tpot_ms"`
}

// SiliconSkip is a row not predicted, and why.
type SiliconSkip struct {
	ID     string `json:"id"`
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// APESummary is the median and p90 of absolute percentage errors.
type APESummary struct {
	MedianAPE float64 `json:"median_ape"`
	P90APE    float64 `json:"p90_ape"`
}

// SiliconSummary summarises a result.
type SiliconSummary struct {
	Rows      int        `json:"rows"`
	Predicted int        `json:"predicted"`
	TTFT      APESummary `json:"ttft"`
	TPOT      APESummary `json:"tpot"`
}

// SiliconResult is hone validate silicon's JSON.
type SiliconResult struct {
	Definitions  string              `json:"definitions"`
	LengthRatio  float64             `json:"length_ratio"`
	KVCacheDType string              `json:"kv_cache_dtype,omitempty"`
	Rows         []SiliconPrediction `json:"rows"`
	Skipped      []SiliconSkip       `json:"skipped"`
	Summary      SiliconSummary      `json:"summary"`
	// Breakdown is the errors by --by's keys (GroupSilicon); absent
	// without --by.
	Breakdown []SiliconGroup `json:"breakdown,omitempty"`
}

// SiliconDefinitions states what is compared with what.
const SiliconDefinitions = "measured: the row's silicon_ttft_ms and silicon_tpot_ms (client-side, vllm bench serve style: TTFT from send to first token, " +
	"TPOT = (latency - TTFT)/(output tokens - 1) per request, averaged over requests); predicted: hone predict --concurrency N in virtual time " +
	"(the emulator's vLLM scheduler with the row's profile), N×requests_per_client measured requests of ISL/OSL tokens (or drawn from [length_ratio × L, L]) with no shared prefix, " +
	"the mean over requests of TTFT from send and of TPOT excluding the first token; APE = |predicted − measured| / measured, %"

// PredictSilicon predicts every row it can and says why it skips the rest.
func PredictSilicon(rows []SiliconRow, cfg SiliconConfig) *SiliconResult {
	if cfg.RequestsPerClient <= 0 {
		cfg.RequestsPerClient = 10
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type out struct {
		pred *SiliconPrediction
		skip string
	}
	outs := make([]out, len(rows))
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p, skip := predictSiliconRow(rows[i], cfg)
				outs[i] = out{p, skip}
			}
		}()
	}
	for i := range rows {
		next <- i
	}
	close(next)
	wg.Wait()
	res := &SiliconResult{Definitions: SiliconDefinitions, LengthRatio: cfg.LengthRatio, KVCacheDType: cfg.KVCacheDType, Rows: []SiliconPrediction{}, Skipped: []SiliconSkip{}}
	var ttft, tpot []float64
	for i, o := range outs {
		if o.pred == nil {
			res.Skipped = append(res.Skipped, SiliconSkip{ID: rows[i].ID, Line: rows[i].Line, Reason: o.skip})
			continue
		}
		res.Rows = append(res.Rows, *o.pred)
		ttft = append(ttft, o.pred.TTFT.APE)
		tpot = append(tpot, o.pred.TPOT.APE)
	}
	res.Summary = SiliconSummary{Rows: len(rows), Predicted: len(res.Rows), TTFT: apeSummary(ttft), TPOT: apeSummary(tpot)}
	return res
}

func apeSummary(apes []float64) APESummary {
	if len(apes) == 0 {
		return APESummary{}
	}
	s := slices.Clone(apes)
	slices.Sort(s)
	return APESummary{MedianAPE: round4(slo.Median(s)), P90APE: round4(slo.NearestRank(s, 90))}
}

// modelKey is a model's name without its organisation and the suffixes
// that name a variant of the same architecture (Instruct, FP8).
func modelKey(name string) string {
	n := strings.ToLower(name)
	if i := strings.LastIndex(n, "/"); i >= 0 {
		n = n[i+1:]
	}
	for _, suf := range []string{"-fp8", "-instruct"} {
		n = strings.TrimSuffix(n, suf)
	}
	return n
}

// weightDtype is a row's weight precision as a profile states it: 1 byte
// (fp8) or 2 (bf16, and a row that states none: the model's own dtype).
func weightDtype(precision string) (int, bool) {
	switch strings.ToLower(precision) {
	case "", "bf16", "fp16", "bfloat16":
		return 2, true
	case "fp8":
		return 1, true
	}
	return 0, false
}

// siliconProfile picks the row's profile: the same model (modelKey), GPU
// and weight precision, with step costs that hold at the row's TP;
// grounded ones (fitted, then derived from tables) before the rest.
func siliconProfile(row SiliconRow, tps []int, cands []*emulator.Profile) (*emulator.Profile, string) {
	gpu, err := emulator.LookupGPU(row.System)
	if err != nil {
		return nil, fmt.Sprintf("GPU %q: %v", row.System, err)
	}
	wb, ok := weightDtype(row.Precision)
	if !ok {
		return nil, fmt.Sprintf("precision %q: hone's profiles are bf16 or fp8", row.Precision)
	}
	var match []*emulator.Profile
	sameModel, sameDtype := false, false
	for _, p := range cands {
		if p.Steps == nil || modelKey(p.Model.Name) != modelKey(row.Model) || p.GPU.Name != gpu.Name {
			continue
		}
		sameModel = true
		if p.Model.WeightElemBytes() != wb {
			continue
		}
		sameDtype = true
		if holdsAll(p, tps) {
			match = append(match, p)
		}
	}
	if len(match) == 0 {
		if sameDtype {
			return nil, fmt.Sprintf("no profile of %s on %s with %s weights holds at TP %v", row.Model, row.System, cmp.Or(row.Precision, "bf16"), tps)
		}
		if sameModel {
			return nil, fmt.Sprintf("no profile of %s on %s with %s weights", row.Model, row.System, cmp.Or(row.Precision, "bf16"))
		}
		return nil, fmt.Sprintf("no profile of %s on %s (hone's step-cost profiles model dense transformers: make one with hone profile derive or hone calibrate --steps)", row.Model, row.System)
	}
	rank := map[string]int{emulator.SourceFittedSteps: 0, emulator.SourceDerivedTable: 1}
	slices.SortStableFunc(match, func(a, b *emulator.Profile) int {
		ra, ok := rank[a.SourceKind()]
		if !ok {
			ra = 9
		}
		rb, ok := rank[b.SourceKind()]
		if !ok {
			rb = 9
		}
		return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(a.Name, b.Name))
	})
	return match[0], ""
}

// predictSiliconRow predicts one row, or says why not.
func predictSiliconRow(row SiliconRow, cfg SiliconConfig) (*SiliconPrediction, string) {
	switch {
	case !strings.EqualFold(row.Backend, engine.VLLM):
		return nil, fmt.Sprintf("backend %q: hone's engine model is vLLM's", row.Backend)
	case row.Mode != "agg" && row.Mode != "disagg":
		return nil, fmt.Sprintf("mode %q: want agg or disagg", row.Mode)
	case row.PP > 1:
		return nil, fmt.Sprintf("pipeline parallel %d: hone models tensor parallelism only", row.PP)
	case row.Mode == "agg" && (row.TP < 1 || row.TP > 64):
		return nil, fmt.Sprintf("tp_size %d: want 1..64", row.TP)
	case row.Mode == "disagg" && !(row.Prefill.usable() && row.Decode.usable()):
		return nil, fmt.Sprintf("disaggregated worker pools prefill %d×TP%d, decode %d×TP%d: want 1..64 workers of TP 1..64 each", row.Prefill.Workers, row.Prefill.TP, row.Decode.Workers, row.Decode.TP)
	case row.Concurrency < 1 || row.Concurrency > 1<<16:
		return nil, fmt.Sprintf("concurrency %d (silicon_concurrency, batch_size, or a disaggregated row's decode batch × workers): want 1..65536", row.Concurrency)
	case row.ISL < 1 || row.OSL < 1:
		return nil, "isl and osl must be at least 1"
	}
	tps := []int{row.TP}
	gpus := row.TP
	topo := fmt.Sprintf("{kind: colocated, replicas: 1, tp: %d}", row.TP)
	kv := ""
	if row.Mode == "disagg" {
		tps = []int{row.Prefill.TP, row.Decode.TP}
		gpus = row.Prefill.Workers*row.Prefill.TP + row.Decode.Workers*row.Decode.TP
		topo = fmt.Sprintf("{kind: disaggregated, prefill: {replicas: %d, tp: %d}, decode: {replicas: %d, tp: %d}}", row.Prefill.Workers, row.Prefill.TP, row.Decode.Workers, row.Decode.TP)
		kv = "kv_connector: {name: NixlConnector, side_channel_port: 18420}\n"
	}
	prof, why := siliconProfile(row, tps, cfg.Profiles)
	if prof == nil {
		return nil, why
	}
	maxLen := (row.ISL + row.OSL + 1023) / 1024 * 1024
	if cfg.KVCacheDType != "" {
		kv += fmt.Sprintf("precision: {kv_cache_dtype: %s}\n", cfg.KVCacheDType)
	}
	y := fmt.Sprintf(`name: silicon-%d
engine: emulator
model: {id: %q, revision: silicon}
gpus: {budget: %d}
topology: %s
%sknobs: {max_model_len: %d}
routing: {policy: round_robin}
network: {proxy_port: 18400, worker_port: 18410}
emulator: {profile: %s, time_scale: 1}
`, row.Line, prof.Model.Name, gpus, topo, kv, maxLen, specProfileName(prof))
	spec, err := deploy.ParseSpec([]byte(y))
	if err != nil {
		return nil, fmt.Sprintf("cannot make its deployment: %v", err)
	}
	w := schema.Workload{Seed: replay.DefaultSeed, Requests: replay.Sessions + row.Concurrency*cfg.RequestsPerClient,
		InputTokens: row.ISL, UncachedTokens: row.ISL, OutputTokens: row.OSL, LengthRatio: cfg.LengthRatio}
	rec, err := predict.Run(spec, predict.Options{Profile: prof, Workload: w, Concurrency: []int{row.Concurrency},
		SLO: slo.Default, KeepRequests: true})
	if err != nil {
		return nil, fmt.Sprintf("profile %s cannot serve it: %v", prof.Name, err)
	}
	var ttft, tpot float64
	n := 0
	for _, q := range rec.Runs[0].Levels[0].Requests {
		if q.ID < rec.Warmups() || q.TTFTMs == nil || q.TPOTMs == nil {
			continue
		}
		ttft += *q.TTFTMs
		tpot += *q.TPOTMs
		n++
	}
	if n == 0 {
		return nil, fmt.Sprintf("profile %s: no measured request completed", prof.Name)
	}
	stat := func(measured, predicted float64) SiliconStat {
		return SiliconStat{Measured: measured, Predicted: round4(predicted), APE: round4(100 * math.Abs(predicted-measured) / measured)}
	}
	var pre, dec *SiliconPool
	if row.Mode == "disagg" {
		pre, dec = &row.Prefill, &row.Decode
	}
	return &SiliconPrediction{ID: row.ID, Line: row.Line, Model: row.Model, System: row.System, Precision: row.Precision, Mode: row.Mode, TP: row.TP,
		Prefill: pre, Decode: dec,
		ISL: row.ISL, OSL: row.OSL, Concurrency: row.Concurrency, Profile: prof.Name, ProfileSource: prof.SourceKind(),
		TTFT: stat(row.TTFTMs, ttft/float64(n)), TPOT: stat(row.TPOTMs, tpot/float64(n))}, ""
}

// specProfileName is what the row's spec names as its profile: the
// profile's own name when it is a built-in; the prediction runs on the
// profile itself either way (predict.Options.Profile).
func specProfileName(p *emulator.Profile) string {
	if slices.Contains(emulator.ProfileNames(), p.Name) {
		return p.Name
	}
	return "exercise"
}

func (p SiliconPool) usable() bool {
	return p.Workers >= 1 && p.Workers <= 64 && p.TP >= 1 && p.TP <= 64
}

// holdsAll says whether p's step costs hold at every TP of tps.
func holdsAll(p *emulator.Profile, tps []int) bool {
	for _, tp := range tps {
		if p.Steps.HoldsFor(tp) != nil {
			return false
		}
	}
	return true
}
