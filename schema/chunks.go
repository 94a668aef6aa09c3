package schema

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Chunks holds the arrival of every streamed chunk that carried output, in
// columns: chunk k arrived at MonoNs[k] (CLOCK_MONOTONIC) = UnixNs[k] (wall)
// carrying TokenIDs[k] (empty when the engine does not return token ids).
// Records hold it packed (ChunksEncoding; version 2's records as these
// three arrays): see MarshalJSON and UnmarshalJSON in chunks.go.
//
// In memory the chunks may be packed too (Pack): the columns are then nil
// and Len and Columns read them. A trace replay (RunTrace) packs every
// request's chunks as it ends, since the columns take 48 bytes an output
// token where the packed form takes 3 to 9; ReadRecord, Run and MergeShards
// give columns.
type Chunks struct {
	MonoNs   []int64 `json:"mono_ns"`
	UnixNs   []int64 `json:"unix_ns"`
	TokenIDs [][]int `json:"token_ids"`

	// packed holds count chunks in ChunksEncoding when non-nil (the
	// columns are then nil); spilled, when non-nil instead, holds them at
	// spillOff (spillLen bytes).
	packed   []byte
	count    int
	spilled  ChunkStore
	spillOff int64
	spillLen int
}

// ChunkStore keeps packed chunks outside memory (replay's spill file):
// Put appends data and says where it went, Get reads n bytes back from
// there.
type ChunkStore interface {
	Put(data []byte) (int64, error)
	Get(off int64, n int) ([]byte, error)
}

// MoveTo moves c's packed chunks to s: c then reads them from there (Len,
// Columns, MarshalJSON as before). Chunks without a stream stay absent; c
// must be packed (Pack) or absent.
func (c *Chunks) MoveTo(s ChunkStore) error {
	if c.packed == nil {
		return nil
	}
	off, err := s.Put(c.packed)
	if err != nil {
		return err
	}
	*c = Chunks{spilled: s, spillOff: off, spillLen: len(c.packed), count: c.count}
	return nil
}

// InMemory reports whether c is packed and held in memory (Pack, not
// MoveTo).
func (c Chunks) InMemory() bool { return c.packed != nil }

// Stored reports whether c's packed chunks are held by a ChunkStore
// (MoveTo).
func (c Chunks) Stored() bool { return c.spilled != nil }

// Absent reports whether no stream was read (no columns, not packed): such
// chunks are written as null.
func (c Chunks) Absent() bool { return c.absent() }

// ChunksEncoding names the packed layout of a request's chunks in records
// of schema version 3:
//
//	"chunks": {"encoding": "hone-chunks/v1", "count": N, "data": "<base64>"}
//
// data (standard base64, padded) holds four columns of N entries each, one
// after the other:
//
//	mono_ns   varint   mono_ns[0]; then, for k >= 1, i[k] - i[k-1], where
//	                   i[k] = mono_ns[k] - mono_ns[k-1] is the interval
//	                   before chunk k and i[0] = 0 (so chunk 1 writes its
//	                   interval, later chunks the change in interval)
//	offset    varint   o[k] - o[k-1], where o[k] = unix_ns[k] - mono_ns[k]
//	                   and o[-1] = 0
//	ids       uvarint  m[k], the number of token ids chunk k carried
//	tokens    varint   the m[0] + ... + m[N-1] token ids in order, each raw
//	                   (not a delta from the previous id)
//
// varint is encoding/binary's signed varint (zigzag, then 7 bits a byte,
// low group first), uvarint its unsigned one. Differences wrap around in
// 64 bits, so every int64 comes back exactly: times are kept to the
// nanosecond. The first chunk carries the absolute clock readings; after
// it, a steady decode costs two bytes of interval change a chunk, where a
// plain interval (~6.5 ms) takes four, and the wall-minus-monotonic offset
// (constant up to a few ns of read jitter) one byte.
//
// Why columns, second differences and raw ids (measured on the seed
// workload, TestRecordBytesPerOutputToken: 128 requests of 128 tokens, one
// token a chunk, intervals 6.5 ms +- 4 µs, uniformly random ids): chunk by
// chunk with plain intervals the gzipped record took 8.4 bytes per output
// token; in columns with plain intervals 8.5, chunk by chunk with interval
// changes 8.5, in columns with interval changes 7.4 (the constant offset
// and id-count columns become runs gzip all but erases). Ids as deltas save
// 0.06 bytes a token on uniformly random ids but cost 0.45 on text-like
// (Zipf-distributed, repetitive) ones, whose repeated tokens raw ids keep
// as repeated bytes.
//
// A request that never read a stream has no chunks at all (all three
// columns nil) and is written as JSON null; a stream that carried no output
// is a packed object with count 0 and reads back as empty, non-nil columns,
// as it did in version 2's arrays. A chunk without token ids reads back as
// an empty, non-nil slice.
const ChunksEncoding = "hone-chunks/v1"

