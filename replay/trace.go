package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/hone-llm/hone/schema"
)

// MooncakeBlockSize is the block size of Mooncake's public traces: one
// hash id per 512 prompt tokens, the last block possibly partial.
const MooncakeBlockSize = 512

// Trace formats (TraceInfo.Format), defined in schema.
const (
	TraceMooncake = schema.TraceMooncake
	TraceRecord   = schema.TraceRecord
)

// MaxTraceLineBytes bounds one line of a trace: 16 MiB holds a hash list
// of a million blocks (a 512-million-token prompt).
const MaxTraceLineBytes = 16 << 20

// TraceRequest is one request of a trace.
type TraceRequest struct {
	Line         int     // 1-based line of the trace file (0 for a converted record)
	TimestampMs  float64 // arrival, trace time
	InputLength  int
	OutputLength int
	// HashIDs name the prompt's blocks of the trace's block size, in
	// order: two requests whose lists agree on the first k ids share
	// their first k blocks. A list may stop short of the prompt (the rest
	// is the request's own).
	HashIDs []int64
}

// TraceError is a trace that cannot be replayed: the line (1-based, 0 when
// the whole file is at fault) and what is wrong with it.
type TraceError struct {
	Path string
	Line int
	Msg  string
}

func (e *TraceError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("trace %s: %s", e.Path, e.Msg)
	}
	return fmt.Sprintf("trace %s line %d: %s", e.Path, e.Line, e.Msg)
}

// traceLine is a Mooncake line as JSON has it. Pointers tell a missing
// field from a zero; numbers are float64 so that "1.5" is an error, not a
// truncation.
type traceLine struct {
	Timestamp    *float64   `json:"timestamp"`
	InputLength  *float64   `json:"input_length"`
	OutputLength *float64   `json:"output_length"`
	HashIDs      *[]float64 `json:"hash_ids"`
}

// ParseTraceLine parses one Mooncake line into q (reusing q.HashIDs),
// checking it against block (the trace's block size) and the previous
// line's timestamp prev: timestamps must not decrease, lengths are
// whole numbers (input at least 1, output at least 1), and the hash list
// holds at most ceil(input_length / block) ids.
func ParseTraceLine(line []byte, block int, prev float64, q *TraceRequest) error {
	var l traceLine
	if err := json.Unmarshal(line, &l); err != nil {
		return fmt.Errorf("want a JSON object {\"timestamp\", \"input_length\", \"output_length\", \"hash_ids\"}: %v", err)
	}
	whole := func(name string, v *float64, lo float64) (int, error) {
		switch {
		case v == nil:
			return 0, fmt.Errorf("%s: missing", name)
		case *v != math.Trunc(*v) || math.IsInf(*v, 0):
			return 0, fmt.Errorf("%s %v: want a whole number of tokens", name, *v)
		case *v < lo:
			return 0, fmt.Errorf("%s %v: want at least %v", name, *v, lo)
		case *v > 1<<31:
			return 0, fmt.Errorf("%s %v: want at most %d", name, *v, 1<<31)
		}
		return int(*v), nil
	}
	switch {
	case l.Timestamp == nil:
		return errors.New("timestamp: missing (milliseconds since the trace's start)")
	case math.IsInf(*l.Timestamp, 0) || *l.Timestamp < 0:
		return fmt.Errorf("timestamp %v: want milliseconds >= 0", *l.Timestamp)
	case *l.Timestamp < prev:
		return fmt.Errorf("timestamp %v is before the previous line's %v: a trace is sorted by timestamp", *l.Timestamp, prev)
	}
	in, err := whole("input_length", l.InputLength, 1)
	if err != nil {
		return err
	}
	out, err := whole("output_length", l.OutputLength, 1)
	if err != nil {
		return err
	}
	q.TimestampMs, q.InputLength, q.OutputLength = *l.Timestamp, in, out
	q.HashIDs = q.HashIDs[:0]
	if l.HashIDs == nil {
		return nil
	}
	if n, most := len(*l.HashIDs), (in+block-1)/block; n > most {
		return fmt.Errorf("hash_ids: %d ids, more than the %d blocks of %d tokens an input of %d tokens has", n, most, block, in)
	}
	for i, h := range *l.HashIDs {
		if h != math.Trunc(h) || h < 0 || h > 1<<53 {
			return fmt.Errorf("hash_ids[%d] %v: want a whole number >= 0", i, h)
		}
		q.HashIDs = append(q.HashIDs, int64(h))
	}
	return nil
}

