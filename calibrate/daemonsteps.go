package calibrate

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// Step data from hone's own evidence (hone profile steps): on a GPU host a
// hone user has no forward-pass metrics file, but has the daemon's engine
// steps (GET /v1/steps, a snapshot's "steps": each step of an engine
// process from its first kernel or graph launch to the synchronize that
// returned its results, CLOCK_MONOTONIC) and the replay record of the
// requests that engine served (every output chunk's CLOCK_MONOTONIC
// arrival, prompt and cached tokens). StepsFromEvidence joins them into
// what each step held:
//
//   - a decode: every output chunk after the first was produced by the
//     latest step that ended before the chunk arrived; that step decoded
//     the request with KV = prompt + the tokens before the chunk (a chunk
//     of m tokens: the m steps up to it, one each);
//   - a prefill: the first chunk's step computed the prompt's last chunk;
//     the uncached prompt (prompt − cached_tokens) in chunks of the token
//     budget ends there, one step per chunk back, never before the
//     request was sent;
//   - the step's latency is its duration on the GPU (end − start), in
//     model time (÷ the record's time scale).
//
// A request without cached_tokens (an engine run without
// --enable-prompt-tokens-details) leaves the steps that may hold its
// prompt out: how much of it was computed is unknown.
//
// Steps the requests do not explain (idle, warm-up of other clients) are
// left out. The join needs one engine process serving the record: a
// colocated deployment of one replica.

// StepsFromEvidence reconstructs the steps of engine process pid (0: the
// one process with steps) from a daemon snapshot's evidence and the
// record of the requests it served. budget is the engine's token budget
// per step (max_num_batched_tokens).
//
// tp is the engine's tensor-parallel size; 0 takes the record's
// config.topology.tp.
func StepsFromEvidence(ev diagnose.KernelEvidence, pid int, rec *schema.Record, budget, tp int) (*StepData, error) {
	if budget < 1 {
		return nil, fmt.Errorf("token budget %d: want >= 1", budget)
	}
	// Only the topology matters here: read it alone, so that a record of
	// hone replay --config with any config serves.
	topo, has, err := rec.Config.Topology()
	has = has && err == nil
	if has && topo.Kind != "" && (topo.Kind != deploy.Colocated || max(topo.Replicas, 1) != 1) {
		return nil, fmt.Errorf("record: config.topology: a %s deployment of %d replicas: the join needs one engine process serving every request (colocated, one replica)", topo.Kind, max(topo.Replicas, 1))
	}
	if tp == 0 {
		tp = max(topo.TP, 1)
		if !has {
			return nil, errors.New("record: no config.topology to read the TP size from: give it (--tp)")
		}
	}
	if pid == 0 {
		var err error
		if pid, err = onlyStepPID(ev); err != nil {
			return nil, err
		}
	}
	steps := ev.Steps[pid]
	if len(steps) == 0 {
		return nil, fmt.Errorf("daemon snapshot: no steps of pid %d", pid)
	}
	scale := rec.TimeScale
	if !(scale > 0) {
		scale = 1
	}
	jn := &stepJoin{steps: steps, budget: budget, entries: make([][]emulator.StepEntry, len(steps)), unknown: make([]bool, len(steps))}
	jn.join(rec)
	d := &StepData{Dir: fmt.Sprintf("daemon steps of pid %d", pid), TP: tp, Model: rec.Model.ID, EngineVer: rec.Engine.Version, RecordKind: rec.Kind}
	for i, en := range jn.entries {
		if len(en) == 0 || jn.unknown[i] {
			continue
		}
		s := emulator.Summarize(en)
		ms := float64(steps[i].EndNs-steps[i].StartNs) / 1e6 / scale
		if !(ms > 0) {
			continue
		}
		d.Steps = append(d.Steps, MeasuredStep{Line: len(d.Steps) + 2, Counter: int64(i), Phase: s.Phase(), Segment: "record", Summary: s, Ms: ms})
		d.BatchedLimit = max(d.BatchedLimit, s.Tokens())
	}
	if len(d.Steps) == 0 {
		return nil, errors.New("no step of the engine holds a request of the record: are the snapshot and the record of the same run?")
	}
	return d, nil
}

// onlyStepPID is the one process of ev with steps.
func onlyStepPID(ev diagnose.KernelEvidence) (int, error) {
	var pids []int
	for p, ss := range ev.Steps {
		if len(ss) > 0 {
			pids = append(pids, p)
		}
	}
	sort.Ints(pids)
	if len(pids) != 1 {
		return 0, fmt.Errorf("daemon snapshot: steps of %d processes %v: name the engine's with --pid", len(pids), pids)
	}
	return pids[0], nil
}

// stepJoin attributes the requests of a record to an engine's steps, by the
// rules above StepsFromEvidence.
type stepJoin struct {
	steps   []diagnose.EngineStep
	budget  int                    // tokens per step
	entries [][]emulator.StepEntry // what each step held
	unknown []bool                 // steps whose contents the record cannot tell
}

