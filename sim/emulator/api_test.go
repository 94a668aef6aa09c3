package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestBadInputGivesVLLMErrors(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01, MaxModelLen: 64})
	long := make([]int, 64)
	cases := []struct {
		name, body string
		code       int
		typ, msg   string
	}{
		{"malformed JSON", `{"prompt": [1, 2`, 400, "BadRequestError", "JSON decode error"},
		{"not an object", `[1,2,3]`, 400, "BadRequestError", "JSON decode error"},
		{"prompt over max-model-len", mustString(map[string]any{"prompt": long}), 400, "BadRequestError",
			"This model's maximum context length is 64 tokens. However, your request has 64 input tokens."},
		{"prompt plus max_tokens over max-model-len", `{"prompt":[1,2,3],"max_tokens":62}`, 400, "BadRequestError",
			"'max_tokens' is too large: 62. This model's maximum context length is 64 tokens and your request has 3 input tokens (62 > 64 - 3)."},
		{"unknown model", `{"model":"gpt-4","prompt":"hi"}`, 404, "NotFoundError", "The model `gpt-4` does not exist."},
		{"negative max_tokens", `{"prompt":"hi","max_tokens":-1}`, 400, "BadRequestError", "max_tokens must be at least 1, got -1."},
		{"zero max_tokens", `{"prompt":"hi","max_tokens":0}`, 400, "BadRequestError", "max_tokens must be at least 1, got 0."},
		{"min over max", `{"prompt":"hi","max_tokens":2,"min_tokens":3}`, 400, "BadRequestError", "min_tokens must be less than or equal to max_tokens=2, got 3."},
		{"negative temperature", `{"prompt":"hi","temperature":-0.5}`, 400, "BadRequestError", "temperature must be non-negative, got -0.5."},
		{"stream_options without stream", `{"prompt":"hi","stream_options":{"include_usage":true}}`, 400, "BadRequestError", "Stream options can only be defined when `stream=True`."},
		{"token out of vocabulary", `{"prompt":[1,151936]}`, 400, "BadRequestError", "Token id 151936 is out of vocabulary"},
		{"negative token", `{"prompt":[1,-5]}`, 400, "BadRequestError", "Token id -5 is out of vocabulary"},
		{"empty prompt", `{"prompt":""}`, 400, "BadRequestError", "Prompt cannot be empty."},
		{"no prompt", `{"max_tokens":3}`, 400, "BadRequestError", "Either prompt or prompt_embeds must be provided and non-empty."},
		{"batch of prompts", `{"prompt":["a","b"]}`, 400, "BadRequestError", "batch of 2"},
		{"float max_tokens", `{"prompt":"a","max_tokens":1.5}`, 400, "BadRequestError", "JSON decode error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(s.URL()+"/v1/completions", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e APIError
			b, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("body %q: %v", b, err)
			}
			if resp.StatusCode != c.code || e.Code != c.code || e.Object != "error" || e.Type != c.typ || !strings.Contains(e.Message, c.msg) {
				t.Errorf("got %d %s, want %d {object:error type:%s message containing %q}", resp.StatusCode, b, c.code, c.typ, c.msg)
			}
		})
	}
	// The server is still healthy after all of that.
	if r, err := http.Get(s.URL() + "/health"); err != nil || r.StatusCode != 200 {
		t.Fatalf("health after bad input: %v %v", r, err)
	}
}

