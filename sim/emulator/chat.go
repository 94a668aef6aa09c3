package emulator

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// POST /v1/chat/completions: vLLM's chat API over the completions path. The
// messages are rendered with ChatTemplate and tokenized with TokenizeChat
// (one message at a time: the ids are the same);
// from there a chat request is a completion request (same validation,
// scheduling, prefix cache, timing, trace line and chunk writer) whose
// answer is shaped as vLLM shapes a chat answer.

// ChatMessage is one message of a chat request, its content flattened to a
// string (text parts joined with "\n", as vLLM does for a template that
// takes string content, such as Qwen2.5's).
type ChatMessage struct {
	Role    string
	Content string
}

// ChatRequest is a validated POST /v1/chat/completions body. Its
// CompletionRequest holds the rendered prompt's ids (PromptText stays
// empty: the prompt is rendered and tokenized a message at a time).
type ChatRequest struct {
	CompletionRequest
	Messages []ChatMessage
	// Role is the answer's role: "assistant" with add_generation_prompt
	// (the default), else the last message's role, as in vLLM.
	Role string
}

type rawChat struct {
	rawSampling
	Messages             chatMessages `json:"messages"`
	MaxCompletionTokens  *int         `json:"max_completion_tokens"`
	AddGenerationPrompt  *bool        `json:"add_generation_prompt"`
	ContinueFinalMessage *bool        `json:"continue_final_message"`
}

type rawChatMessage struct {
	Role    *string     `json:"role"`
	Content chatContent `json:"content"`
}

// chatContent is a message's content, flattened (parseContent) as
// json.Unmarshal meets it, so that no copy of its JSON is made.
type chatContent struct {
	i   int // the message's index, for errors
	s   string
	err *APIError
}

func (c *chatContent) UnmarshalJSON(data []byte) error {
	c.s, c.err = parseContent(data, c.i)
	return nil
}

// chatMessages is a chat's messages, read one at a time as json.Unmarshal
// meets the list (parseMessages), so that what they cost is bounded by the
// prompt's limits rather than their number: each but the last is rendered
// and tokenized as it comes, at most max-model-len ids kept (tokens), and
// at most max-model-len/4+1 messages kept, since each renders to at least
// four tokens (<|im_start|>, its role, <|im_end|>, "\n") and more make a
// prompt refused anyway. The last waits for add_generation_prompt and
// continue_final_message.
type chatMessages struct {
	tok  *Tokenizer
	lim  Limits
	toks *tokens
	set  bool
	kept []ChatMessage
	last ChatMessage
	n    int // messages read
	err  *APIError
}

func (m *chatMessages) UnmarshalJSON(data []byte) error {
	// A key given twice: the last wins, as encoding/json has it.
	*m = chatMessages{tok: m.tok, lim: m.lim, toks: newTokens(m.lim), set: true}
	m.err = m.parse(data)
	return nil // the error is the request's, answered after the model's
}

type rawContentPart struct {
	Type *string `json:"type"`
	Text *string `json:"text"`
}

// badParam is a 400 that names the offending field in param, as vLLM's
// validation errors do.
func badParam(param, format string, args ...any) *APIError {
	e := badRequest(format, args...)
	e.Param = &param
	return e
}

