package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hone-llm/hone/schema"
)

// MaxRecordBytes bounds the JSON a record reader takes in, plain or
// decompressed (1 GiB, about 340,000 trace requests of 256 output tokens).
// It is a memory bound: ReadRecord streams the JSON and holds the decoded
// Record (each request's chunks packed, about 0.8 bytes per byte of its
// JSON) and one request's JSON at a time, so reading a record costs less
// than its JSON's size, never several times it. A corrupt or hostile file
// — a 2 MB .gz that inflates to 2 GiB, given to `hone gate check` by an
// untrusted pull request — is an error after a bounded pass, not an
// exhausted runner. A longer trace is replayed, and read, in parts.
const MaxRecordBytes = 1 << 30

// MaxDocumentBytes bounds what ReadRecordFile returns (256 MiB): it holds
// the whole document, and its readers decode it whole, so it is for the
// small documents beside records (baselines, simulation and capacity
// results), not for a long replay's record, which ReadRecord streams.
const MaxDocumentBytes = 256 << 20

// maxValueBytes bounds one value of a record (a request, or one of the
// header's fields) as ReadRecord streams it: the JSON decoder holds a
// whole value in its buffer, so this bounds the buffer (a request of
// 128,000 output tokens is under 2 MiB packed, 7 MiB in version 2's
// arrays).
const maxValueBytes = 16 << 20

// ErrNotRecord: a JSON document without a schema_version, which is some
// other document (a simulation or capacity result), not a run record.
var ErrNotRecord = errors.New("not a run record")

// ReadRecordFile returns the JSON of the file at path, decompressed when
// the file is gzip (recognized by its magic bytes 1f 8b, whatever its
// name), at most MaxDocumentBytes of it. It does not validate. Readers of
// documents other than run records use it, so that a .gz file reads
// everywhere a plain one does; run records are read with ReadRecord.
func ReadRecordFile(path string) ([]byte, error) {
	data, err := readBounded(path, MaxDocumentBytes)
	if err != nil {
		return nil, err
	}
	data, err = gunzipRecord(data, MaxDocumentBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// readBounded reads the file at path, refusing one of more than limit
// bytes before reading it (a regular file, by its size) or as soon as it
// passes limit (anything else: a pipe, a device).
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooBig := func(n string) error {
		return fmt.Errorf("%s: %s bytes, more than the %d a document may hold (MaxDocumentBytes): not a file hone reads", path, n, limit)
	}
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > limit {
		return nil, tooBig(fmt.Sprint(st.Size()))
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooBig("over " + fmt.Sprint(limit))
	}
	return data, nil
}

// gunzipRecord returns data decompressed if it is gzip (else data itself),
// refusing more than limit decompressed bytes. It inflates twice: first
// counting into nothing, so a bomb costs time bounded by limit and no
// memory, then into a buffer of exactly the counted size.
func gunzipRecord(data []byte, limit int64) ([]byte, error) {
	if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		return data, nil
	}
	inflate := func(w io.Writer) (int64, error) {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return 0, fmt.Errorf("gzip: %w", err)
		}
		n, err := io.Copy(w, io.LimitReader(zr, limit+1))
		if err != nil {
			return n, gzipError(err)
		}
		return n, nil
	}
	n, err := inflate(io.Discard)
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("gzip: decompresses to more than %d bytes: not a file hone reads", limit)
	}
	out := bytes.NewBuffer(make([]byte, 0, n))
	if _, err := inflate(out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// gzipError says what an inflater's error means.
func gzipError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = errors.New("unexpected end of data (truncated?)")
	}
	return fmt.Errorf("gzip: %w", err)
}

// ReadRecord reads and validates a record, plain or gzipped (recognized by
// its content, whatever the name), of version OldestSchemaVersion to
// SchemaVersion, streaming: the header is checked against the schema
// whole, every request against the schema's request as it comes, and
// nothing holds the JSON whole (see MaxRecordBytes). A record of another
// schema version, or one that does not match the schema, is an error
// naming the file and the field; a JSON document without schema_version
// is one wrapping ErrNotRecord. The Record returned is in the
// current version (SchemaVersion), its requests' chunks packed
// (Chunks.Pack; Chunks.Columns reads them): the versions differ only in
// how chunks are written, not in what they hold, so a version 2 record
// reads exactly as the version 3 record WriteRecord would make of it.
func ReadRecord(path string) (*schema.Record, error) {
	return readRecord(path, false)
}

// ReadRecordSummary is ReadRecord with every request's chunks checked and
// dropped as it is read, the record marked so (Record.DropChunks): every
// figure but the token timings and ids, what the gate reads, in about
// half the memory (hone gate baseline create on a 100,000-request trace's
// record: 270 MB RSS instead of 590).
func ReadRecordSummary(path string) (*schema.Record, error) {
	return readRecord(path, true)
}

