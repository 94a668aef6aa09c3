package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/schema"
)

// recordSchemas are the record schema (schema.RecordSchemaJSON, generated
// from package schema's types) compiled: the whole record's, and
// one request's (ReadRecord checks each as it streams).
type recordSchemas struct{ record, request *jsonschema.Schema }

var compiledSchemas = sync.OnceValues(func() (recordSchemas, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema.RecordSchemaJSON()))
	if err != nil {
		return recordSchemas{}, fmt.Errorf("compile record schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("record.schema.json", doc); err != nil {
		return recordSchemas{}, fmt.Errorf("compile record schema: %w", err)
	}
	var s recordSchemas
	if s.record, err = c.Compile("record.schema.json"); err != nil {
		return recordSchemas{}, fmt.Errorf("compile record schema: %w", err)
	}
	if s.request, err = c.Compile("record.schema.json#/$defs/RequestRecord"); err != nil {
		return recordSchemas{}, fmt.Errorf("compile record schema: %w", err)
	}
	return s, nil
})

// ValidateRecord checks a record's JSON against the schema.
func ValidateRecord(data []byte) error {
	sch, err := compiledSchemas()
	if err != nil {
		return err
	}
	return validateJSON(sch.record, data)
}

// validateJSON checks data against sch.
func validateJSON(sch *jsonschema.Schema, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(inst)
}

// WriteRecord writes rec to path atomically: a temporary file in the same
// directory, fsynced, then renamed over path (and the directory fsynced),
// so a reader never sees half a record. It writes the current
// SchemaVersion whatever rec.SchemaVersion says (the in-memory form is the
// same for every readable version). A path ending in ".gz" is written
// gzipped; ReadRecord recognizes gzip by its content, whatever the name.
// The JSON is json.Marshal's, byte for byte, but encoded a request at a
// time (EncodeRecord), never whole in memory.
func WriteRecord(path string, rec *schema.Record) error {
	// Compact: a full scan holds ~2,300 requests, and indenting would put
	// each number on its own line. Read it with jq (zcat first if .gz).
	gz := strings.HasSuffix(strings.ToLower(path), ".gz")
	err := atomicfile.WriteFunc(path, 0o644, func(w io.Writer) error {
		var zw *gzip.Writer
		if gz {
			var err error
			if zw, err = gzip.NewWriterLevel(w, gzip.BestCompression); err != nil {
				return err
			}
			w = zw
		}
		bw := bufio.NewWriterSize(w, 64<<10)
		if err := EncodeRecord(bw, rec); err != nil {
			return err
		}
		if err := bw.WriteByte('\n'); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if zw != nil {
			return zw.Close()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// EncodeRecord writes rec's JSON, at the current SchemaVersion, to w: the
// bytes json.Marshal would give, encoded a request at a time, so that a
// 100,000-request trace's record never sits in memory as JSON whole (it
// would take several hundred MB, and as much again while its buffer
// grows).
func EncodeRecord(w io.Writer, rec *schema.Record) error {
	cp := *rec
	cp.SchemaVersion = schema.SchemaVersion
	err := encodeAround(w, &cp.Runs, &cp, func(run *schema.RunRecord) error {
		r := *run
		return encodeAround(w, &r.Levels, &r, func(level *schema.LevelRecord) error {
			l := *level
			return encodeAround(w, &l.Requests, &l, func(q *schema.RequestRecord) error {
				b, err := json.Marshal(q)
				if err != nil {
					return err
				}
				_, err = w.Write(b)
				return err
			})
		})
	})
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	return nil
}

// encodeAround writes v's JSON to w with the value of its slice field
// *field encoded element by element by each. The JSON around the field's
// value is found by encoding v with the field empty ([]) and nil (null):
// the two differ exactly there. The field is left as it was.
func encodeAround[T any](w io.Writer, field *[]T, v any, each func(*T) error) (err error) {
	elems := *field
	defer func() { *field = elems }()
	*field = []T{}
	a, err := json.Marshal(v)
	if err != nil {
		return err
	}
	*field = nil
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if !bytes.HasPrefix(a[i:], []byte("[]")) || !bytes.HasPrefix(b[i:], []byte("null")) || !bytes.Equal(a[i+2:], b[i+4:]) {
		return fmt.Errorf("encode %T: cannot find a slice field's value in %.80s", v, a)
	}
	if _, err := w.Write(a[:i]); err != nil {
		return err
	}
	if elems == nil {
		_, err = w.Write([]byte("null"))
	} else {
		_, err = w.Write([]byte("["))
		for k := range elems {
			if err == nil && k > 0 {
				_, err = w.Write([]byte(","))
			}
			if err == nil {
				err = each(&elems[k])
			}
		}
		if err == nil {
			_, err = w.Write([]byte("]"))
		}
	}
	if err != nil {
		return err
	}
	_, err = w.Write(a[i+2:])
	return err
}