// stepAt is the latest step that ended at or before t, -1 when none.
func (jn *stepJoin) stepAt(t int64) int {
	return sort.Search(len(jn.steps), func(i int) bool { return jn.steps[i].EndNs > t }) - 1
}

// join attributes every ok request of rec with chunks and a prompt size.
func (jn *stepJoin) join(rec *schema.Record) {
	for _, run := range rec.Runs {
		for _, lvl := range run.Levels {
			for _, rr := range lvl.Requests {
				chunks := rr.Chunks.Columns() // packed as ReadRecord returns them
				if rr.Outcome != schema.OutcomeOK || len(chunks.MonoNs) == 0 || rr.PromptTokens == nil {
					continue
				}
				jn.request(chunks, *rr.PromptTokens, rr.CachedTokens, rr.Sent.MonoNs)
			}
		}
	}
}

// request attributes one request: its prompt of prompt tokens (cached of
// them from the prefix cache, nil when the engine did not say), sent at
// sentNs, and its output chunks.
func (jn *stepJoin) request(chunks schema.Chunks, prompt int, cached *int, sentNs int64) {
	first := jn.stepAt(chunks.MonoNs[0])
	if first < 0 {
		return
	}
	if cached == nil {
		// Without the engine's cached_tokens the prompt's chunks
		// are unknown: the steps that may hold them are left out.
		for i := max(first-(prompt+jn.budget-1)/jn.budget+1, 0); i <= first; i++ {
			jn.unknown[i] = true
		}
	} else {
		jn.prefill(first, prompt, *cached, sentNs)
	}
	jn.decodes(chunks, first, prompt)
}

// prefill books the prompt's chunks, back from the first token's step
// first, never before the request was sent.
func (jn *stepJoin) prefill(first, prompt, cached int, sentNs int64) {
	budget := jn.budget
	uncached := max(prompt-cached, 1)
	n := (uncached + budget - 1) / budget
	for c := 0; c < n; c++ {
		i := first - (n - 1 - c)
		if i < 0 || jn.steps[i].StartNs < sentNs {
			continue
		}
		tok := budget
		if c == n-1 {
			tok = uncached - budget*(n-1)
		}
		jn.entries[i] = append(jn.entries[i], emulator.StepEntry{Tokens: tok, Context: cached + c*budget, Samples: c == n-1})
	}
}

// decodes books every output token after the first to the step that
// produced it: a chunk of m tokens to the m steps up to its arrival.
func (jn *stepJoin) decodes(chunks schema.Chunks, first, prompt int) {
	done := tokensIn(chunks, 0)
	for k := 1; k < len(chunks.MonoNs); k++ {
		m := tokensIn(chunks, k)
		at := jn.stepAt(chunks.MonoNs[k])
		for j := 0; j < m; j++ {
			i := at - (m - 1 - j)
			if i >= 0 && i > first {
				// Producing output token t (t = done+j+1 >= 2) attends
				// to the prompt and the t−1 tokens before it, as vLLM's
				// forward-pass metrics count decode KV tokens.
				jn.entries[i] = append(jn.entries[i], emulator.StepEntry{Tokens: 1, Context: max(prompt+done+j-2, 0), Decode: true, Samples: true})
			}
		}
		done += m
	}
}

// tokensIn is the tokens chunk k carried (1 when the engine returned no ids).
func tokensIn(c schema.Chunks, k int) int {
	if k < len(c.TokenIDs) && len(c.TokenIDs[k]) > 0 {
		return len(c.TokenIDs[k])
	}
	return 1
}

// WriteStepDir writes d as a step-data directory (StepsFile and
// MetadataFile, the layout ReadStepDir reads), atomically per file.
func WriteStepDir(dir string, d *StepData) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	head := append([]string{"workload_segment"}, StepColumns...)
	if err := w.Write(head); err != nil {
		return err
	}
	for _, s := range d.Steps {
		x := s.Summary
		row := []string{s.Segment, s.Phase, strconv.FormatInt(s.Counter, 10), strconv.Itoa(x.PrefillTokens), strconv.Itoa(x.PrefillRequests),
			strconv.Itoa(x.PrefillKV), strconv.FormatFloat(x.PrefillLenVar, 'f', 3, 64), strconv.Itoa(x.DecodeRequests), strconv.Itoa(x.DecodeKV),
			strconv.FormatFloat(s.Ms, 'f', 4, 64)}
		if err := w.Write(row); err != nil {
			return err
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, StepsFile), buf.Bytes()); err != nil {
		return err
	}
	meta := map[string]any{
		"artifact_kind": "hone daemon steps",
		"record_kind":   d.RecordKind,
		"effective_config": map[string]any{
			"parallel_config.tensor_parallel_size": d.TP,
			"vllm_version":                         d.EngineVer,
		},
		"requested": map[string]any{"deployment_config": map[string]any{"model": d.Model}},
	}
	mb, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, MetadataFile), append(mb, '\n'))
}
