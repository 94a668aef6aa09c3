package proxy

import "bytes"

// eventWatch follows an event stream as the proxy writes it to the client,
// to learn what the client has been sent: the end of the answer (an event
// whose data is "[DONE]") and error events ({"error": ...}).
//
// It exists because a client that has read [DONE] holds its whole answer
// and may close at once (hone replay does), often before the worker's
// stream has ended on the proxy's side. The request's outcome must be what
// the client saw, not which of the two closes the proxy noticed first.
//
// Only the first lineKeep bytes of each line are kept, so watching costs one
// IndexByte per write. Lines end in \n, with or without a \r before it; a
// lone \r as a line end, which engines do not send, is not recognised. An
// event counts once the blank line that dispatches it has been written.
type eventWatch struct {
	line [lineKeep]byte
	n    int  // bytes of the current line kept in line
	long bool // the current line is longer than lineKeep

	dataLines int  // data lines in the current event
	doneData  bool // the current event's first data line is [DONE]
	errData   bool // the current event's first data line opens an object with "error"

	done     bool // an event with data [DONE] has been written
	errEvent bool // an error event has been written
}

const lineKeep = 32

// write watches p, the next bytes written to the client.
func (w *eventWatch) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		k := copy(w.line[w.n:], seg)
		w.n += k
		if k < len(seg) {
			w.long = true
		}
		if i < 0 {
			return
		}
		w.endLine()
		p = p[i+1:]
	}
}

func (w *eventWatch) endLine() {
	l, long := w.line[:w.n], w.long
	w.n, w.long = 0, false
	if !long && len(l) > 0 && l[len(l)-1] == '\r' {
		l = l[:len(l)-1]
	}
	if len(l) == 0 && !long { // a blank line dispatches the event
		if w.dataLines == 1 && w.doneData {
			w.done = true
		}
		if w.errData {
			w.errEvent = true
		}
		w.dataLines, w.doneData, w.errData = 0, false, false
		return
	}
	v, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return // a comment or another field
	}
	v = bytes.TrimPrefix(v, []byte(" "))
	w.dataLines++
	if w.dataLines == 1 {
		w.doneData = !long && string(v) == "[DONE]"
		w.errData = opensErrorObject(v)
	}
}

// opensErrorObject reports whether v starts a JSON object whose first key is
// "error": vLLM's in-stream error event, and the proxy's own.
func opensErrorObject(v []byte) bool {
	v = bytes.TrimLeft(v, " \t")
	if len(v) == 0 || v[0] != '{' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(v[1:], " \t"), []byte(`"error"`))
}
