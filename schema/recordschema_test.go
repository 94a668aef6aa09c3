package schema_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/invopop/jsonschema"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/hone-llm/hone/schema"
)

// Regenerate the committed schema with
//
//	go test ./schema -run TestRecordSchemaGenerated -update
var update = flag.Bool("update", false, "rewrite schema/record.schema.json from the Go types")

const schemaFile = "record.schema.json"

// generate reflects the JSON Schema (draft 2020-12) of run records from
// schema.Record. What reflection cannot infer is added here: the enums of
// the typed values (from the package's own lists), the packed chunks'
// two forms, and null wherever encoding/json writes it (a nil pointer,
// slice or map without omitempty).
func generate() ([]byte, error) {
	r := &jsonschema.Reflector{
		AllowAdditionalProperties: true,
		Mapper:                    mapType,
		Namer:                     func(t reflect.Type) string { return t.Name() },
	}
	s := r.Reflect(&schema.Record{})
	s.ID = "https://github.com/hone-llm/hone/schema/record.schema.json"
	s.Title = "hone run record"
	s.Description = "One live replay (hone replay) or prediction: every request of every level of every run, with per-level summaries. " +
		"Generated from package schema's Go types (schema.Record); do not edit: go test ./schema -run TestRecordSchemaGenerated -update."
	for name, def := range s.Definitions {
		nullable(def, typeNamed(name))
	}
	constrain(s.Definitions)
	if rec := s.Definitions["Record"]; rec != nil {
		// Written since version 3 only: version 2's records, which readers
		// still read, lack them.
		rec.Required = slices.DeleteFunc(rec.Required, func(f string) bool { return f == "request_id_nonce" || f == "cached_tokens_rule" })
		if p, ok := rec.Properties.Get("schema_version"); ok {
			p.Enum = []any{schema.OldestSchemaVersion, schema.SchemaVersion}
			p.Type = ""
		}
	}
	return json.MarshalIndent(s, "", "  ")
}

// strs is a list of string constants as a JSON Schema enum.
func strs(vs ...string) []any {
	e := make([]any, len(vs))
	for i, v := range vs {
		e[i] = v
	}
	return e
}

// prop is definition def's property name, looked through the anyOf that
// nullable wraps it in.
func prop(defs jsonschema.Definitions, def, name string) *jsonschema.Schema {
	p, ok := defs[def].Properties.Get(name)
	if !ok {
		panic(def + "." + name + ": no such property")
	}
	if len(p.AnyOf) == 2 && p.AnyOf[1].Type == "null" {
		return p.AnyOf[0]
	}
	return p
}

// constrain adds what struct tags cannot state: the enums of the plain
// string fields (from the package's constants), the keys and counts of
// the by-name maps, the closed objects, and the rules that tie one field
// to another.
func constrain(defs jsonschema.Definitions) {
	outcome := &jsonschema.Schema{Type: "string", Enum: strs(schema.Outcomes()...)}
	prop(defs, "RequestRecord", "outcome").Enum = outcome.Enum
	counts := func(def, name string, keys *jsonschema.Schema) {
		p := prop(defs, def, name)
		p.PropertyNames = keys
		p.AdditionalProperties = &jsonschema.Schema{Type: "integer", Minimum: json.Number("1")}
	}
	counts("Record", "outcomes", outcome)
	counts("LevelRecord", "outcomes", outcome)
	counts("LevelRecord", "measured_failures", outcome)
	counts("Validation", "reasons", nil)
	counts("LevelRecord", "engine_metrics_keys", nil)
	prop(defs, "Model", "files_sha256").AdditionalProperties = &jsonschema.Schema{Type: "string", Pattern: "^[0-9a-f]{64}$"}
	// "": the replay stopped before choosing.
	prop(defs, "CacheState", "procedure").Enum = strs(schema.CacheReset, schema.CacheFreshPrefixes, "")
	prop(defs, "WorkloadRecord", "kind").Enum = strs(schema.WorkloadTrace)
	prop(defs, "WorkloadRecord", "load").Enum = strs(schema.LoadOpen, schema.LoadClosed)
	prop(defs, "TraceInfo", "format").Enum = strs(schema.TraceMooncake, schema.TraceRecord)
	for _, def := range []string{"Stamp", "PerRequest"} {
		defs[def].AdditionalProperties = jsonschema.FalseSchema
	}
	when := func(def string, cond, then, els *jsonschema.Schema) {
		defs[def].If, defs[def].Then, defs[def].Else = cond, then, els
	}
	// with is s with one property's schema.
	with := func(s *jsonschema.Schema, name string, p *jsonschema.Schema) *jsonschema.Schema {
		s.Properties = jsonschema.NewProperties()
		s.Properties.Set(name, p)
		return s
	}
	// A closed loop has concurrency levels and no rates; an open one, rates.
	when("WorkloadRecord",
		with(&jsonschema.Schema{Required: []string{"load"}}, "load", &jsonschema.Schema{Const: schema.LoadClosed}),
		with(&jsonschema.Schema{Required: []string{"concurrency"}}, "qps", &jsonschema.Schema{MaxItems: ptr(uint64(0))}),
		with(&jsonschema.Schema{}, "qps", &jsonschema.Schema{MinItems: ptr(uint64(1))}))
	// A closed loop's level offers no rate.
	when("LevelRecord",
		&jsonschema.Schema{Required: []string{"concurrency"}},
		with(&jsonschema.Schema{}, "offered_qps", &jsonschema.Schema{Const: 0}),
		with(&jsonschema.Schema{}, "offered_qps", &jsonschema.Schema{ExclusiveMinimum: json.Number("0")}))
	// An answered request has its status; a failed one, its error.
	when("RequestRecord",
		with(&jsonschema.Schema{}, "outcome", &jsonschema.Schema{Const: schema.OutcomeOK}),
		&jsonschema.Schema{Required: []string{"status"}},
		&jsonschema.Schema{Required: []string{"error"}})
}