func readRecord(path string, dropChunks bool) (*schema.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read record: %w", err)
	}
	defer f.Close()
	rec, err := decodeRecord(f, MaxRecordBytes, dropChunks)
	if err != nil {
		return nil, fmt.Errorf("read record %s: %w", path, err)
	}
	return rec, nil
}

// decodeRecord is ReadRecord on a stream, plain or gzip, of at most limit
// bytes of JSON (plain or decompressed), dropping every request's chunks
// when dropChunks.
func decodeRecord(r io.Reader, limit int64, dropChunks bool) (*schema.Record, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, gzipError(err)
		}
		in = zr
	}
	_, gz := in.(*gzip.Reader)
	d := &recordDecoder{in: &boundedReader{r: in, gz: gz, left: limit, limit: limit}, dropChunks: dropChunks}
	d.dec = json.NewDecoder(d.in)
	rec, err := d.record()
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil, errors.New("not JSON: unexpected end of data (truncated?)")
	}
	return rec, err
}

// errTooLarge is what boundedReader returns past its limit.
type errTooLarge struct{ limit int64 }

func (e errTooLarge) Error() string {
	return fmt.Sprintf("more than %d bytes of JSON (MaxRecordBytes, plain or decompressed): not a record hone reads "+
		"(a 100,000-request trace's record holds ~300 MB); replay a longer trace in parts, its lines split, and read each part's record", e.limit)
}

// errValueTooLarge is what boundedReader returns when one value passes
// maxValueBytes.
var errValueTooLarge = fmt.Errorf("a single value (a request, or a field of the record's header) of more than %d bytes: not a record hone reads", maxValueBytes)

// boundedReader reads at most limit bytes from r, then fails with
// errTooLarge: a gzip bomb stops there, having cost time, not memory. It
// fails with errValueTooLarge when more than maxValueBytes are read
// between two marks (the reader marks every value it ends).
type boundedReader struct {
	r           io.Reader
	gz          bool // r inflates: its errors are gzip's
	left, limit int64
	sinceMark   int64
}

// mark says a value ended.
func (b *boundedReader) mark() { b.sinceMark = 0 }

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.sinceMark > maxValueBytes {
		return 0, errValueTooLarge
	}
	if b.left <= 0 {
		// One byte more tells a stream of exactly limit bytes from a longer one.
		var one [1]byte
		if n, _ := b.r.Read(one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, errTooLarge{b.limit}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	b.sinceMark += int64(n)
	if err != nil && err != io.EOF && b.gz {
		err = gzipError(err)
	}
	return n, err
}

// recordDecoder walks a record's JSON token by token: everything but the
// requests is copied into head (the record with every level's requests
// left out: small, whatever the trace's length), and each request is
// checked against the schema, decoded and packed as it comes.
type recordDecoder struct {
	in         *boundedReader
	dec        *json.Decoder
	schemas    recordSchemas
	head       bytes.Buffer
	version    bool                       // schema_version was read
	dropChunks bool                       // drop every request's chunks once checked
	reqs       [][][]schema.RequestRecord // by run and level
}

func (d *recordDecoder) record() (*schema.Record, error) {
	var err error
	if d.schemas, err = compiledSchemas(); err != nil {
		return nil, err
	}
	err = d.object("record", func(key string) (bool, error) {
		switch key {
		case "schema_version":
			return true, d.schemaVersion()
		case "runs":
			d.reqs = nil
			return true, d.array("runs", true, func(i int) error { return d.run(i) })
		}
		return false, nil
	})
	if err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		return nil, err
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return nil, errors.New("not JSON: data after the record's object")
	}
	if !d.version {
		return nil, fmt.Errorf("schema_version none: want %d or %d (%w)", schema.OldestSchemaVersion, schema.SchemaVersion, ErrNotRecord)
	}
	head := d.head.Bytes()
	if err := validateJSON(d.schemas.record, head); err != nil {
		return nil, err
	}
	var rec schema.Record
	if err := json.Unmarshal(head, &rec); err != nil {
		return nil, err
	}
	for i, levels := range d.reqs {
		for j, reqs := range levels {
			if len(reqs) > 0 {
				rec.Runs[i].Levels[j].Requests = reqs
			}
		}
	}
	rec.SchemaVersion = schema.SchemaVersion
	rec.ChunksDropped = rec.ChunksDropped || d.dropChunks
	return &rec, nil
}

