package emulator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

// Side-channel lines as the emulator writes them (json.Encoder: one line
// each), from a disaggregated pull of 512 tokens at the L4 profile.
const (
	seedPullRequest = `{"request_id":"cmpl-hone-0425f10e-0-4-0","block_ids":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31],"from_token":0}` + "\n"
	seedPullHeader  = `{"ok":true,"bytes":6291456,"held_ns":1283211,"ready_mono_ns":14005610653730,"boot_id":"4b1e1e5c-8a7e-4f0e-9f57-1c2f0c1e9a61"}` + "\n"
	seedPullRefusal = `{"ok":false,"error":"no held KV for request \"cmpl-x\" with those blocks","bytes":0,"held_ns":0,"ready_mono_ns":0}` + "\n"
	seedPullTrailer = `{"end":true,"model_ms":28.5299}` + "\n"
	seedPullAck     = `{"ack":true}` + "\n"
)

// FuzzPullRequestLine feeds a prefill worker's side of the side channel:
// the bytes a decode worker sends, read as servePull reads them (readLine
// under a line limit, then the pull request's JSON). The limit and the
// reader's buffer size are fuzzed too, down to bufio's 16 bytes. Properties:
//   - readLine frames exactly: each line it returns is the input up to and
//     including the next '\n', and the lines it returns are the input's
//     prefix, in order;
//   - it refuses a line (errLineTooLong) exactly when the next '\n' is
//     further than the limit, and otherwise never returns more than the
//     limit;
//   - it never holds more than the limit plus the reader's buffer: the
//     line's capacity stays within that;
//   - a pull request that parses encodes (as pullOnce sends it) to a line
//     that parses to the same request.
func FuzzPullRequestLine(f *testing.F) {
	f.Add([]byte(seedPullRequest+seedPullAck), uint16(1<<12), uint16(4096))
	f.Add([]byte(seedPullRequest), uint16(64), uint16(16))
	f.Add([]byte(seedPullRequest), uint16(len(seedPullRequest)), uint16(16))
	f.Add([]byte(seedPullRequest), uint16(len(seedPullRequest)-1), uint16(32))
	f.Add([]byte(`{"request_id":"a","block_ids":null,"from_token":-1}`+"\n"+`{"request_id":"`), uint16(200), uint16(16))
	f.Add([]byte("\n\n{}\n"), uint16(1), uint16(16))
	f.Add([]byte(""), uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, in []byte, limit, size uint16) {
		max := int(limit)
		br := bufio.NewReaderSize(bytes.NewReader(in), int(size))
		bufSize := br.Size()
		rest := in
		for {
			line, err := readLine(br, max)
			next := bytes.IndexByte(rest, '\n')
			switch {
			case err == nil:
				if next < 0 || !bytes.Equal(line, rest[:next+1]) {
					t.Fatalf("read %q, want the input up to its next newline (%q)", line, rest)
				}
				if len(line) > max {
					t.Fatalf("read a %d-byte line under a limit of %d", len(line), max)
				}
				if cap(line) > max+bufSize {
					t.Fatalf("a %d-byte line held in %d bytes, over the limit %d plus the %d-byte buffer", len(line), cap(line), max, bufSize)
				}
				var pr pullRequest
				if json.Unmarshal(line, &pr) == nil {
					var b bytes.Buffer
					if err := json.NewEncoder(&b).Encode(pr); err != nil {
						t.Fatal(err)
					}
					var back pullRequest
					if err := json.Unmarshal(b.Bytes(), &back); err != nil || !reflect.DeepEqual(back, pr) {
						t.Fatalf("pull request %+v sent as %s reads back as %+v (%v)", pr, b.Bytes(), back, err)
					}
				}
				rest = rest[len(line):]
				continue
			case errors.Is(err, errLineTooLong):
				if next >= 0 && next+1 <= max || next < 0 && len(rest) <= max {
					t.Fatalf("refused %q as longer than %d", rest, max)
				}
			case errors.Is(err, io.EOF):
				if next >= 0 || len(rest) > max {
					t.Fatalf("EOF before the line in %q (limit %d)", rest, max)
				}
			default:
				t.Fatalf("readLine: %v", err)
			}
			return
		}
	})
}

// FuzzPullReply feeds a decode worker's side of the side channel: the
// prefill worker's answer, read as pullOnce reads it (the header line under
// maxReplyLine, the header's count of KV bytes, the trailer line).
// Properties:
//   - a header that parses says the pull is served, with a byte count of
//     at least 0, and encodes (as servePull sends it) to a line that parses
//     back the same;
//   - a refusal comes back as an error carrying the prefill worker's words,
//     and a served header is refused only for a negative byte count;
//   - a trailer that parses ends the transfer with a finite modelled
//     duration in [0, 1e9] ms, and encodes to a line that parses back the
//     same.
func FuzzPullReply(f *testing.F) {
	payload := string(kvPayload[:64])
	f.Add([]byte(`{"ok":true,"bytes":64,"held_ns":1283211,"ready_mono_ns":14005610653730,"boot_id":"b"}` + "\n" + payload + seedPullTrailer))
	f.Add([]byte(seedPullHeader + seedPullTrailer))
	f.Add([]byte(seedPullRefusal))
	f.Add([]byte(`{"ok":true,"bytes":0,"held_ns":0,"ready_mono_ns":0}` + "\n" + `{"end":true,"model_ms":0}` + "\n"))
	f.Add([]byte(`{"ok":true,"bytes":0}` + "\n" + `{"end":true,"model_ms":1e9}`))
	f.Add([]byte(`{"ok":true,"bytes":0}` + "\n" + `{"end":false,"model_ms":-1}` + "\n"))
	f.Add([]byte(`{"error":"pull request line longer than 1048576 bytes"}` + "\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), 256<<10)
		line, err := readLine(br, maxReplyLine)
		if err != nil {
			return
		}
		h, err := parsePullHeader(line)
		if err != nil {
			var raw pullHeader
			switch {
			case json.Unmarshal(line, &raw) != nil:
			case !raw.OK && err.Error() != raw.Error:
				t.Fatalf("refusal %q: error %q, want the refusal's %q", line, err, raw.Error)
			case raw.OK && (raw.Bytes >= 0 || !strings.HasPrefix(err.Error(), "bad pull header: ")):
				t.Fatalf("header %q: %v", line, err)
			}
			return
		}
		if !h.OK || h.Bytes < 0 {
			t.Fatalf("header %q accepted as %+v", line, h)
		}
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(h); err != nil {
			t.Fatal(err)
		}
		if back, err := parsePullHeader(b.Bytes()); err != nil || back != h {
			t.Fatalf("header %+v sent as %s reads back as %+v (%v)", h, b.Bytes(), back, err)
		}
		if _, err := io.CopyN(io.Discard, br, h.Bytes); err != nil {
			return
		}
		line, err = readLine(br, maxReplyLine)
		if err != nil {
			return
		}
		tr, err := parsePullTrailer(line)
		if err != nil {
			return
		}
		if !tr.End || !(tr.ModelMs >= 0 && tr.ModelMs <= 1e9) || math.IsNaN(tr.ModelMs) {
			t.Fatalf("trailer %q accepted as %+v", line, tr)
		}
		b.Reset()
		if err := json.NewEncoder(&b).Encode(tr); err != nil {
			t.Fatal(err)
		}
		if back, err := parsePullTrailer(b.Bytes()); err != nil || back != tr {
			t.Fatalf("trailer %+v sent as %s reads back as %+v (%v)", tr, b.Bytes(), back, err)
		}
	})
}