// TraceScanner reads a Mooncake trace a line at a time (blank lines are
// skipped), checking each line and hashing every byte read.
type TraceScanner struct {
	path  string
	block int
	sc    *bufio.Scanner
	line  int
	prev  float64
	q     TraceRequest
	err   error
}

// NewTraceScanner reads r, a Mooncake trace of block-token blocks; path
// names it in errors.
func NewTraceScanner(r io.Reader, path string, block int) *TraceScanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxTraceLineBytes)
	return &TraceScanner{path: path, block: block, sc: sc}
}

// Next reads the next request; false at the end or on an error (Err). The
// request returned is reused by the next call.
func (s *TraceScanner) Next() (*TraceRequest, bool) {
	for s.err == nil && s.sc.Scan() {
		s.line++
		b := bytes.TrimSpace(s.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := ParseTraceLine(b, s.block, s.prev, &s.q); err != nil {
			s.err = &TraceError{Path: s.path, Line: s.line, Msg: err.Error()}
			return nil, false
		}
		s.prev = s.q.TimestampMs
		s.q.Line = s.line
		return &s.q, true
	}
	if s.err == nil && s.sc.Err() != nil {
		msg := s.sc.Err().Error()
		if errors.Is(s.sc.Err(), bufio.ErrTooLong) {
			msg = fmt.Sprintf("a line longer than %d bytes (MaxTraceLineBytes)", MaxTraceLineBytes)
		}
		s.err = &TraceError{Path: s.path, Line: s.line + 1, Msg: msg}
	}
	return nil, false
}

// Err is the first error Next met: a *TraceError naming the line.
func (s *TraceScanner) Err() error { return s.err }

// TraceSource is a trace file opened for one pass: Mooncake lines read as
// they go, or a hone record's requests converted (ReadTraceFile).
type TraceSource interface {
	Next() (*TraceRequest, bool)
	Err() error
	Close() error
}

type fileTrace struct {
	*TraceScanner
	f *os.File
}

func (t fileTrace) Close() error { return t.f.Close() }

type sliceTrace struct {
	reqs []TraceRequest
	i    int
}

func (t *sliceTrace) Next() (*TraceRequest, bool) {
	if t.i == len(t.reqs) {
		return nil, false
	}
	t.i++
	return &t.reqs[t.i-1], true
}
func (t *sliceTrace) Err() error   { return nil }
func (t *sliceTrace) Close() error { return nil }

// TraceFile is a trace on disk: OpenTrace reads its format and shape in
// one checking pass, Open replays it.
type TraceFile struct {
	Path string
	Info schema.TraceInfo
	// converted holds a record's requests as trace requests (format
	// TraceRecord): a record is read whole anyway.
	converted []TraceRequest
}

// OpenTrace checks the trace at path in one streaming pass and returns
// its fingerprint and shape: a Mooncake trace of block-token blocks (0:
// MooncakeBlockSize), or a hone run record, recognized by its content
// (gzipped or not), whose requests become the trace (RecordTrace; block
// is then ignored). engineBlock is the serving engine's KV block size,
// which the implied hit rate is computed with. A trace that cannot be
// replayed is a *TraceError naming the line.
func OpenTrace(path string, block, engineBlock int) (*TraceFile, error) {
	if block == 0 {
		block = MooncakeBlockSize
	}
	if block < 1 || engineBlock < 1 {
		return nil, &TraceError{Path: path, Msg: fmt.Sprintf("block sizes %d (trace) and %d (engine): want at least 1 token", block, engineBlock)}
	}
	isRecord, err := looksLikeRecord(path)
	if err != nil {
		return nil, &TraceError{Path: path, Msg: err.Error()}
	}
	tf := &TraceFile{Path: path}
	var src TraceSource
	if isRecord {
		rec, err := ReadRecord(path)
		if err != nil {
			return nil, &TraceError{Path: path, Msg: err.Error()}
		}
		reqs, rb, err := RecordTrace(rec)
		if err != nil {
			return nil, &TraceError{Path: path, Msg: err.Error()}
		}
		tf.converted, block = reqs, rb
		tf.Info.Format = TraceRecord
		src = &sliceTrace{reqs: reqs}
	} else {
		tf.Info.Format = TraceMooncake
	}
	tf.Info.BlockSize, tf.Info.EngineBlockSize = block, engineBlock
	sum := sha256.New()
	if src == nil {
		if src, err = tf.open(sum); err != nil {
			return nil, err
		}
	}
	defer src.Close()
	im := NewImpliedHits(block, engineBlock)
	first := true
	for q, ok := src.Next(); ok; q, ok = src.Next() {
		if first {
			tf.Info.FirstMs, first = q.TimestampMs, false
		}
		tf.Info.LastMs = q.TimestampMs
		tf.Info.Requests++
		tf.Info.InputTokens += int64(q.InputLength)
		tf.Info.OutputTokens += int64(q.OutputLength)
		im.Add(q)
	}
	if err := src.Err(); err != nil {
		return nil, err
	}
	if tf.Info.Requests == 0 {
		return nil, &TraceError{Path: path, Msg: "no requests"}
	}
	tf.Info.ImpliedHitRate, tf.Info.ImpliedCachedTokens = im.Rate(), im.Cached
	if isRecord {
		if err := hashFile(path, sum); err != nil {
			return nil, &TraceError{Path: path, Msg: err.Error()}
		}
	}
	tf.Info.SHA256 = hex.EncodeToString(sum.Sum(nil))
	return tf, nil
}

// Open starts a pass over the trace's requests, in order.
func (tf *TraceFile) Open() (TraceSource, error) { return tf.open(io.Discard) }

// open is Open, copying the file's bytes as read to sum.
func (tf *TraceFile) open(sum io.Writer) (TraceSource, error) {
	if tf.Info.Format == TraceRecord {
		return &sliceTrace{reqs: tf.converted}, nil
	}
	f, err := os.Open(tf.Path)
	if err != nil {
		return nil, &TraceError{Path: tf.Path, Msg: err.Error()}
	}
	r, err := maybeGunzip(io.TeeReader(f, sum))
	if err != nil {
		f.Close()
		return nil, &TraceError{Path: tf.Path, Msg: err.Error()}
	}
	return fileTrace{NewTraceScanner(r, tf.Path, tf.Info.BlockSize), f}, nil
}

// maybeGunzip reads f through gzip when it starts with gzip's magic.
func maybeGunzip(f io.Reader) (io.Reader, error) {
	br := bufio.NewReader(f)
	if b, _ := br.Peek(2); len(b) == 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, nil
	}
	return br, nil
}

// looksLikeRecord reports whether the file's first JSON object has a
// schema_version: a hone record, whose first line is the whole record;
// a Mooncake line has none.
func looksLikeRecord(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return false, err
	}
	// A record opens with its schema_version (WriteRecord's field
	// order); look at the first bytes only, not a 256 MiB line.
	// (Indented or not.)
	head := make([]byte, 256)
	n, _ := io.ReadFull(r, head)
	compact := bytes.Join(bytes.Fields(head[:n]), nil)
	return bytes.HasPrefix(compact, []byte(`{"schema_version"`)), nil
}

func hashFile(path string, sum io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(sum, f)
	return err
}