// schemaVersion reads and checks the schema_version's value: a record of
// another version stops here, before its runs are read.
func (d *recordDecoder) schemaVersion() error {
	var raw json.RawMessage
	if err := d.dec.Decode(&raw); err != nil {
		return err
	}
	var v *int
	if json.Unmarshal(raw, &v) != nil || v == nil || *v < schema.OldestSchemaVersion || *v > schema.SchemaVersion {
		if bytes.Equal(raw, []byte("null")) {
			return fmt.Errorf("schema_version none: want %d or %d (%w)", schema.OldestSchemaVersion, schema.SchemaVersion, ErrNotRecord)
		}
		return fmt.Errorf("schema_version %s: want %d or %d", raw, schema.OldestSchemaVersion, schema.SchemaVersion)
	}
	d.version = true
	d.head.Write(raw)
	return nil
}

// run reads runs[i], streaming its levels.
func (d *recordDecoder) run(i int) error {
	d.reqs = append(d.reqs, nil)
	where := fmt.Sprintf("runs[%d]", i)
	return d.object(where, func(key string) (bool, error) {
		if key != "levels" {
			return false, nil
		}
		d.reqs[i] = nil
		return true, d.array(where+".levels", true, func(j int) error {
			d.reqs[i] = append(d.reqs[i], nil)
			where := fmt.Sprintf("%s.levels[%d]", where, j)
			return d.object(where, func(key string) (bool, error) {
				if key != "requests" {
					return false, nil
				}
				d.reqs[i][j] = nil
				return true, d.array(where+".requests", false, func(k int) error {
					q, err := d.request()
					if err != nil {
						return fmt.Errorf("%s.requests[%d]: %w", where, k, err)
					}
					d.reqs[i][j] = append(d.reqs[i][j], q)
					return nil
				})
			})
		})
	})
}

// request reads one request: checked against the schema, decoded, its
// chunks packed.
func (d *recordDecoder) request() (schema.RequestRecord, error) {
	var raw json.RawMessage
	if err := d.dec.Decode(&raw); err != nil {
		return schema.RequestRecord{}, err
	}
	if err := validateJSON(d.schemas.request, raw); err != nil {
		return schema.RequestRecord{}, err
	}
	d.in.mark()
	var q schema.RequestRecord
	if err := json.Unmarshal(raw, &q); err != nil {
		return schema.RequestRecord{}, err
	}
	if d.dropChunks {
		q.Chunks = schema.Chunks{}
	}
	return q, q.Chunks.Pack()
}

// object reads the object at the decoder's position into head, key by
// key: each key's value is copied as it is unless value reads it (and
// writes what stands for it in head) and says so. A scalar where the
// object belongs is copied for the schema check to name; an array there is
// an error naming where.
func (d *recordDecoder) object(where string, value func(key string) (bool, error)) error {
	if open, err := d.open(where, '{', "an array where an object belongs"); !open || err != nil {
		return err
	}
	for n := 0; d.dec.More(); n++ {
		tok, err := d.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if n > 0 {
			d.head.WriteByte(',')
		}
		kb, _ := json.Marshal(key)
		d.head.Write(kb)
		d.head.WriteByte(':')
		done, err := value(key)
		if err != nil {
			return err
		}
		if !done {
			var raw json.RawMessage
			if err := d.dec.Decode(&raw); err != nil {
				return err
			}
			d.head.Write(raw)
		}
		d.in.mark()
	}
	if _, err := d.dec.Token(); err != nil { // '}'
		return err
	}
	d.head.WriteByte('}')
	return nil
}

// array reads the array at the decoder's position, calling each for every
// element; keep: the elements are written into head (each writes its
// own), else head gets an empty array. null or a scalar is copied for the
// schema check; an object there is an error naming where.
func (d *recordDecoder) array(where string, keep bool, each func(i int) error) error {
	if open, err := d.open(where, '[', "an object where an array belongs"); !open || err != nil {
		return err
	}
	for i := 0; d.dec.More(); i++ {
		if keep && i > 0 {
			d.head.WriteByte(',')
		}
		if err := each(i); err != nil {
			return err
		}
	}
	if _, err := d.dec.Token(); err != nil { // ']'
		return err
	}
	d.head.WriteByte(']')
	return nil
}

// open reads the next token, expecting delim, and writes it into head:
// open is true when it was delim. Any other scalar is copied for the
// schema check to name; the other delimiter is the error wrong.
func (d *recordDecoder) open(where string, delim json.Delim, wrong string) (open bool, err error) {
	tok, err := d.dec.Token()
	if err != nil {
		return false, err
	}
	if tok == delim {
		d.head.WriteRune(rune(delim))
		return true, nil
	}
	if _, ok := tok.(json.Delim); ok {
		return false, fmt.Errorf("%s: %s", where, wrong)
	}
	b, err := json.Marshal(tok)
	d.head.Write(b)
	return false, err
}
