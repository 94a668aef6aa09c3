package emulator

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// chatChunk is one streamed /v1/chat/completions event as a client reads it.
type chatChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int                        `json:"index"`
		Delta        map[string]json.RawMessage `json:"delta"`
		Logprobs     any                        `json:"logprobs"`
		FinishReason *string                    `json:"finish_reason"`
		TokenIDs     []int                      `json:"token_ids"`
	} `json:"choices"`
	Usage          *Usage          `json:"usage"`
	Metrics        *RequestMetrics `json:"metrics"`
	PromptTokenIDs []int           `json:"prompt_token_ids"`
}

// chatStream is what a client saw of one streamed chat answer: every event
// decoded and raw, and whether [DONE] came.
type chatStream struct {
	chunks []chatChunk
	raw    []string
	done   bool
}

func postChat(t *testing.T, base string, body any) (*http.Response, []byte) {
	t.Helper()
	resp, err := postJSON(context.Background(), base+"/v1/chat/completions", body, "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func chatComplete(t *testing.T, base string, body map[string]any) *ChatCompletionResponse {
	t.Helper()
	resp, b := postChat(t, base, body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out ChatCompletionResponse
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return &out
}

func chatStreamed(t *testing.T, base string, body map[string]any) chatStream {
	t.Helper()
	resp, err := postJSON(context.Background(), base+"/v1/chat/completions", body, "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var out chatStream
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || out.done {
			t.Fatalf("unexpected line %q", line)
		}
		if data == "[DONE]" {
			out.done = true
			continue
		}
		var ch chatChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("bad chunk %q: %v", data, err)
		}
		out.chunks = append(out.chunks, ch)
		out.raw = append(out.raw, data)
	}
	if !out.done {
		t.Fatalf("stream ended without [DONE]: %v", sc.Err())
	}
	return out
}

func msgs(pairs ...string) []map[string]any {
	var out []map[string]any
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, map[string]any{"role": pairs[i], "content": pairs[i+1]})
	}
	return out
}

// TestChatTemplateTokens: the prompt is the documented ChatML with each
// special token one id and the text between them tokenized on its own;
// the server's prompt_tokens and prompt_token_ids are exactly that.
func TestChatTemplateTokens(t *testing.T) {
	m := []ChatMessage{{"system", "You are terse."}, {"user", "Hi there"}}
	text := ChatTemplate(m, true, false)
	if want := "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"; text != want {
		t.Fatalf("template %q, want %q", text, want)
	}
	p := PieceID
	want := []int{TokenIMStart, p("system"), p("\n"), p("You"), p(" are"), p(" terse"), p("."), TokenIMEnd, p("\n"),
		TokenIMStart, p("user"), p("\n"), p("Hi"), p(" there"), TokenIMEnd, p("\n"),
		TokenIMStart, p("assistant"), p("\n")}
	tok := NewTokenizer()
	if got := tok.TokenizeChat(text); !slices.Equal(got, want) {
		t.Fatalf("ids %v, want %v", got, want)
	}
	if got := ChatTemplate(m, false, true); got != "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there" {
		t.Errorf("continue_final_message template %q", got)
	}
	if got := tok.TokenizeChat("a<|im_end|><|endoftext|>b<|im_start|>"); !slices.Equal(got, []int{p("a"), TokenIMEnd, TokenEndOfText, p("b"), TokenIMStart}) {
		t.Errorf("adjacent specials: %v", got)
	}

	s := startServer(t, Config{Profile: "qwen2.5-coder-0.5b-a10", TimeScale: 0.01})
	r := chatComplete(t, s.URL(), map[string]any{"messages": msgs("system", "You are terse.", "user", "Hi there"),
		"max_tokens": 3, "ignore_eos": true, "return_token_ids": true})
	if r.Usage.PromptTokens != len(want) || !slices.Equal(r.PromptTokenIDs, want) {
		t.Errorf("prompt_tokens %d ids %v, want %d %v", r.Usage.PromptTokens, r.PromptTokenIDs, len(want), want)
	}
	// Text parts are joined with "\n", as vLLM does for string-content templates.
	parts := []map[string]any{{"role": "system", "content": []map[string]any{{"type": "text", "text": "You are"}, {"type": "text", "text": "terse."}}},
		{"role": "user", "content": "Hi there"}}
	r2 := chatComplete(t, s.URL(), map[string]any{"messages": parts, "max_tokens": 3, "ignore_eos": true, "return_token_ids": true})
	wantParts := tok.TokenizeChat(ChatTemplate([]ChatMessage{{"system", "You are\nterse."}, {"user", "Hi there"}}, true, false))
	if !slices.Equal(r2.PromptTokenIDs, wantParts) {
		t.Errorf("text parts: prompt ids %v, want %v", r2.PromptTokenIDs, wantParts)
	}
	// Without add_generation_prompt the answer continues the last message's role.
	r3 := chatComplete(t, s.URL(), map[string]any{"messages": msgs("user", "Hi there"), "add_generation_prompt": false,
		"max_tokens": 2, "ignore_eos": true})
	if r3.Choices[0].Message.Role != "user" || r3.Usage.PromptTokens != 7 {
		t.Errorf("add_generation_prompt false: role %q prompt_tokens %d, want user 7", r3.Choices[0].Message.Role, r3.Usage.PromptTokens)
	}
}

