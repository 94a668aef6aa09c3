package diagnose

import (
	"sort"
	"testing"
)

// FuzzParseKernelEvidence feeds daemon snapshots to ParseKernelEvidence.
// Properties: it never panics; what parses has its exchanges in receipt
// order and each process's steps in end order, none ending before it
// starts; and every exchange split with its process's steps either fails
// with an error or gives no negative part (queue, prefill, decode, slack).
func FuzzParseKernelEvidence(f *testing.F) {
	f.Add([]byte(`{"schema_version":1,"clock":"CLOCK_MONOTONIC","exchanges":[
 {"pid":7,"local":"127.0.0.1:8000","remote":"127.0.0.1:40000","request_start_monotonic_ns":1000,"first_send_monotonic_ns":5200,
  "second_send_monotonic_ns":7200,"last_send_monotonic_ns":9000,"response_sends":4},
 {"pid":7,"local":"127.0.0.1:8000","remote":"127.0.0.1:40001","request_start_monotonic_ns":500,"open":true}],
 "steps":[{"pid":7,"start_monotonic_ns":3100,"end_monotonic_ns":5000},{"pid":7,"start_monotonic_ns":1200,"end_monotonic_ns":3000}]}`))
	f.Add([]byte(`{"schema_version":1,"clock":"CLOCK_MONOTONIC","steps":[{"pid":1,"start_monotonic_ns":9,"end_monotonic_ns":3}]}`))
	f.Add([]byte(`{"schema_version":2,"clock":"CLOCK_REALTIME"}`))
	f.Add([]byte(`{"schema_version":1,"clock":"CLOCK_MONOTONIC","exchanges":[{"pid":1,"request_start_monotonic_ns":10,"first_send_monotonic_ns":5,"last_send_monotonic_ns":1}],"steps":[{"pid":1,"start_monotonic_ns":0,"end_monotonic_ns":4}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"schema_version":1,"clock":"CLOCK_MONOTONIC","exchanges":[{"pid":10,"request_start_monotonic_ns":10,"first_send_monotonic_ns":50,"last_send_monotonic_ns":90}],
 "steps":[{"pid":12,"start_monotonic_ns":20,"end_monotonic_ns":40}],
 "targets":[{"pid":10,"ppid":1,"root_pid":10},{"pid":11,"ppid":10,"root_pid":10},{"pid":12,"ppid":11,"root_pid":10},{"pid":1,"ppid":12}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseKernelEvidence(b)
		if err != nil {
			return
		}
		xs, steps := k.Exchanges, k.Steps
		owners, err := StepOwners(xs, steps, k.Processes, nil)
		if err != nil {
			t.Fatalf("StepOwners without an override: %v", err)
		}
		for a, o := range owners {
			if o.APIPID != a || len(steps[o.StepPID]) == 0 {
				t.Fatalf("owner of %d: %+v has no steps", a, o)
			}
		}
		if !sort.SliceIsSorted(xs, func(i, j int) bool { return xs[i].ReceivedNs < xs[j].ReceivedNs }) {
			t.Fatalf("exchanges not in receipt order: %+v", xs)
		}
		for pid, ss := range steps {
			for i, s := range ss {
				if s.EndNs < s.StartNs || i > 0 && ss[i-1].EndNs > s.EndNs {
					t.Fatalf("pid %d steps %+v: step %d out of order or ending before its start", pid, ss, i)
				}
			}
		}
		for _, x := range xs {
			for _, head := range []HeadSend{HeadSeparate, HeadWithFirstToken} {
				ks, err := SplitExchange(x, steps[x.PID], head, 2, 1)
				if err == nil && (ks.QueueMs < 0 || ks.PrefillMs < 0 || ks.DecodeMs < 0 || ks.QueueSlackMs < 0) {
					t.Fatalf("exchange %+v head %d: negative part %+v", x, head, ks)
				}
			}
		}
	})
}
