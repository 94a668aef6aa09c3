package proxy

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
)

var errNotObject = errors.New("request body is not a JSON object")

// splitObject splits a JSON object into its top-level members without
// decoding them: one pass over the bytes that tracks strings and nesting
// only, where json.Unmarshal would validate and scan a prompt of thousands
// of token ids twice. Values are left for the engine to judge; the object's
// shape (keys, colons, commas, brackets, strings) must be well formed.
func splitObject(b []byte) (map[string]json.RawMessage, error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, errNotObject
	}
	out := make(map[string]json.RawMessage, 16)
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return out, trailing(b, i+1)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, errNotObject
		}
		end, esc, ok := stringEnd(b, i)
		if !ok {
			return nil, errNotObject
		}
		key := string(b[i+1 : end-1])
		if esc || !utf8.ValidString(key) { // encoding/json unescapes, and turns invalid UTF-8 into U+FFFD
			if err := json.Unmarshal(b[i:end], &key); err != nil {
				return nil, errNotObject
			}
		}
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, errNotObject
		}
		i = skipWS(b, i+1)
		vend, ok := valueEnd(b, i)
		if !ok || vend == i {
			return nil, errNotObject
		}
		out[key] = json.RawMessage(b[i:vend])
		i = skipWS(b, vend)
		if i >= len(b) {
			return nil, errNotObject
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return out, trailing(b, i+1)
		default:
			return nil, errNotObject
		}
	}
}

func trailing(b []byte, i int) error {
	if skipWS(b, i) != len(b) {
		return errNotObject
	}
	return nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string starting at b[i] == '"'.
func stringEnd(b []byte, i int) (end int, escaped, ok bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped, true
		}
	}
	return 0, false, false
}

// valueEnd returns the index after the value starting at b[i].
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		end, _, ok := stringEnd(b, i)
		return end, ok
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _, ok := stringEnd(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
			j++
		}
		return j, true
	}
}