// TestChatNonStreaming: vLLM's chat.completion shape, exact token counts,
// and the same output as /v1/completions given the template's ids.
func TestChatNonStreaming(t *testing.T) {
	s := startServer(t, Config{Profile: "qwen2.5-coder-0.5b-a10", TimeScale: 0.01, Model: "coder"})
	body := map[string]any{"model": "coder", "messages": msgs("system", "You write Go.", "user", "Add two ints."),
		"max_tokens": 12, "ignore_eos": true, "temperature": 0, "seed": 7, "n": 1, "return_token_ids": true}
	resp, b := postChat(t, s.URL(), body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "object", "created", "model", "choices", "usage", "kv_transfer_params", "metrics", "prompt_token_ids"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("answer lacks %q: %s", k, b)
		}
	}
	var r ChatCompletionResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.ID, "chatcmpl-") || r.Object != "chat.completion" || r.Model != "coder" || r.Created == 0 || len(r.Choices) != 1 {
		t.Fatalf("answer %s", b)
	}
	c := r.Choices[0]
	if c.Index != 0 || c.Message.Role != "assistant" || c.FinishReason == nil || *c.FinishReason != "length" || c.Logprobs != nil || len(c.TokenIDs) != 12 {
		t.Errorf("choice %+v", c)
	}
	if c.Message.Content != s.tok.Detokenize(c.TokenIDs) || c.Message.Content == "" {
		t.Errorf("content %q, tokens' text %q", c.Message.Content, s.tok.Detokenize(c.TokenIDs))
	}
	wantPrompt := s.tok.TokenizeChat(ChatTemplate([]ChatMessage{{"system", "You write Go."}, {"user", "Add two ints."}}, true, false))
	u := r.Usage
	if u.PromptTokens != len(wantPrompt) || u.CompletionTokens != 12 || u.TotalTokens != len(wantPrompt)+12 ||
		u.PromptTokensDetails != nil || r.Metrics == nil || r.KVTransferParams != nil { // nothing cached: no details, as vLLM
		t.Errorf("usage %+v details %+v metrics %+v", u, u.PromptTokensDetails, r.Metrics)
	}
	// A chat request is the completion of its template.
	cr, _, err := complete(context.Background(), s.URL(), map[string]any{"prompt": wantPrompt, "max_tokens": 12, "ignore_eos": true, "return_token_ids": true}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cr.Choices[0].TokenIDs, c.TokenIDs) || cr.Choices[0].Text != c.Message.Content {
		t.Errorf("chat output %v, completion of its template %v", c.TokenIDs, cr.Choices[0].TokenIDs)
	}

	// max_completion_tokens wins over max_tokens; alone it is the cap too.
	for _, mt := range []map[string]any{{"max_tokens": 20, "max_completion_tokens": 5}, {"max_completion_tokens": 5}, {"max_tokens": 5}} {
		b := map[string]any{"messages": msgs("user", "hello"), "ignore_eos": true}
		for k, v := range mt {
			b[k] = v
		}
		if r := chatComplete(t, s.URL(), b); r.Usage.CompletionTokens != 5 || *r.Choices[0].FinishReason != "length" {
			t.Errorf("%v: %d tokens, finish %q", mt, r.Usage.CompletionTokens, *r.Choices[0].FinishReason)
		}
	}
	// Without ignore_eos the model stops at its natural length with EOS,
	// whose text is skipped.
	prompt := s.tok.TokenizeChat(ChatTemplate([]ChatMessage{{"user", "stop naturally"}}, true, false))
	n := naturalLength(hashTokens(0, prompt))
	r4 := chatComplete(t, s.URL(), map[string]any{"messages": msgs("user", "stop naturally"), "max_tokens": 2000, "return_token_ids": true})
	ids := r4.Choices[0].TokenIDs
	if *r4.Choices[0].FinishReason != "stop" || len(ids) != n || ids[n-1] != TokenIMEnd || strings.Contains(r4.Choices[0].Message.Content, "<|im_end|>") {
		t.Errorf("natural stop: finish %q after %d tokens, want stop after %d", *r4.Choices[0].FinishReason, len(ids), n)
	}
}

