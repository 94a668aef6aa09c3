package replay

import (
	"bytes"
	"errors"
	"io"
)

// errEventTooLarge stops a reader from buffering an endless line or event.
var errEventTooLarge = errors.New("sse: event larger than the limit")

// maxEventBytes bounds one event's data. vLLM's largest event is the first
// chunk with return_token_ids, which echoes the prompt's ids (tens of KiB).
const maxEventBytes = 16 << 20

// sseReader splits a text/event-stream into events, following the WHATWG
// parsing rules that matter for vLLM and proxies in front of it: lines end in
// \n, \r\n or a lone \r; a line starting with ':' is a comment (keep-alive);
// "data:" lines (one optional space after the colon) accumulate, joined by
// \n; a blank line dispatches the event; other fields (event, id, retry) are
// ignored; an event without data lines is not dispatched. Bytes split across
// reads are reassembled here; an event is returned as soon as its blank line
// has been read, never later, so its arrival time is the read's.
//
// It is hand-written rather than go-openai's stream reader because hone
// needs the arrival time of every event as it is read, the final usage chunk
// with "choices": [], and a precise split between a cut stream (EOF before
// "[DONE]") and a malformed one.
type sseReader struct {
	r          io.Reader
	buf        []byte
	start, end int // unread bytes are buf[start:end]
	scanned    int // buf[start:start+scanned] holds no line end
	eof        bool
	readErr    error
	pendCR     bool // the last line ended in \r at the end of the buffer
	data       []byte
	hasData    bool
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: r, buf: make([]byte, 16<<10)}
}

// reset reuses the reader and its buffers for another stream.
func (s *sseReader) reset(r io.Reader) {
	*s = sseReader{r: r, buf: s.buf, data: s.data[:0]}
}

// next returns the data of the next event. The slice is valid until the
// following call. At the end of the stream it returns io.EOF if the stream
// ended on an event boundary and io.ErrUnexpectedEOF if an event (or line)
// was cut off; no partial event is ever returned. A read error other than
// EOF is returned as is.
func (s *sseReader) next() ([]byte, error) {
	s.data, s.hasData = s.data[:0], false
	for {
		line, ok, err := s.line()
		if err != nil {
			return nil, err
		}
		if !ok { // end of stream
			if s.hasData {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, io.EOF
		}
		if len(line) == 0 {
			if s.hasData {
				return s.data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // comment / keep-alive
		}
		field, value := line, []byte(nil)
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			field, value = line[:c], line[c+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		if string(field) != "data" {
			continue
		}
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
		if len(s.data) > maxEventBytes {
			return nil, errEventTooLarge
		}
	}
}

// line returns the next complete line without its terminator; ok is false at
// the end of the stream. An unterminated last line makes the stream cut
// (io.ErrUnexpectedEOF) unless it is empty.
func (s *sseReader) line() (line []byte, ok bool, err error) {
	for {
		if s.pendCR && s.start < s.end {
			s.pendCR = false
			if s.buf[s.start] == '\n' {
				s.start++
			}
		}
		if i := lineEnd(s.buf[s.start+s.scanned : s.end]); i >= 0 {
			i += s.scanned
			s.scanned = 0
			line = s.buf[s.start : s.start+i]
			s.start += i + 1
			if line0 := s.start - 1; s.buf[line0] == '\r' {
				if s.start < s.end {
					if s.buf[s.start] == '\n' {
						s.start++
					}
				} else {
					s.pendCR = true
				}
			}
			return line, true, nil
		}
		if s.eof {
			if s.readErr != nil {
				return nil, false, s.readErr
			}
			if s.start < s.end {
				s.start = s.end
				return nil, false, io.ErrUnexpectedEOF
			}
			return nil, false, nil
		}
		s.scanned = s.end - s.start
		s.fill()
		if s.end-s.start > maxEventBytes {
			return nil, false, errEventTooLarge
		}
	}
}

// fill reads more bytes, compacting or growing the buffer first.
func (s *sseReader) fill() {
	if s.start > 0 {
		n := copy(s.buf, s.buf[s.start:s.end])
		s.start, s.end = 0, n
	}
	if s.end == len(s.buf) {
		s.buf = append(s.buf, make([]byte, len(s.buf))...)
	}
	n, err := s.r.Read(s.buf[s.end:])
	s.end += n
	if err != nil {
		s.eof = true
		if err != io.EOF {
			s.readErr = err
		}
	}
}

// lineEnd is the index of the first \r or \n in b, or -1: two vectorized
// byte searches, several times faster than bytes.IndexAny on event lines.
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		i = len(b)
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	if i == len(b) {
		return -1
	}
	return i
}