// minChunkBytes is the smallest encoded chunk: one byte in each of the
// mono_ns, offset and ids columns.
const minChunkBytes = 3

// MarshalJSON writes c in the packed form (see ChunksEncoding), or null
// when c has no columns at all. Columns of different lengths are an error:
// chunk k is MonoNs[k], UnixNs[k] and TokenIDs[k] together.
func (c Chunks) MarshalJSON() ([]byte, error) {
	if c.absent() {
		return []byte("null"), nil
	}
	data, err := c.encoded()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 48+base64.StdEncoding.EncodedLen(len(data)))
	out = append(out, `{"encoding":"`+ChunksEncoding+`","count":`...)
	out = strconv.AppendInt(out, int64(c.Len()), 10)
	out = append(out, `,"data":"`...)
	out = base64.StdEncoding.AppendEncode(out, data)
	out = append(out, `"}`...)
	return out, nil
}

// UnmarshalJSON reads either form: version 3's packed object or version
// 2's arrays ({"mono_ns": [...], "unix_ns": [...], "token_ids": [[...]]}).
// null leaves c as it is, as encoding/json does for a null object.
func (c *Chunks) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	var probe struct {
		Encoding *string `json:"encoding"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return fmt.Errorf("chunks: %w", err)
	}
	if probe.Encoding == nil {
		var cols struct {
			MonoNs   []int64 `json:"mono_ns"`
			UnixNs   []int64 `json:"unix_ns"`
			TokenIDs [][]int `json:"token_ids"`
		}
		if err := json.Unmarshal(b, &cols); err != nil {
			return fmt.Errorf("chunks: %w", err)
		}
		v := Chunks{MonoNs: cols.MonoNs, UnixNs: cols.UnixNs, TokenIDs: cols.TokenIDs}
		if err := v.checkColumns(); err != nil {
			return err
		}
		*c = v
		return nil
	}
	var p struct {
		Encoding string  `json:"encoding"`
		Count    *int64  `json:"count"`
		Data     *string `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("chunks: packed form: %w", err)
	}
	if p.Encoding != ChunksEncoding {
		return fmt.Errorf("chunks: encoding %q: want %q", p.Encoding, ChunksEncoding)
	}
	if p.Count == nil || p.Data == nil {
		return errors.New(`chunks: packed form without "count" or "data"`)
	}
	data, err := base64.StdEncoding.DecodeString(*p.Data)
	if err != nil {
		return fmt.Errorf("chunks: data is not standard base64: %w", err)
	}
	v, err := DecodeChunks(data, *p.Count)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// checkColumns: chunk k is MonoNs[k], UnixNs[k] and TokenIDs[k] together.
func (c Chunks) checkColumns() error {
	if len(c.UnixNs) != len(c.MonoNs) || len(c.TokenIDs) != len(c.MonoNs) {
		return fmt.Errorf("chunks: columns differ in length (mono_ns %d, unix_ns %d, token_ids %d)",
			len(c.MonoNs), len(c.UnixNs), len(c.TokenIDs))
	}
	return nil
}