// TestChatDefaultMaxTokens: without max_tokens or max_completion_tokens a
// chat answer may fill the context (vLLM), unlike a completion's 16.
func TestChatDefaultMaxTokens(t *testing.T) {
	s := startServer(t, Config{Profile: "qwen2.5-coder-0.5b-a10", TimeScale: 0.01, MaxModelLen: 64})
	r := chatComplete(t, s.URL(), map[string]any{"messages": msgs("user", "fill the context"), "ignore_eos": true})
	if r.Usage.PromptTokens+r.Usage.CompletionTokens != 64 || *r.Choices[0].FinishReason != "length" {
		t.Errorf("usage %+v finish %q, want prompt + completion = 64", r.Usage, *r.Choices[0].FinishReason)
	}
}

// TestChatStreaming: a role-first delta, one content delta per token, the
// finish reason on the last token's chunk, the usage chunk, [DONE].
func TestChatStreaming(t *testing.T) {
	s := startServer(t, Config{Profile: "qwen2.5-coder-0.5b-a10", TimeScale: 0.01})
	const k = 9
	body := map[string]any{"messages": msgs("system", "Be brief.", "user", "Count."), "max_completion_tokens": k, "max_tokens": 40,
		"ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	st := chatStreamed(t, s.URL(), body)
	if len(st.chunks) != 1+k+1 {
		t.Fatalf("%d chunks, want role + %d tokens + usage:\n%s", len(st.chunks), k, strings.Join(st.raw, "\n"))
	}
	id := st.chunks[0].ID
	var text strings.Builder
	for i, ch := range st.chunks {
		if ch.ID != id || !strings.HasPrefix(id, "chatcmpl-") || ch.Object != "chat.completion.chunk" || ch.Model != s.cfg.Model || ch.Created == 0 {
			t.Errorf("chunk %d: %s", i, st.raw[i])
		}
		switch {
		case i == 0:
			if !strings.Contains(st.raw[0], `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`) ||
				ch.Usage != nil || ch.PromptTokenIDs != nil {
				t.Errorf("role chunk %s", st.raw[0])
			}
		case i <= k:
			c := ch.Choices[0]
			if len(ch.Choices) != 1 || len(c.Delta) != 1 || c.Delta["content"] == nil || ch.Usage != nil {
				t.Errorf("token chunk %d: %s", i, st.raw[i])
				continue
			}
			var piece string
			json.Unmarshal(c.Delta["content"], &piece)
			text.WriteString(piece)
			last := i == k
			if last != (c.FinishReason != nil) || (last && *c.FinishReason != "length") {
				t.Errorf("token chunk %d finish_reason: %s", i, st.raw[i])
			}
			if last != strings.Contains(st.raw[i], `"stop_reason":null`) {
				t.Errorf("token chunk %d: stop_reason only on the last: %s", i, st.raw[i])
			}
		default:
			if ch.Choices == nil || len(ch.Choices) != 0 || ch.Usage == nil || ch.Usage.CompletionTokens != k ||
				ch.Usage.PromptTokensDetails != nil || strings.Contains(st.raw[i], "prompt_tokens_details") || ch.Metrics == nil || !strings.Contains(st.raw[i], `"choices":[]`) {
				t.Errorf("usage chunk %s", st.raw[i])
			}
		}
	}
	// Streamed and non-streamed answers agree.
	nb := map[string]any{"messages": body["messages"], "max_tokens": k, "ignore_eos": true}
	if r := chatComplete(t, s.URL(), nb); r.Choices[0].Message.Content != text.String() {
		t.Errorf("streamed %q, non-streamed %q", text.String(), r.Choices[0].Message.Content)
	}

	// Without include_usage: no usage chunk and no metrics (vLLM puts them
	// on the usage chunk only); with return_token_ids, the prompt's ids on the role chunk and
	// each token's id on its chunk.
	body2 := map[string]any{"messages": body["messages"], "max_tokens": 4, "ignore_eos": true, "stream": true, "return_token_ids": true}
	st = chatStreamed(t, s.URL(), body2)
	wantPrompt := s.tok.TokenizeChat(ChatTemplate([]ChatMessage{{"system", "Be brief."}, {"user", "Count."}}, true, false))
	if len(st.chunks) != 5 || !slices.Equal(st.chunks[0].PromptTokenIDs, wantPrompt) || st.chunks[4].Metrics != nil {
		t.Fatalf("chunks:\n%s", strings.Join(st.raw, "\n"))
	}
	for i, ch := range st.chunks[1:] {
		if ch.Usage != nil || len(ch.Choices[0].TokenIDs) != 1 || ch.PromptTokenIDs != nil {
			t.Errorf("token chunk %d: %s", i+1, st.raw[i+1])
		}
	}
}

// TestChatBadInput: vLLM's error format, naming the field.
func TestChatBadInput(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01, MaxModelLen: 64})
	cases := []struct {
		name, body string
		code       int
		param      string
		msg        string
	}{
		{"malformed JSON", `{"messages": [`, 400, "", "JSON decode error"},
		{"no messages", `{"max_tokens":3}`, 400, "messages", "messages: field required"},
		{"null messages", `{"messages":null}`, 400, "messages", "messages: field required"},
		{"empty messages", `{"messages":[]}`, 400, "messages", "messages: the list must not be empty"},
		{"messages not a list", `{"messages":"hi"}`, 400, "messages", "messages: want a list"},
		{"message without role", `{"messages":[{"role":"system","content":"a"},{"content":"hi"}]}`, 400, "messages", "messages[1].role: field required"},
		{"empty role", `{"messages":[{"role":"","content":"hi"}]}`, 400, "messages", "messages[0].role: field required"},
		{"content a number", `{"messages":[{"role":"user","content":5}]}`, 400, "messages", "messages[0].content: want a string or a list of text parts"},
		{"image part", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages", `messages[0].content[0].type: "image_url" is not served`},
		{"part without text", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, 400, "messages", "messages[0].content[0].text: field required"},
		{"stream_options without stream", `{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, 400, "",
			"Stream options can only be defined when `stream=True`."},
		{"n of 2", `{"messages":[{"role":"user","content":"hi"}],"n":2}`, 400, "", "n must be 1"},
		{"zero max_completion_tokens", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0,"max_tokens":5}`, 400, "",
			"max_tokens must be at least 1, got 0."},
		{"max_completion_tokens too large", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":60}`, 400, "",
			"'max_tokens' or 'max_completion_tokens' is too large: 60. This model's maximum context length is 64 tokens and your request has 9 input tokens (60 > 64 - 9)."},
		{"min over max", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"min_tokens":3}`, 400, "",
			"min_tokens must be less than or equal to max_tokens=2, got 3."},
		{"negative temperature", `{"messages":[{"role":"user","content":"hi"}],"temperature":-1}`, 400, "", "temperature must be non-negative"},
		{"float seed", `{"messages":[{"role":"user","content":"hi"}],"seed":1.5}`, 400, "", "JSON decode error"},
		{"both continue and generation prompt", `{"messages":[{"role":"user","content":"hi"}],"continue_final_message":true}`, 400,
			"continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True."},
		{"prompt over max-model-len", mustString(map[string]any{"messages": msgs("user", strings.Repeat(" a", 70))}), 400, "",
			"This model's maximum context length is 64 tokens. However, your request has 78 input tokens."},
		{"unknown model", `{"model":"gpt-4","messages":[{"role":"user","content":"hi"}]}`, 404, "model", "The model `gpt-4` does not exist."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, b := postChat(t, s.URL(), []byte(c.body))
			var e APIError
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("body %q: %v", b, err)
			}
			param := ""
			if e.Param != nil {
				param = *e.Param
			}
			if resp.StatusCode != c.code || e.Code != c.code || e.Object != "error" || param != c.param || !strings.Contains(e.Message, c.msg) {
				t.Errorf("got %d %s, want %d param %q message containing %q", resp.StatusCode, b, c.code, c.param, c.msg)
			}
		})
	}
}

// TestChatPrefixCache: two chats sharing a long system prompt share its
// prefix-cache blocks, exactly as two completions of their templates do.
func TestChatPrefixCache(t *testing.T) {
	s := startServer(t, Config{Profile: "qwen2.5-coder-0.5b-a10", TimeScale: 0.01})
	var sys strings.Builder
	for i := range 300 {
		fmt.Fprintf(&sys, " rule%d", i)
	}
	a := []ChatMessage{{"system", sys.String()}, {"user", "Write a parser."}}
	b := []ChatMessage{{"system", sys.String()}, {"user", "Explain the parser." + strings.Repeat(" now", 20)}}
	body := func(m []ChatMessage, stream bool) map[string]any {
		out := map[string]any{"messages": msgs(m[0].Role, m[0].Content, m[1].Role, m[1].Content), "max_tokens": 4, "ignore_eos": true}
		if stream {
			out["stream"] = true
			out["stream_options"] = map[string]any{"include_usage": true}
		}
		return out
	}
	pa := s.tok.TokenizeChat(ChatTemplate(a, true, false))
	pb := s.tok.TokenizeChat(ChatTemplate(b, true, false))
	common := 0
	for common < min(len(pa), len(pb)) && pa[common] == pb[common] {
		common++
	}
	const bs = 16
	want := min(common/bs, (len(pb)-1)/bs) * bs
	// The shared part is the system message and "<|im_start|>user\n": 308
	// tokens, 19 full blocks; b's own 337 tokens fill 21.
	if common != 3+300+2+3 || want != 304 || len(pb) != 337 {
		t.Fatalf("common prefix %d tokens, cacheable %d", common, want)
	}
	if r := chatComplete(t, s.URL(), body(a, false)); r.Usage.PromptTokens != len(pa) || r.Usage.Cached() != 0 {
		t.Fatalf("cold request: usage %+v %+v", r.Usage, r.Usage.PromptTokensDetails)
	}
	st := chatStreamed(t, s.URL(), body(b, true))
	u := st.chunks[len(st.chunks)-1].Usage
	if u == nil || u.PromptTokens != len(pb) || u.Cached() != want {
		t.Fatalf("second chat: usage %+v, want cached_tokens %d of %d", u, want, len(pb))
	}
	// The same request again hits every full block but the one holding the
	// last prompt token (vLLM recomputes that token).
	again := chatComplete(t, s.URL(), body(b, false))
	if got, w := again.Usage.Cached(), (len(pb)-1)/bs*bs; got != w || got%bs != 0 {
		t.Errorf("repeat: cached_tokens %d, want %d", got, w)
	}
}

// TestChatPD: a chat request through vLLM's P/D proxy protocol: the
// prefill worker answers with kv_transfer_params naming its chatcmpl- id,
// and the decode worker, streaming, pulls the KV and answers as a
// colocated engine would.
func TestChatPD(t *testing.T) {
	cfg := Config{Profile: "qwen2.5-coder-0.5b-h200", TimeScale: 0.05}
	p, d, _, _ := pdPair(t, cfg, Faults{})
	colo := startServer(t, cfg)
	m := msgs("system", strings.Repeat(" context", 100), "user", "go")
	pr := chatComplete(t, p.URL(), map[string]any{"messages": m, "max_tokens": 1, "request_id": "x1",
		"kv_transfer_params": map[string]any{"do_remote_decode": true}})
	params := pr.KVTransferParams
	if params == nil || !params.DoRemotePrefill || *params.RemoteRequestID != "chatcmpl-x1" || len(params.RemoteBlockIDs) != (pr.Usage.PromptTokens+15)/16 {
		t.Fatalf("prefill answer %+v params %+v", pr, params)
	}
	body := map[string]any{"messages": m, "max_tokens": 6, "ignore_eos": true, "stream": true, "return_token_ids": true,
		"stream_options": map[string]any{"include_usage": true}, "kv_transfer_params": params}
	st := chatStreamed(t, d.URL(), body)
	delete(body, "kv_transfer_params")
	want := chatStreamed(t, colo.URL(), body)
	var got, ref []int
	for _, ch := range st.chunks[1:] {
		if len(ch.Choices) > 0 {
			got = append(got, ch.Choices[0].TokenIDs...)
		}
	}
	for _, ch := range want.chunks[1:] {
		if len(ch.Choices) > 0 {
			ref = append(ref, ch.Choices[0].TokenIDs...)
		}
	}
	if len(got) != 6 || !slices.Equal(got, ref) {
		t.Errorf("P/D output %v, colocated %v", got, ref)
	}
	if u := st.chunks[len(st.chunks)-1].Usage; u == nil || u.PromptTokens != pr.Usage.PromptTokens || u.Cached() != 0 {
		t.Errorf("decode usage %+v", u)
	}
}

func FuzzParseChat(f *testing.F) {
	fuzzParse(f, []string{
		`{"messages":[{"role":"user","content":"hello"}],"max_tokens":4}`,
		`{"messages":[{"role":"system","content":[{"type":"text","text":"a"}]},{"role":"user","content":null}],"max_completion_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"assistant","content":"x"}],"add_generation_prompt":false,"continue_final_message":true}`,
		`{"messages":[]}`, `{"messages":[{}]}`, `{"messages":[1]}`, `{"messages":"x"}`, `{}`, `null`, `{"messages":[{"role":"u","content":[{}]}]}`,
		`{"messages":[{"role":"user","content":"<|im_start|><|im_end|>"}],"seed":-1,"n":1}`,
	}, ParseChat, func(req *ChatRequest, lim Limits) error {
		if len(req.Messages) == 0 || req.Role == "" {
			return fmt.Errorf("no messages or role")
		}
		return checkAccepted(&req.CompletionRequest, lim)
	})
}

