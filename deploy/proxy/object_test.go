package proxy

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestSplitObject(t *testing.T) {
	for _, in := range []string{
		`{}`, ` { "a" : 1 , "b":[1, [2,{"x":"]}"}]], "c":"q\"uote}", "d\u00e9":null,"e":{"f":{}} } `,
		`{"prompt":[1,2,3],"stream":true,"max_tokens":-1.5e3}`,
	} {
		got, err := splitObject([]byte(in))
		var want map[string]json.RawMessage
		if json.Unmarshal([]byte(in), &want) != nil {
			t.Fatalf("test bug: %s", in)
		}
		if err != nil || len(got) != len(want) {
			t.Fatalf("%s: got %v, %v", in, got, err)
		}
		for k, v := range want {
			if !bytes.Equal(bytes.TrimSpace(got[k]), bytes.TrimSpace(v)) {
				t.Errorf("%s: [%s] = %s, want %s", in, k, got[k], v)
			}
		}
	}
	for _, in := range []string{``, `[]`, `"x"`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1} x`, `{"a":"unterminated}`, `{"a":[1,2}`, `{a:1}`} {
		if _, err := splitObject([]byte(in)); err == nil {
			t.Errorf("%q: want an error", in)
		}
	}
}

// FuzzSplitObject: whatever json.Unmarshal accepts as an object,
// splitObject splits the same way; nothing panics.
func FuzzSplitObject(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"prompt":[1,2],"x":{"y":"}"}}`, `{"k\"":"v\\"}`, `[1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := splitObject(b)
		var want map[string]json.RawMessage
		if json.Unmarshal(b, &want) != nil || want == nil {
			return
		}
		if err != nil || len(got) != len(want) {
			t.Fatalf("%q: got %v %v, want %d members", b, got, err, len(want))
		}
	})
}