func ptr[T any](v T) *T { return &v }

// types are the structs reachable from Record, by name.
var types = map[string]reflect.Type{}

func init() {
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || types[t.Name()] != nil {
			return
		}
		types[t.Name()] = t
		for i := range t.NumField() {
			walk(t.Field(i).Type)
		}
	}
	walk(reflect.TypeOf(schema.Record{}))
}

func typeNamed(name string) reflect.Type { return types[name] }

// nullable lets every property that encoding/json may write as null be
// null: pointers, slices and maps without omitempty (omitempty ones are
// left out when nil, never null).
func nullable(def *jsonschema.Schema, t reflect.Type) {
	if t == nil || def.Properties == nil {
		return
	}
	var fields func(t reflect.Type)
	fields = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				fields(ft)
				continue
			}
			if name == "-" || !f.IsExported() || strings.Contains(opts, "omitempty") {
				continue
			}
			if name == "" {
				name = f.Name
			}
			switch f.Type.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map:
			default:
				continue
			}
			if f.Type == reflect.TypeOf(json.RawMessage{}) {
				continue
			}
			p, ok := def.Properties.Get(name)
			if !ok {
				continue
			}
			cp := *p
			*p = jsonschema.Schema{AnyOf: []*jsonschema.Schema{&cp, {Type: "null"}}}
		}
	}
	fields(t)
}

// mapType gives the schema of the types reflection cannot read from their
// fields: encoded by hand (Chunks), free JSON (json.RawMessage), and the
// typed values with their lists.
func mapType(t reflect.Type) *jsonschema.Schema {
	switch t {
	case reflect.TypeOf(json.RawMessage{}):
		return &jsonschema.Schema{}
	case reflect.TypeOf(schema.Kind("")):
		var e []any
		for _, k := range schema.RecordKinds() {
			e = append(e, string(k))
		}
		return &jsonschema.Schema{Type: "string", Enum: e}
	case reflect.TypeOf(schema.Code("")):
		var e []any
		for _, c := range schema.Codes() {
			e = append(e, string(c))
		}
		return &jsonschema.Schema{Type: "string", Enum: e}
	case reflect.TypeOf(schema.Chunks{}):
		packed := &jsonschema.Schema{Type: "object", Description: "version 3: every chunk that carried output, packed (schema.ChunksEncoding)",
			Required: []string{"encoding", "count", "data"}, Properties: jsonschema.NewProperties(), AdditionalProperties: jsonschema.FalseSchema}
		packed.Properties.Set("encoding", &jsonschema.Schema{Const: schema.ChunksEncoding})
		packed.Properties.Set("count", &jsonschema.Schema{Type: "integer", Minimum: json.Number("0")})
		packed.Properties.Set("data", &jsonschema.Schema{Type: "string", ContentEncoding: "base64", Pattern: "^[A-Za-z0-9+/]*={0,2}$"})
		ints := &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Type: "array", Items: &jsonschema.Schema{Type: "integer"}}, {Type: "null"}}}
		arrays := &jsonschema.Schema{Type: "object", Description: "version 2: every chunk that carried output, in columns",
			Required: []string{"mono_ns", "unix_ns", "token_ids"}, Properties: jsonschema.NewProperties()}
		arrays.Properties.Set("mono_ns", ints)
		arrays.Properties.Set("unix_ns", ints)
		arrays.Properties.Set("token_ids", &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Type: "array", Items: &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Type: "integer", Minimum: json.Number("0")}}}, {Type: "null"}}})
		return &jsonschema.Schema{OneOf: []*jsonschema.Schema{packed, arrays, {Type: "null", Description: "version 3: no stream was read, or the chunks were dropped"}}}
	}
	return nil
}

// The committed schema is what the Go types give now: a type changed
// without regenerating fails here.
func TestRecordSchemaGenerated(t *testing.T) {
	got, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(schemaFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what the Go types give: go test ./schema -run TestRecordSchemaGenerated -update", schemaFile)
	}
	if !bytes.Equal(schema.RecordSchemaJSON(), want) {
		t.Errorf("schema.RecordSchemaJSON differs from %s", schemaFile)
	}
}

// Every run record kept under a testdata directory of the repository
// validates against the committed schema.
func TestRecordsValidate(t *testing.T) {
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(schema.RecordSchemaJSON()))
	if err != nil {
		t.Fatal(err)
	}
	c := sjs.NewCompiler()
	if err := c.AddResource(schemaFile, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.Contains(filepath.ToSlash(path), "/testdata/") || !(strings.HasSuffix(path, ".json") || strings.HasSuffix(path, ".json.gz")) {
			return nil
		}
		b, err := readMaybeGzip(path)
		if err != nil {
			return nil
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(b, &top) != nil || top["schema_version"] == nil || top["runs"] == nil || top["verdict_rule"] == nil {
			return nil // not a run record
		}
		inst, err := sjs.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		n++
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("no run record under testdata/")
	}
	t.Logf("%d records", n)
}

func readMaybeGzip(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return b, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
