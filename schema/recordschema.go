package schema

import (
	"bytes"
	_ "embed"
)

//go:embed record.schema.json
var recordSchemaJSON []byte

// RecordSchemaJSON returns the JSON Schema (draft 2020-12) of run records,
// generated from these types (go test ./schema -run
// TestRecordSchemaGenerated -update rewrites it).
func RecordSchemaJSON() []byte { return bytes.Clone(recordSchemaJSON) }