// ParseChat decodes and validates a /v1/chat/completions body the way vLLM
// does: the fields shared with /v1/completions (see ParseCompletion) read
// the same, max_completion_tokens wins over max_tokens, and without either
// the cap is the rest of the context. It never panics on any input; tok
// may be nil.
func ParseChat(body []byte, lim Limits, tok *Tokenizer) (*ChatRequest, *APIError) {
	if tok == nil {
		tok = NewTokenizer()
	}
	raw := rawChat{Messages: chatMessages{tok: tok, lim: lim, toks: newTokens(lim)}}
	if err := decodeBody(body, &raw); err != nil {
		return nil, err
	}
	req := &ChatRequest{CompletionRequest: CompletionRequest{Model: lim.Model}, Role: "assistant"}
	if err := lim.checkModel(raw.Model); err != nil {
		return nil, err
	}
	msgs := &raw.Messages
	if !msgs.set {
		msgs.err = msgs.parse(nil)
	}
	if msgs.err != nil {
		return nil, msgs.err
	}
	req.Messages = msgs.kept
	addGen := raw.AddGenerationPrompt == nil || *raw.AddGenerationPrompt
	cont := raw.ContinueFinalMessage != nil && *raw.ContinueFinalMessage
	if addGen && cont {
		return nil, badParam("continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	if !addGen {
		req.Role = msgs.last.Role
	}
	// The last message, rendered as ChatTemplate ends the prompt.
	tok.tokenizeChatInto(ChatTemplate([]ChatMessage{msgs.last}, addGen, cont), msgs.toks)
	msgs.toks.into(&req.CompletionRequest)
	maxTokens := raw.MaxTokens
	if raw.MaxCompletionTokens != nil {
		maxTokens = raw.MaxCompletionTokens
	}
	if err := raw.apply(&req.CompletionRequest, lim, maxTokens, true); err != nil {
		return nil, err
	}
	return req, nil
}

// parse reads the messages list (raw, a slice of the body) a message at a
// time: each is checked, and the one before it rendered as a middle
// message (ChatTemplate with neither flag) and tokenized.
func (m *chatMessages) parse(raw []byte) *APIError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return badParam("messages", "messages: field required.")
	}
	keep := -1 // all
	if m.lim.MaxModelLen > 0 {
		keep = m.lim.MaxModelLen/4 + 1
	}
	var err *APIError
	array := eachElem(raw, func(e []byte) bool {
		i := m.n
		r := rawChatMessage{Content: chatContent{i: i}}
		if jerr := json.Unmarshal(e, &r); jerr != nil {
			err = badParam("messages", "messages: want a list of {role, content} objects: %v", jerr)
			return false
		}
		if r.Role == nil || *r.Role == "" {
			err = badParam("messages", "messages[%d].role: field required.", i)
			return false
		}
		if r.Content.err != nil {
			err = r.Content.err
			return false
		}
		if i > 0 {
			m.tok.tokenizeChatInto(ChatTemplate([]ChatMessage{m.last}, false, false), m.toks)
		}
		m.last = ChatMessage{Role: *r.Role, Content: r.Content.s}
		if keep < 0 || len(m.kept) < keep {
			m.kept = append(m.kept, m.last)
		}
		m.n++
		return true
	})
	switch {
	case !array:
		jerr := json.Unmarshal(raw, new([]rawChatMessage))
		return badParam("messages", "messages: want a list of {role, content} objects: %v", jerr)
	case err != nil:
		return err
	case m.n == 0:
		return badParam("messages", "messages: the list must not be empty.")
	}
	return nil
}

// parseContent accepts a string, null (an assistant message with tool
// calls only) or a list of {"type":"text","text":...} parts, read a part at
// a time (raw is valid JSON, as json.Unmarshal hands it to UnmarshalJSON):
// what a list costs is its joined text, however many parts it has.
func parseContent(raw []byte, i int) (string, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var (
		b   strings.Builder
		err *APIError
		j   int
	)
	array := eachElem(raw, func(e []byte) bool {
		var p rawContentPart
		if jerr := json.Unmarshal(e, &p); jerr != nil {
			err = badParam("messages", "messages[%d].content: want a string or a list of text parts: %v", i, jerr)
			return false
		}
		switch {
		case p.Type == nil:
			err = badParam("messages", "messages[%d].content[%d].type: field required.", i, j)
		case *p.Type != "text":
			err = badParam("messages", "messages[%d].content[%d].type: %q is not served: the emulator takes text parts only.", i, j, *p.Type)
		case p.Text == nil:
			err = badParam("messages", "messages[%d].content[%d].text: field required.", i, j)
		}
		if err != nil {
			return false
		}
		if j > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(*p.Text)
		j++
		return true
	})
	if !array {
		jerr := json.Unmarshal(raw, new([]rawContentPart))
		return "", badParam("messages", "messages[%d].content: want a string or a list of text parts: %v", i, jerr)
	}
	if err != nil {
		return "", err
	}
	return b.String(), nil
}