// pack encodes c's chunks as ChunksEncoding describes (the bytes before
// base64).
func (c Chunks) pack() ([]byte, error) {
	if err := c.checkColumns(); err != nil {
		return nil, err
	}
	n := len(c.MonoNs)
	buf := make([]byte, 0, n*(minChunkBytes+4))
	var prev, interval int64
	for k, m := range c.MonoNs {
		if k == 0 {
			buf = binary.AppendVarint(buf, m)
		} else {
			i := m - prev
			buf = binary.AppendVarint(buf, i-interval)
			interval = i
		}
		prev = m
	}
	var off int64
	for k, m := range c.MonoNs {
		o := c.UnixNs[k] - m
		buf = binary.AppendVarint(buf, o-off)
		off = o
	}
	for _, ids := range c.TokenIDs {
		buf = binary.AppendUvarint(buf, uint64(len(ids)))
	}
	for _, ids := range c.TokenIDs {
		for _, id := range ids {
			buf = binary.AppendVarint(buf, int64(id))
		}
	}
	return buf, nil
}

// EncodeChunks returns c's chunks in the packed layout of ChunksEncoding
// (the bytes that "data" holds in base64).
func EncodeChunks(c Chunks) ([]byte, error) {
	b, err := c.encoded()
	return bytes.Clone(b), err
}

// absent: no stream was read (no columns, not packed), written as null.
func (c Chunks) absent() bool {
	return c.MonoNs == nil && c.UnixNs == nil && c.TokenIDs == nil && c.packed == nil && c.spilled == nil
}

// isPacked: the chunks are packed, in memory or in a spill file.
func (c Chunks) isPacked() bool { return c.packed != nil || c.spilled != nil }

// encoded is the chunks in the packed layout of ChunksEncoding, from the
// columns, as Pack kept them (not a copy) or read from the spill file.
func (c Chunks) encoded() ([]byte, error) {
	switch {
	case c.packed != nil:
		return c.packed, nil
	case c.spilled != nil:
		return c.spilled.Get(c.spillOff, c.spillLen)
	}
	return c.pack()
}

// packedBytes is encoded for packed chunks, which Pack made: a spill
// file that cannot be read back is a broken host, not bad input.
func (c Chunks) packedBytes() []byte {
	b, err := c.encoded()
	if err != nil {
		panic(fmt.Sprintf("schema: chunks spilled by this process do not read back: %v", err))
	}
	return b
}

// Len is the number of chunks, packed or in columns.
func (c Chunks) Len() int {
	if c.isPacked() {
		return c.count
	}
	return len(c.MonoNs)
}

// Pack replaces the columns with their packed form (ChunksEncoding),
// which Len, Columns and MarshalJSON read: 3 to 9 bytes a one-token chunk
// where the columns take 48. Chunks without a stream stay absent; packed
// chunks stay as they are.
func (c *Chunks) Pack() error {
	if c.isPacked() || c.absent() {
		return nil
	}
	data, err := c.pack()
	if err != nil {
		return err
	}
	// An exact copy: pack's buffer grows by doubling past its estimate.
	*c = Chunks{packed: append(make([]byte, 0, len(data)), data...), count: len(c.MonoNs)}
	return nil
}

// EachInterval calls f with the interval before every chunk after the
// first (MonoNs[k] - MonoNs[k-1]), read straight from the packed form's
// mono_ns column when packed, which holds them.
func (c Chunks) EachInterval(f func(int64)) {
	if !c.isPacked() {
		for k := 1; k < len(c.MonoNs); k++ {
			f(c.MonoNs[k] - c.MonoNs[k-1])
		}
		return
	}
	data := c.packedBytes()
	var interval int64
	for k := range c.count {
		v, w := binary.Varint(data)
		if w <= 0 {
			panic("schema: chunks packed by Pack do not decode") // Pack's own output always does
		}
		data = data[w:]
		if k > 0 {
			interval += v
			f(interval)
		}
	}
}

