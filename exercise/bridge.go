package exercise

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The bridge protocol between exercise/submission.py and `hone exercise
// bridge`: one JSON object per line in each direction.
//
//	python → hone  {"type":"start","baseline":{...},"budget":4}
//	hone → python  {"type":"evaluate","call":1,"config":{...}}
//	python → hone  {"type":"result","call":1,"result":{...}}
//	           or  {"type":"error","call":1,"error":"ValueError: ..."}
//	...            (at most budget evaluate/answer pairs)
//	hone → python  {"type":"decision","call":K,"config":{...},"verified":true,
//	                "diagnosis":[...],"selection_rule":"...","regression_rule":"..."}
//	           or  {"type":"fatal","error":"..."}
//
// "call" in the decision is the call whose config was selected, so the
// Python side returns that very config object; 0 means no call succeeded
// and the baseline is returned. Non-finite floats, which JSON cannot carry,
// are sent by Python as the strings "NaN", "Infinity" or "-Infinity".
type bridgeMsg struct {
	Type     string          `json:"type"`
	Baseline json.RawMessage `json:"baseline,omitempty"`
	Budget   int             `json:"budget,omitempty"`
	Call     int             `json:"call,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
}

type bridgeDecision struct {
	Type           string   `json:"type"`
	Call           int      `json:"call"`
	Config         Config   `json:"config"`
	Verified       bool     `json:"verified"`
	Diagnosis      []string `json:"diagnosis"`
	SelectionRule  string   `json:"selection_rule"`
	RegressionRule string   `json:"regression_rule"`
}

// ServeBridge runs one exercise over the bridge protocol: it reads the start
// message from in, asks for evaluations on out, and writes the decision.
// Progress and the diagnosis go to logw for people. A protocol error is
// reported to the peer as a fatal message and returned.
func ServeBridge(ctx context.Context, in io.Reader, out io.Writer, logw io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	enc := json.NewEncoder(out)
	fatal := func(err error) error {
		_ = enc.Encode(map[string]string{"type": "fatal", "error": err.Error()})
		return err
	}
	read := func() (bridgeMsg, error) {
		var m bridgeMsg
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return m, fmt.Errorf("read bridge input: %w", err)
			}
			return m, errors.New("bridge input ended before the exercise finished")
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return m, fmt.Errorf("bridge input is not a JSON object: %w", err)
		}
		return m, nil
	}
	start, err := read()
	if err != nil {
		return fatal(err)
	}
	if start.Type != "start" {
		return fatal(fmt.Errorf("first bridge message: want type \"start\", got %q", start.Type))
	}
	baseline, err := decodeObject(start.Baseline)
	if err != nil {
		return fatal(fmt.Errorf("start.baseline: %w", err))
	}
	budget := start.Budget
	if budget == 0 {
		budget = Budget
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// broken stops the exercise: the peer can no longer answer, which is not
	// a failed candidate.
	broken := func(err error) (map[string]any, error) {
		cancel(err)
		return nil, err
	}
	call := 0
	eval := func(ctx context.Context, cfg Config) (map[string]any, error) {
		call++
		if err := enc.Encode(map[string]any{"type": "evaluate", "call": call, "config": cfg}); err != nil {
			return broken(fmt.Errorf("write evaluate request: %w", err))
		}
		fmt.Fprintf(logw, "hone: evaluate call %d/%d\n", call, budget)
		m, err := read()
		if err != nil {
			return broken(err)
		}
		if m.Call != call {
			return broken(fmt.Errorf("answer for call %d while waiting for call %d", m.Call, call))
		}
		switch m.Type {
		case "result":
			return decodeObject(m.Result)
		case "error":
			return nil, fmt.Errorf("evaluate raised: %s", m.Error)
		}
		return broken(fmt.Errorf("answer to call %d: want type \"result\" or \"error\", got %q", call, m.Type))
	}
	d, err := Optimize(ctx, baseline, eval, budget)
	if err != nil {
		return fatal(err)
	}
	for _, line := range d.Diagnosis {
		fmt.Fprintln(logw, "hone:", line)
	}
	return enc.Encode(bridgeDecision{Type: "decision", Call: d.SelectedCall, Config: d.Selected, Verified: d.Verified,
		Diagnosis: d.Diagnosis, SelectionRule: d.Selection, RegressionRule: d.Regression})
}

func decodeObject(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, errors.New("missing: want a JSON object")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("want a JSON object: %w", err)
	}
	return m, nil
}