// ChatTemplate renders messages as the emulator's chat template, Qwen2.5's
// ChatML:
//
//	<|im_start|>{role}\n{content}<|im_end|>\n    for each message, then
//	<|im_start|>assistant\n                      with add_generation_prompt
//
// add_generation_prompt is vLLM's default. With continue_final_message the
// last message stays open (no <|im_end|>\n after it) and nothing follows.
// Unlike Qwen2.5's own template it adds no default system message and
// renders no tools or tool calls; the role is written as sent.
func ChatTemplate(msgs []ChatMessage, addGenerationPrompt, continueFinalMessage bool) string {
	var b strings.Builder
	n := len("<|im_start|>assistant\n")
	for _, m := range msgs {
		n += len("<|im_start|>\n<|im_end|>\n") + len(m.Role) + len(m.Content)
	}
	b.Grow(n) // once: a prompt's render is the size of its messages
	for i, m := range msgs {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		if continueFinalMessage && i == len(msgs)-1 {
			return b.String()
		}
		b.WriteString("<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// specialTexts are the special tokens TokenizeChat recognises in text.
var specialTexts = []struct {
	text string
	id   int
}{{"<|im_start|>", TokenIMStart}, {"<|im_end|>", TokenIMEnd}, {"<|endoftext|>", TokenEndOfText}}

// TokenizeChat tokenizes a rendered chat prompt as a Hugging Face tokenizer
// does: each special token's text (<|im_start|>, <|im_end|>,
// <|endoftext|>) becomes its single id, and the text between them is
// tokenized on its own with Tokenize. Two prompts that agree up to a point
// therefore agree in their ids up to about that point, so chats sharing a
// system prompt share prefix-cache blocks.
func (t *Tokenizer) TokenizeChat(text string) []int {
	k := &tokens{}
	t.tokenizeChatInto(text, k)
	return k.ids
}

// tokenizeChatInto adds TokenizeChat's ids of text to k.
func (t *Tokenizer) tokenizeChatInto(text string, k *tokens) {
	for text != "" {
		at, sp := len(text), -1
		for k, s := range specialTexts {
			if i := strings.Index(text, s.text); i >= 0 && i < at {
				at, sp = i, k
			}
		}
		if at > 0 {
			t.tokenizeInto(text[:at], k)
		}
		if sp < 0 {
			break
		}
		k.add(specialTexts[sp].id)
		text = text[at+len(specialTexts[sp].text):]
	}
}

func (s *Server) chatCompletions(w http.ResponseWriter, hr *http.Request) {
	s.generate(w, hr, chatCopies, func(body []byte) (*CompletionRequest, apiKind, *APIError) {
		req, err := ParseChat(body, s.lim, s.tok)
		if err != nil {
			return nil, apiKind{}, err
		}
		req.Messages = nil // their text is the body's size; the request keeps its ids
		return &req.CompletionRequest, apiKind{chat: true, idPrefix: "chatcmpl-", object: "chat.completion",
			chunkObject: "chat.completion.chunk", role: req.Role}, nil
	})
}

// ChatResponseMessage is the message of a non-streaming chat answer.
type ChatResponseMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls"` // always empty: the emulator calls no tools
}

// ChatChoice is the choice of a non-streaming chat answer.
type ChatChoice struct {
	Index        int                 `json:"index"`
	Message      ChatResponseMessage `json:"message"`
	Logprobs     any                 `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	StopReason   any                 `json:"stop_reason"`
	TokenIDs     []int               `json:"token_ids,omitempty"`
}

// ChatCompletionResponse is a non-streaming /v1/chat/completions answer.
// With return_token_ids the prompt's ids are top-level, as in vLLM.
type ChatCompletionResponse struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Created          int64             `json:"created"`
	Model            string            `json:"model"`
	Choices          []ChatChoice      `json:"choices"`
	Usage            *Usage            `json:"usage"`
	PromptTokenIDs   []int             `json:"prompt_token_ids,omitempty"`
	KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
	Metrics          *RequestMetrics   `json:"metrics,omitempty"`
}

func chatResponse(id string, created int64, model, role, text string, toks []int, req *CompletionRequest, res *Result,
	usage *Usage, metrics *RequestMetrics) *ChatCompletionResponse {
	fr := res.FinishReason
	ch := ChatChoice{Message: ChatResponseMessage{Role: role, Content: text, ToolCalls: []any{}}, FinishReason: &fr}
	out := &ChatCompletionResponse{ID: id, Object: "chat.completion", Created: created, Model: model,
		Usage: usage, KVTransferParams: res.KVTransferParams, Metrics: metrics}
	if req.ReturnTokenIDs {
		ch.TokenIDs = toks
		out.PromptTokenIDs = req.Prompt
	}
	out.Choices = []ChatChoice{ch}
	return out
}

// appendRoleChunk finishes a streamed chat answer's first chunk after head
// (the chunk's opening up to "choices":[): the role with empty content,
// and the prompt's ids when asked for (promptIDs, rendered).
func appendRoleChunk(buf []byte, role string, promptIDs []byte) []byte {
	buf = append(buf, `{"index":0,"delta":{"role":`...)
	buf = appendJSONString(buf, role)
	buf = append(buf, `,"content":""},"logprobs":null,"finish_reason":null}]`...)
	buf = append(buf, promptIDs...)
	return append(buf, "}\n\n"...)
}