// fuzzParse feeds seeds and fuzzed bodies to parse, which must return
// exactly one of a request, that valid accepts, and a vLLM error (400, or
// 404 for an unknown model).
func fuzzParse[R any](f *testing.F, seeds []string, parse func([]byte, Limits, *Tokenizer) (*R, *APIError), valid func(*R, Limits) error) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	lim := Limits{Model: "m", MaxModelLen: 128, Vocab: 151936}
	tok := NewTokenizer()
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parse(body, lim, tok)
		if (req == nil) == (err == nil) {
			t.Fatalf("want exactly one of request and error, got %v %v", req, err)
		}
		if err != nil {
			if err.Object != "error" || (err.Code != 400 && err.Code != 404) || err.Message == "" {
				t.Fatalf("bad error %+v", err)
			}
			return
		}
		if e := valid(req, lim); e != nil {
			t.Fatalf("accepted invalid request %+v: %v", req, e)
		}
	})
}

// checkAccepted is what every accepted request satisfies.
func checkAccepted(req *CompletionRequest, lim Limits) error {
	if len(req.Prompt) == 0 || len(req.Prompt) >= lim.MaxModelLen || req.MaxTokens < 1 ||
		len(req.Prompt)+req.MaxTokens > lim.MaxModelLen || req.MinTokens < 0 || req.MinTokens > req.MaxTokens {
		return fmt.Errorf("prompt %d tokens, max_tokens %d, min_tokens %d", len(req.Prompt), req.MaxTokens, req.MinTokens)
	}
	for _, id := range req.Prompt {
		if id < 0 || id >= lim.Vocab {
			return fmt.Errorf("token id %d", id)
		}
	}
	return nil
}
