package replay

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll parses a whole stream, returning the events and the final error.
func readAll(r io.Reader) ([]string, error) {
	s := newSSEReader(r)
	var out []string
	for {
		d, err := s.next()
		if err != nil {
			return out, err
		}
		out = append(out, string(d))
	}
}

func TestSSE(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      error
	}{
		{"vllm", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}, io.EOF},
		{"crlf", "data: x\r\n\r\ndata: y\r\n\r\n", []string{"x", "y"}, io.EOF},
		{"lone cr", "data: x\r\rdata: y\r\r", []string{"x", "y"}, io.EOF},
		{"no space", "data:x\n\n", []string{"x"}, io.EOF},
		{"two spaces keep one", "data:  x\n\n", []string{" x"}, io.EOF},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}, io.EOF},
		{"comments and fields", ": keep-alive\n\nevent: message\nid: 3\nretry: 10\ndata: x\n: ping\n\n", []string{"x"}, io.EOF},
		{"empty data dispatches", "data\n\n", []string{""}, io.EOF},
		{"no data no event", "event: x\n\n\n\n", nil, io.EOF},
		{"cut mid-event", "data: x\n\ndata: y\n", []string{"x"}, io.ErrUnexpectedEOF},
		{"cut mid-line", "data: x\n\ndata: {\"a", []string{"x"}, io.ErrUnexpectedEOF},
		{"empty", "", nil, io.EOF},
		{"long line", "data: " + strings.Repeat("7", 100000) + "\n\n", []string{strings.Repeat("7", 100000)}, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in)),
				iotest.HalfReader(strings.NewReader(tc.in))} {
				got, err := readAll(r)
				if !errors.Is(err, tc.err) || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
					t.Fatalf("got %q, %v; want %q, %v", got, err, tc.want, tc.err)
				}
			}
		})
	}
}

func TestSSEReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: x\n\ndata: y"), iotest.ErrReader(boom))
	got, err := readAll(r)
	if !errors.Is(err, boom) || len(got) != 1 {
		t.Fatalf("got %q, %v; want one event, then the read error", got, err)
	}
}

// chunked delivers b in pieces whose sizes come from sizes (cycled).
type chunked struct {
	b     []byte
	sizes []byte
	i     int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = int(c.sizes[c.i%len(c.sizes)]) + 1
		c.i++
	}
	n = min(n, len(p), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// FuzzSSE checks the parser never panics, that how the bytes are split
// across reads never changes what it returns, and that events it is given
// in canonical form come back exactly.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n"), []byte{3, 0, 9})
	f.Add([]byte(": keep-alive\r\n\r\ndata: a\r\ndata: b\r\n\r\n"), []byte{0})
	f.Add([]byte("data: x\r\rdata: y\r"), []byte{1, 2})
	f.Add([]byte("event: e\nid: 1\nretry: 5\ndata\n\ndata:\n\n:\n"), []byte{7})
	f.Add([]byte("data: cut"), []byte{})
	f.Add([]byte("\r\n\n\r"), []byte{0, 0})
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		whole, errWhole := readAll(bytes.NewReader(in))
		split, errSplit := readAll(&chunked{b: in, sizes: sizes})
		if strings.Join(whole, "\x00") != strings.Join(split, "\x00") || len(whole) != len(split) || errWhole != errSplit {
			t.Fatalf("split changed the result: %q %v vs %q %v", whole, errWhole, split, errSplit)
		}
		// Round trip: any event without line breaks, written canonically.
		var events []string
		for _, e := range bytes.FieldsFunc(in, func(r rune) bool { return r == '\n' || r == '\r' }) {
			events = append(events, string(e))
		}
		var buf bytes.Buffer
		for _, e := range events {
			buf.WriteString("data: " + e + "\n\n")
		}
		got, err := readAll(&chunked{b: buf.Bytes(), sizes: sizes})
		if err != io.EOF || strings.Join(got, "\x00") != strings.Join(events, "\x00") || len(got) != len(events) {
			t.Fatalf("round trip: got %q, %v; want %q", got, err, events)
		}
	})
}
