package calibrate

import (
	"fmt"
	"os"
	"sort"

	"github.com/parquet-go/parquet-go"

	"github.com/hone-llm/hone/sim/emulator"
)

// arRow is one row of a measured all-reduce table
// (systems/data/<gpu>/comm/vllm/<version>/custom_allreduce_perf.parquet in
// ai-dynamo/aiconfigurator): message_size is in elements of
// allreduce_dtype, latency in milliseconds, backend vllm_graph (captured
// in a CUDA graph, as vLLM runs its steps) or vllm_eager.
type arRow struct {
	Op       string  `parquet:"op_name,optional"`
	Dtype    string  `parquet:"allreduce_dtype,optional"`
	NumGPUs  int64   `parquet:"num_gpus,optional"`
	Elements int64   `parquet:"message_size,optional"`
	Latency  float64 `parquet:"latency,optional"`
	Backend  string  `parquet:"backend,optional"`
}

// AllReduceBackend is the table rows hone reads: vLLM's all-reduce as a
// CUDA graph replays it (vLLM captures its steps in graphs).
const AllReduceBackend = "vllm_graph"

// ReadAllReduceTable reads a measured bf16 all-reduce table (parquet) into
// the points of an all-reduce model, by rank count. source names it in the
// profile.
func ReadAllReduceTable(path, source string) (emulator.AllReduceModel, error) {
	m := emulator.AllReduceModel{Source: source, Points: map[int][]emulator.ARPoint{}}
	f, err := os.Open(path)
	if err != nil {
		return m, fmt.Errorf("all-reduce table: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return m, fmt.Errorf("all-reduce table %s: %w", path, err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return m, fmt.Errorf("all-reduce table %s: %w", path, err)
	}
	r := parquet.NewGenericReader[arRow](pf)
	defer r.Close()
	rows := make([]arRow, r.NumRows())
	n, err := r.Read(rows)
	if err != nil && n < len(rows) {
		return m, fmt.Errorf("all-reduce table %s: %w", path, err)
	}
	byTP := map[int]map[float64]float64{}
	for i, row := range rows[:n] {
		if row.Backend != AllReduceBackend || row.Op != "all_reduce" || row.Dtype != "bfloat16" {
			continue
		}
		if row.NumGPUs < 2 || row.Elements <= 0 || !(row.Latency >= 0) {
			return m, fmt.Errorf("all-reduce table %s: row %d: want num_gpus >= 2, message_size > 0, latency >= 0; got %d, %d, %v", path, i, row.NumGPUs, row.Elements, row.Latency)
		}
		tp := int(row.NumGPUs)
		if byTP[tp] == nil {
			byTP[tp] = map[float64]float64{}
		}
		byTP[tp][float64(row.Elements)] = row.Latency
	}
	if len(byTP) == 0 {
		return m, fmt.Errorf("all-reduce table %s: no bfloat16 all_reduce rows of backend %s", path, AllReduceBackend)
	}
	for tp, pts := range byTP {
		for e, ms := range pts {
			m.Points[tp] = append(m.Points[tp], emulator.ARPoint{Elements: e, Ms: ms})
		}
		sort.Slice(m.Points[tp], func(i, j int) bool { return m.Points[tp][i].Elements < m.Points[tp][j].Elements })
	}
	return m, nil
}