func mustString(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestTokenizeDetokenize(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01})
	text := "func add(a, b int) int {\n\treturn a + b\n}\n"
	resp, err := postJSON(context.Background(), s.URL()+"/tokenize", map[string]any{"prompt": text, "add_special_tokens": false, "return_token_strs": true}, "")
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []int    `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	wantPieces := []string{"func", " add", "(", "a", ",", " b", " int", ")", " int", " ", "{", "\n\t", "return", " a", " ", "+", " b", "\n", "}", "\n"}
	if !slices.Equal(tok.TokenStrs, wantPieces) {
		t.Errorf("pieces %q, want %q", tok.TokenStrs, wantPieces)
	}
	if tok.Count != len(wantPieces) || tok.MaxModelLen != 32768 || tok.Tokens[1] != PieceID(" add") {
		t.Errorf("count %d max_model_len %d tokens %v", tok.Count, tok.MaxModelLen, tok.Tokens)
	}
	resp, err = postJSON(context.Background(), s.URL()+"/detokenize", map[string]any{"tokens": tok.Tokens}, "")
	if err != nil {
		t.Fatal(err)
	}
	var de struct{ Prompt string }
	json.NewDecoder(resp.Body).Decode(&de)
	resp.Body.Close()
	if de.Prompt != text {
		t.Errorf("detokenize %q, want %q", de.Prompt, text)
	}
	// An id this process never produced comes back as a placeholder.
	if got := s.tok.Detokenize([]int{7, TokenIMEnd}); got != "<|id:7|><|im_end|>" && !strings.HasSuffix(got, "<|im_end|>") {
		t.Errorf("unknown id: %q", got)
	}
}

// TestOutputsAgreeAcrossConfigs: temperature-0 output ids are a function of
// the prompt and position only, whatever the profile, batch, role or
// chunking, and the text is their pieces.
func TestOutputsAgreeAcrossConfigs(t *testing.T) {
	ctx := context.Background()
	prompt := append(sessionPrefix(3, 300), suffix(1, 20)...)
	body := map[string]any{"prompt": prompt, "max_tokens": 40, "ignore_eos": true, "temperature": 0}
	var ref []int
	for _, cfg := range []Config{
		{Profile: "exercise", TimeScale: 0.01},
		{Profile: "qwen2.5-coder-0.5b-h200", TimeScale: 0.01, MaxNumBatchedTokens: 64}, // chunked prefill
		{Profile: "qwen2.5-coder-0.5b-a10", TimeScale: 0.01, BlockSize: 32, DisablePrefixCaching: true},
	} {
		s := startServer(t, cfg)
		r := streamCompletion(ctx, s.URL(), body, "")
		if r.err != nil {
			t.Fatal(r.err)
		}
		nr, _, err := complete(ctx, s.URL(), map[string]any{"prompt": prompt, "max_tokens": 40, "ignore_eos": true, "return_token_ids": true}, "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.tokens, nr.Choices[0].TokenIDs) {
			t.Errorf("%s: stream and non-stream outputs differ", cfg.Profile)
		}
		if nr.Choices[0].Text != r.text || r.text != s.tok.Detokenize(r.tokens) {
			t.Errorf("%s: text %q vs %q", cfg.Profile, nr.Choices[0].Text, r.text)
		}
		if ref == nil {
			ref = r.tokens
		} else if !slices.Equal(ref, r.tokens) {
			t.Errorf("%s: output %v differs from %v", cfg.Profile, r.tokens, ref)
		}
		if len(r.tokens) != 40 || r.finish != "length" || r.usage.CompletionTokens != 40 || r.usage.PromptTokens != len(prompt) {
			t.Errorf("%s: %d tokens finish %q usage %+v", cfg.Profile, len(r.tokens), r.finish, r.usage)
		}
	}
	// Without ignore_eos the model stops at its natural length with EOS.
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.001})
	n := naturalLength(hashTokens(0, prompt))
	nr, _, err := complete(ctx, s.URL(), map[string]any{"prompt": prompt, "max_tokens": 2000, "return_token_ids": true}, "")
	if err != nil {
		t.Fatal(err)
	}
	ids := nr.Choices[0].TokenIDs
	if *nr.Choices[0].FinishReason != "stop" || len(ids) != n || ids[n-1] != TokenIMEnd || !slices.Equal(ids[:40], ref) {
		t.Errorf("natural stop: finish %q after %d tokens (want stop after %d)", *nr.Choices[0].FinishReason, len(ids), n)
	}
	// min_tokens past the natural length suppresses EOS.
	nr, _, err = complete(ctx, s.URL(), map[string]any{"prompt": prompt, "max_tokens": n + 5, "min_tokens": n + 5}, "")
	if err != nil || *nr.Choices[0].FinishReason != "length" || nr.Usage.CompletionTokens != n+5 {
		t.Errorf("min_tokens: %+v %v", nr, err)
	}
}

func TestServiceEndpoints(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01, Model: "coder"})
	// /version names the cost model, so that every record says what its
	// GPU time rests on.
	for path, want := range map[string]string{"/health": "", "/version": `"cost_profile":"exercise","cost_profile_source":"hand-made"`, "/v1/models": `"id":"coder"`, "/metrics": "vllm:kv_cache_usage_perc"} {
		r, err := http.Get(s.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || !bytes.Contains(b, []byte(want)) {
			t.Errorf("GET %s: %d %q", path, r.StatusCode, b)
		}
	}
	r, err := http.Post(s.URL()+"/reset_prefix_cache", "", nil)
	if err != nil || r.StatusCode != 200 {
		t.Errorf("reset_prefix_cache: %v %v", r, err)
	}
}

func FuzzParseCompletion(f *testing.F) {
	fuzzParse(f, []string{
		`{"prompt":"hello world","max_tokens":4}`,
		`{"prompt":[1,2,3],"max_tokens":2,"min_tokens":1,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":[[1,2]],"return_token_ids":true,"temperature":0}`,
		`{"prompt":["x"],"model":"m"}`,
		`{"prompt":[1],"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"a","remote_host":"h","remote_port":1,"remote_block_ids":[0,1]}}`,
		`{"prompt":[1],"kv_transfer_params":{"do_remote_decode":true}}`,
		`{"prompt": [1, 2`, `null`, `{}`, `{"prompt":[-1]}`, `{"prompt":[1e3]}`, `{"prompt":"a","max_tokens":99999999999999999999}`,
		`{"prompt":"a"} {"x":1}`, `{"prompt":[1],"n":2}`,
	}, ParseCompletion, checkAccepted)
}

func TestParseIDsMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{`[]`, `[1]`, `[ 1 , 2,3 ]`, `[-4,0,151935]`, "[\n1,\t2\r]", `[1,]`, `[,1]`, `[01]`, `[1.5]`, `[1e3]`,
		`[1 2]`, `[123456789012345678901]`, `["a"]`, `[-]`, `[`, `1`} {
		k := &tokens{}
		ok := parseIDs([]byte(s), k)
		got := k.ids
		var want []int
		err := json.Unmarshal([]byte(s), &want)
		if ok && (err != nil || !slices.Equal(got, want)) {
			t.Errorf("%s: parseIDs %v, encoding/json %v %v", s, got, want, err)
		}
		if !ok && err == nil && len(s) < 20 && !strings.Contains(s, "e") {
			t.Errorf("%s: parseIDs refused what encoding/json reads as %v", s, want)
		}
	}
}