// Columns returns the chunks in columns: c itself when it holds them,
// else decoded from the packed form (a fresh copy each call).
func (c Chunks) Columns() Chunks {
	if !c.isPacked() {
		return c
	}
	v, err := DecodeChunks(c.packedBytes(), int64(c.count))
	if err != nil {
		panic(fmt.Sprintf("schema: chunks packed by Pack do not decode: %v", err)) // Pack's own output always decodes
	}
	return v
}

// DecodeChunks decodes count chunks packed as ChunksEncoding describes.
// Malformed data (a truncated or overlong varint, fewer or more chunks than
// count, more token ids than the data can hold) is an error, never a
// panic, and what it allocates is bounded by len(data): every chunk takes
// at least 3 bytes and every token id at least 1.
func DecodeChunks(data []byte, count int64) (Chunks, error) {
	switch {
	case count < 0:
		return Chunks{}, fmt.Errorf("chunks: count %d is negative", count)
	case count > int64(len(data)/minChunkBytes):
		return Chunks{}, fmt.Errorf("chunks: count %d, but %d bytes of data hold at most %d chunks", count, len(data), len(data)/minChunkBytes)
	}
	n := int(count)
	c := Chunks{MonoNs: make([]int64, n), UnixNs: make([]int64, n), TokenIDs: make([][]int, n)}
	pos := 0
	varint := func(k int, column string) (int64, error) {
		v, w := binary.Varint(data[pos:])
		if w <= 0 {
			return 0, varintError(data, pos, w, k, count, column)
		}
		pos += w
		return v, nil
	}
	var mono, interval int64
	for k := range n {
		v, err := varint(k, "mono_ns")
		if err != nil {
			return Chunks{}, err
		}
		if k == 0 {
			mono = v
		} else {
			interval += v
			mono += interval
		}
		c.MonoNs[k] = mono
	}
	var off int64
	for k := range n {
		v, err := varint(k, "offset")
		if err != nil {
			return Chunks{}, err
		}
		off += v
		c.UnixNs[k] = c.MonoNs[k] + off
	}
	counts := make([]int, n)
	total := 0
	for k := range n {
		m, w := binary.Uvarint(data[pos:])
		if w <= 0 {
			return Chunks{}, varintError(data, pos, w, k, count, "ids")
		}
		pos += w
		// Every id takes a byte at least, and the ids come last.
		if left := uint64(len(data) - pos); m > left || uint64(total)+m > left {
			return Chunks{}, fmt.Errorf("chunks: chunk %d of %d: %d token ids (%d before it), but only %d bytes of data are left", k, count, m, total, left)
		}
		counts[k] = int(m)
		total += int(m)
	}
	flat := make([]int, total) // non-nil even when empty: a chunk without ids reads as []int{}
	for k, m := range counts {
		ids := flat[:m:m]
		flat = flat[m:]
		for j := range ids {
			v, err := varint(k, "tokens")
			if err != nil {
				return Chunks{}, err
			}
			ids[j] = int(v)
			if int64(ids[j]) != v {
				return Chunks{}, fmt.Errorf("chunks: chunk %d of %d: token id %d does not fit in an int", k, count, v)
			}
		}
		c.TokenIDs[k] = ids
	}
	if pos != len(data) {
		return Chunks{}, fmt.Errorf("chunks: %d bytes of data after the last of %d chunks (count too small?)", len(data)-pos, count)
	}
	return c, nil
}

// varintError explains binary.Varint's or Uvarint's failure (w <= 0) at
// pos, in chunk k's entry of a column.
func varintError(data []byte, pos, w, k int, count int64, column string) error {
	if w == 0 {
		return fmt.Errorf("chunks: %s column, chunk %d of %d: data ends inside a varint at byte %d of %d (truncated, or count too large)", column, k, count, pos, len(data))
	}
	return fmt.Errorf("chunks: %s column, chunk %d of %d: varint at byte %d overflows 64 bits", column, k, count, pos)
}
