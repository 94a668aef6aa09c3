// Package jsonout writes what a command prints with -o json: indented by
// two spaces, one value per call, ending in a newline. Every command (and
// the package that carries it out) prints JSON this one way, so tools that
// read hone's output see one format.
package jsonout

import (
	"encoding/json"
	"io"
)

// Write writes v to w as indented JSON.
func Write(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
