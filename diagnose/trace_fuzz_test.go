package diagnose

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/hone-llm/hone/sim/emulator"
)

// FuzzReadTrace feeds emulator --trace-file contents to ReadTrace. Seeds:
// testdata/trace.jsonl, lines written by `hone sim serve --trace-file`
// workers (a 1P1D pull: the prefill's request and kv_send lines and the
// decode's request line; a colocated request), and near misses.
// Properties:
//   - a trace that parses round-trips: its lines, written back as the
//     emulator writes them (one json.Marshal'd record a line), give the same
//     ground truth;
//   - every request's truth has its decode, queueing and prefill parts, and
//     the transfer and decode-queue parts exactly when a prefill worker's
//     line for it was read;
//   - concatenating the trace with itself (two files of the same run) gives
//     the same truth.
func FuzzReadTrace(f *testing.F) {
	b, err := os.ReadFile("testdata/trace.jsonl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	lines := bytes.SplitAfter(b, []byte("\n"))
	f.Add(bytes.Join([][]byte{lines[2], lines[1], lines[0]}, nil)) // decode line first
	f.Add(lines[3])
	f.Add([]byte(`{"event":"request","request_id":"cmpl-x","role":"decode","error":"KV transfer from 127.0.0.1:5600 failed: EOF","finish_reason":"error"}` + "\n"))
	f.Add([]byte(`{"event":"request","request_id":"x","role":"prefill","queue_ms":1,"prefill_ms":2}` + "\n"))
	f.Add([]byte("\n"))
	f.Add([]byte(`{"event":"request","request_id":7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		truth, err := ReadTrace(bytes.NewReader(b))
		if err != nil {
			return
		}
		var rewritten bytes.Buffer
		prefilled := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var tr emulator.TraceRecord
			if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
				t.Fatalf("ReadTrace took a line that does not parse: %q: %v", sc.Bytes(), err)
			}
			line, err := json.Marshal(tr)
			if err != nil {
				t.Fatalf("a trace record read back does not write: %v", err)
			}
			rewritten.Write(append(line, '\n'))
			if tr.Event == "request" && tr.Error == "" && tr.Role == emulator.RolePrefill {
				prefilled[trimID(tr.RequestID)] = true
			}
		}
		back, err := ReadTrace(&rewritten)
		if err != nil {
			t.Fatalf("the trace rewritten does not read: %v", err)
		}
		if !reflect.DeepEqual(back, truth) {
			t.Fatalf("the trace rewritten reads as\n%v\nnot\n%v", back, truth)
		}
		for id, tr := range truth {
			for _, part := range []string{Decode, Queueing, Prefill} {
				if _, ok := tr[part]; !ok {
					t.Fatalf("request %s: no %s part: %v", id, part, tr)
				}
			}
			_, transfer := tr[Transfer]
			_, dq := tr[DecodeQ]
			if transfer != prefilled[id] || dq != prefilled[id] || len(tr) != 3+2*boolInt(prefilled[id]) {
				t.Fatalf("request %s (prefill line: %v): parts %v", id, prefilled[id], tr)
			}
		}
		cat := append([]byte(nil), b...)
		if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
			cat = append(cat, '\n') // a file's last line ends where the next file starts
		}
		twice, err := ReadTrace(bytes.NewReader(append(cat, b...)))
		if err != nil || !reflect.DeepEqual(twice, truth) {
			t.Fatalf("the trace twice reads as\n%v (%v)\nnot\n%v", twice, err, truth)
		}
	})
}

func trimID(id string) string {
	if len(id) >= 5 && id[:5] == "cmpl-" {
		return id[5:]
	}
	return id
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
