package emulator

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultHelp documents the --fault values; hone sim serve --help prints it.
const FaultHelp = `  crash-after=N              after the N-th successful response has been written, the
                             server dies at once (the CLI exits with status 1; open
                             connections are cut, in-flight requests get no answer)
  stall=DURATION@N           the engine freezes for DURATION of model time (e.g. 500ms)
                             in the first step that schedules the N-th request to
                             arrive (1-based); every request in or behind that step waits
  cut-stream-after-tokens=K  every streaming response is cut (TCP closed, no [DONE])
                             right after its K-th token chunk; the request is aborted
                             and its blocks freed (counted in
                             hone_emulator_fault_stream_cuts_total; request_success
                             counts it only if the engine had already finished it)
  slow-transfer=FACTOR       (prefill role) every KV pull takes FACTOR times its modelled
                             time: pacing bandwidth / FACTOR and fixed latency x FACTOR
  refuse-kv                  (prefill role) answer do_remote_decode requests with
                             kv_transfer_params null and free the blocks, so the
                             decode worker must prefill locally`

// Faults is a parsed set of --fault values. The zero value injects nothing.
type Faults struct {
	CrashAfter   int     // 0: never
	Stall        *Stall  // nil: never
	CutAfter     int     // 0: never
	SlowTransfer float64 // 0 or 1: none
	RefuseKV     bool
}

// Stall freezes the engine for Duration (model time) in the first step
// that schedules the Nth request.
type Stall struct {
	Duration time.Duration
	Nth      int64
}

// ParseFault adds one --fault value to f.
func (f *Faults) ParseFault(s string) error {
	name, val, hasVal := strings.Cut(s, "=")
	bad := func(want string) error { return fmt.Errorf("--fault %q: want %s", s, want) }
	switch name {
	case "crash-after":
		n, err := strconv.Atoi(val)
		if !hasVal || err != nil || n < 1 {
			return bad("crash-after=N with N >= 1")
		}
		f.CrashAfter = n
	case "stall":
		ds, ns, ok := strings.Cut(val, "@")
		d, err1 := time.ParseDuration(ds)
		n, err2 := strconv.ParseInt(ns, 10, 64)
		if !hasVal || !ok || err1 != nil || err2 != nil || d <= 0 || n < 1 {
			return bad("stall=DURATION@N, e.g. stall=500ms@3")
		}
		f.Stall = &Stall{Duration: d, Nth: n}
	case "cut-stream-after-tokens":
		n, err := strconv.Atoi(val)
		if !hasVal || err != nil || n < 1 {
			return bad("cut-stream-after-tokens=K with K >= 1")
		}
		f.CutAfter = n
	case "slow-transfer":
		x, err := strconv.ParseFloat(val, 64)
		if !hasVal || err != nil || !(x >= 1) || x > 1e6 {
			return bad("slow-transfer=FACTOR with FACTOR >= 1")
		}
		f.SlowTransfer = x
	case "refuse-kv":
		if hasVal {
			return bad("refuse-kv (no value)")
		}
		f.RefuseKV = true
	default:
		return bad("one of crash-after=N, stall=DURATION@N, cut-stream-after-tokens=K, slow-transfer=FACTOR, refuse-kv")
	}
	return nil
}

// faultState is Faults as the engine uses it.
type faultState struct {
	stall        *stallState
	slowTransfer float64
	refuseKV     bool
}

type stallState struct {
	nth int64
	ms  float64
}

func (f Faults) state() faultState {
	s := faultState{slowTransfer: 1, refuseKV: f.RefuseKV}
	if f.SlowTransfer > 1 {
		s.slowTransfer = f.SlowTransfer
	}
	if f.Stall != nil {
		s.stall = &stallState{nth: f.Stall.Nth, ms: float64(f.Stall.Duration) / 1e6}
	}
	return s
}
