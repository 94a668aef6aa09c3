package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"
)

func TestParseChunk(t *testing.T) {
	for _, tc := range []struct {
		in        string
		ids       []int
		output    bool
		finish    string
		usage     bool
		errSyntax bool
		errShape  bool
	}{
		{in: `{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[5,7]}],"usage":null}`,
			ids: []int{5, 7}, output: true},
		{in: `{"choices":[{"text":"x","finish_reason":"length","token_ids":[1]}]}`, ids: []int{1}, output: true, finish: "length"},
		{in: `{"choices":[],"usage":{"prompt_tokens":4096,"prompt_tokens_details":{"cached_tokens":3968}}}`, usage: true},
		{in: `{"choices":[{"text":"","token_ids":[]}]}`},
		{in: `{"choices":[{"text":"hi"}]}`, output: true},
		{in: ` { "choices" : [ { "token_ids" : [ 0 , 2147483647 ] } ] } `, ids: []int{0, 2147483647}, output: true},
		{in: `{"choices":[{"token_ids":[1]}],"choices":[{"token_ids":[2]}]}`, ids: []int{2}, output: true},
		{in: `{"choices":[{"finish_reason":"le\u006egth"}]}`, finish: "length"},
		{in: `{"ch\u006fices":[{"token_ids":[9]}]}`, ids: []int{9}, output: true},
		{in: `{"choices":[{"token_ids":[1.5]}]}`, errShape: true},
		{in: `{"choices":[{"token_ids":[-1]}]}`, errShape: true},
		{in: `{"choices":[{"token_ids":[2147483648]}]}`, errShape: true},
		{in: `{"choices":[{"token_ids":["1"]}]}`, errShape: true},
		{in: `{"choices":{}}`, errShape: true},
		{in: `{"choices":[1]}`, errShape: true},
		{in: `{"usage":[]}`, errShape: true},
		{in: `[]`, errShape: true},
		{in: `{"choices":[{"text":"x"]}`, errSyntax: true},
		{in: `{"choices":[`, errSyntax: true},
		{in: `{"a":01}`, errSyntax: true},
		{in: `{"a":"\x"}`, errSyntax: true},
		{in: "{\"a\":\"\x01\"}", errSyntax: true},
		{in: `{"a":tru}`, errSyntax: true},
		{in: `{} {}`, errSyntax: true},
		{in: ``, errSyntax: true},
	} {
		v, err := parseChunk([]byte(tc.in), nil)
		switch {
		case tc.errSyntax || tc.errShape:
			if err == nil || errors.Is(err, errChunkSyntax) != tc.errSyntax {
				t.Errorf("%s: err %v, want syntax=%t", tc.in, err, tc.errSyntax)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case !slices.Equal(v.ids, tc.ids) || v.output != tc.output || v.finish != tc.finish || (v.usage != nil) != tc.usage:
			t.Errorf("%s: ids %v output %t finish %q usage %s", tc.in, v.ids, v.output, v.finish, v.usage)
		}
	}
}

// chunkOracle applies parseChunk's documented semantics with encoding/json.
func chunkOracle(data []byte) (v chunkView, usage, metrics, errV any, ok bool) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var top any
	if d.Decode(&top) != nil {
		return v, nil, nil, nil, false
	}
	m, isObj := top.(map[string]any)
	if !isObj {
		return v, nil, nil, nil, false
	}
	if u, has := m["usage"]; has && u != nil {
		if _, isObj := u.(map[string]any); !isObj {
			return v, nil, nil, nil, false
		}
		usage = u
	}
	metrics, errV = m["metrics"], m["error"]
	if c, has := m["choices"]; has && c != nil {
		list, isArr := c.([]any)
		if !isArr {
			return v, nil, nil, nil, false
		}
		for _, e := range list {
			ch, isObj := e.(map[string]any)
			if !isObj {
				return v, nil, nil, nil, false
			}
			if s, has := ch["text"]; has && s != nil {
				str, isStr := s.(string)
				if !isStr {
					return v, nil, nil, nil, false
				}
				v.output = v.output || str != ""
			}
			if ids, has := ch["token_ids"]; has && ids != nil {
				arr, isArr := ids.([]any)
				if !isArr {
					return v, nil, nil, nil, false
				}
				for _, x := range arr {
					num, isNum := x.(json.Number)
					if !isNum {
						return v, nil, nil, nil, false
					}
					n, err := strconv.ParseInt(string(num), 10, 64)
					if err != nil || n < 0 || n >= 1<<31 {
						return v, nil, nil, nil, false
					}
					v.ids = append(v.ids, int(n))
				}
				v.output = v.output || len(arr) > 0
			}
			if f, has := ch["finish_reason"]; has && f != nil {
				str, isStr := f.(string)
				if !isStr {
					return v, nil, nil, nil, false
				}
				v.finish, v.hasFinish = str, true
			}
		}
	}
	return v, usage, metrics, errV, true
}

func rawValue(b []byte) any {
	if b == nil {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	d.Decode(&v)
	return v
}

// FuzzParseChunk checks the hand-written chunk parser against
// encoding/json: it never accepts invalid JSON, calls only invalid JSON a
// syntax error, and whatever it accepts it reads as encoding/json would.
func FuzzParseChunk(f *testing.F) {
	f.Add([]byte(`{"id":"c","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"token_ids":[5]}],"usage":null}`))
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":4,"prompt_tokens_details":{"cached_tokens":3}},"metrics":{"time_to_first_token_ms":1.5}}`))
	f.Add([]byte(`{"choices":[{"text":"\u00e9\n","finish_reason":"length","token_ids":[0,1e2]}]}`))
	f.Add([]byte(`{"error":{"message":"x","code":500}}`))
	f.Add([]byte(`{"choices":[{"token_ids":[1]},{"token_ids":[2],"text":""}],"choices":null}`))
	f.Add([]byte(`[1,{"a":[true,false,null,-0.5e+3]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseChunk(data, nil)
		valid := json.Valid(data)
		if errors.Is(err, errChunkSyntax) && valid {
			t.Fatalf("valid JSON called a syntax error: %v", err)
		}
		if err != nil {
			return
		}
		if !valid {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		want, usage, metrics, errV, ok := chunkOracle(data)
		if !ok {
			t.Fatalf("accepted %q, which does not have a chunk's shape", data)
		}
		if !slices.Equal(v.ids, want.ids) || v.output != want.output || v.finish != want.finish || v.hasFinish != want.hasFinish {
			t.Fatalf("%q: got ids %v output %t finish %q/%t; want %v %t %q/%t", data, v.ids, v.output, v.finish, v.hasFinish,
				want.ids, want.output, want.finish, want.hasFinish)
		}
		for name, pair := range map[string][2]any{"usage": {rawValue(v.usage), usage}, "metrics": {rawValue(v.metrics), metrics},
			"error": {rawValue(v.errRaw), errV}} {
			if !reflect.DeepEqual(pair[0], pair[1]) {
				t.Fatalf("%q: %s %v, want %v", data, name, pair[0], pair[1])
			}
		}
	})
}
