package emulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// APIError is vLLM's error body: {"object":"error","message",...,"type",
// "param","code"}, sent with HTTP status Code.
type APIError struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func (e *APIError) Error() string { return e.Message }

func badRequest(format string, args ...any) *APIError {
	return &APIError{Object: "error", Message: fmt.Sprintf(format, args...), Type: "BadRequestError", Code: http.StatusBadRequest}
}

func writeError(w http.ResponseWriter, e *APIError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code)
	_ = json.NewEncoder(w).Encode(e)
}

// Limits are what a request is validated against.
type Limits struct {
	Model       string // served model name; "" in the request means this one
	MaxModelLen int
	Vocab       int
}

// CompletionRequest is a validated POST /v1/completions body.
type CompletionRequest struct {
	Model            string
	Prompt           []int  // token ids (tokenized when the prompt was text)
	PromptText       string // the text prompt, if one was sent
	MaxTokens        int
	MinTokens        int
	IgnoreEOS        bool
	Temperature      float64
	Stream           bool
	IncludeUsage     bool
	ReturnTokenIDs   bool
	KVTransferParams *KVTransferParams
	RequestID        string

	// promptLen counts the prompt's ids when Prompt keeps only the first
	// max-model-len of them (tokens); badID, when hasBadID, is the first
	// out-of-vocabulary id among those not kept.
	promptLen int
	badID     int
	hasBadID  bool
}

type rawStreamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// rawSampling is the part of a /v1/completions or /v1/chat/completions
// body that both endpoints read and validate the same way.
type rawSampling struct {
	Model            *string           `json:"model"`
	MaxTokens        *int              `json:"max_tokens"`
	MinTokens        *int              `json:"min_tokens"`
	IgnoreEOS        *bool             `json:"ignore_eos"`
	Temperature      *float64          `json:"temperature"`
	Seed             *int64            `json:"seed"` // accepted; outputs are deterministic anyway
	N                *int              `json:"n"`
	Stream           *bool             `json:"stream"`
	StreamOptions    *rawStreamOptions `json:"stream_options"`
	ReturnTokenIDs   *bool             `json:"return_token_ids"`
	KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
	RequestID        *string           `json:"request_id"`
}

type rawCompletion struct {
	rawSampling
	Prompt promptField `json:"prompt"`
}

// promptField is a completion's prompt, parsed (parsePrompt) as
// json.Unmarshal meets it, with the request's limits, so that no copy of
// its JSON is made or kept: a text prompt becomes its string and ids, a
// token-id prompt its ids, at most max-model-len of them either way.
type promptField struct {
	req *CompletionRequest
	lim Limits
	tok *Tokenizer
	set bool
	err *APIError
}

func (p *promptField) UnmarshalJSON(data []byte) error {
	p.set = true
	p.req.PromptText = "" // a key given twice: the last wins, as encoding/json has it
	p.err = parsePrompt(data, p.req, p.lim, p.tok)
	return nil // the error is the request's, answered after the model's
}

// DefaultMaxTokens is vLLM's default for /v1/completions (OpenAI's 16).
const DefaultMaxTokens = 16

// ParseCompletion decodes and validates a /v1/completions body the way vLLM
// does, returning a 400 (or 404 for an unknown model, as vLLM does) with
// vLLM's wording. It never panics on any input; tok may be nil when the
// prompt is token ids.
func ParseCompletion(body []byte, lim Limits, tok *Tokenizer) (*CompletionRequest, *APIError) {
	req := &CompletionRequest{Model: lim.Model}
	raw := rawCompletion{Prompt: promptField{req: req, lim: lim, tok: tok}}
	if err := decodeBody(body, &raw); err != nil {
		return nil, err
	}
	if err := lim.checkModel(raw.Model); err != nil {
		return nil, err
	}
	if !raw.Prompt.set {
		raw.Prompt.err = parsePrompt(nil, req, lim, tok)
	}
	if err := raw.Prompt.err; err != nil {
		return nil, err
	}
	if err := raw.apply(req, lim, raw.MaxTokens, false); err != nil {
		return nil, err
	}
	return req, nil
}

// decodeBody reads one JSON object into v. json.Unmarshal, not a
// json.Decoder: a Decoder copies the body into a buffer of its own, grown
// by doubling, up to twice the body more.
func decodeBody(body []byte, v any) *APIError {
	if err := json.Unmarshal(body, v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) && strings.HasSuffix(se.Error(), "after top-level value") {
			return badRequest("JSON decode error: unexpected data after the request object")
		}
		return badRequest("JSON decode error: %v", err)
	}
	return nil
}

// checkModel is vLLM's 404 for a model this server does not serve ("" and
// an absent model mean the served one).
func (lim Limits) checkModel(m *string) *APIError {
	if m != nil && *m != "" && *m != lim.Model {
		p := "model"
		return &APIError{Object: "error", Message: fmt.Sprintf("The model `%s` does not exist.", *m),
			Type: "NotFoundError", Param: &p, Code: http.StatusNotFound}
	}
	return nil
}

// apply validates the shared fields against req.Prompt, already set, and
// fills req. maxTokens is the requested output cap (max_tokens, or for chat
// max_completion_tokens when sent). Without one, completions default to 16
// and chat to the rest of the context, as vLLM does.
func (raw *rawSampling) apply(req *CompletionRequest, lim Limits, maxTokens *int, chat bool) *APIError {
	for _, id := range req.Prompt {
		if id < 0 || id >= lim.Vocab {
			return badRequest("Token id %d is out of vocabulary", id)
		}
	}
	if req.hasBadID {
		return badRequest("Token id %d is out of vocabulary", req.badID)
	}
	if err := raw.applyFlags(req); err != nil {
		return err
	}
	if err := raw.applyLengths(req, lim, maxTokens, chat); err != nil {
		return err
	}
	if err := raw.applyKVTransfer(req); err != nil {
		return err
	}
	if raw.RequestID != nil {
		req.RequestID = *raw.RequestID
	}
	return nil
}

// applyFlags validates and fills req's choice count, temperature and
// stream, EOS and token-id flags.
func (raw *rawSampling) applyFlags(req *CompletionRequest) *APIError {
	if raw.N != nil && *raw.N != 1 {
		return badRequest("n must be 1: the emulator generates one choice per request, got %d.", *raw.N)
	}
	if raw.Temperature != nil {
		t := *raw.Temperature
		if t < 0 || math.IsNaN(t) {
			return badRequest("temperature must be non-negative, got %v.", t)
		}
		req.Temperature = t
	}
	if raw.Stream != nil {
		req.Stream = *raw.Stream
	}
	if raw.StreamOptions != nil {
		if !req.Stream {
			return badRequest("Stream options can only be defined when `stream=True`.")
		}
		req.IncludeUsage = raw.StreamOptions.IncludeUsage != nil && *raw.StreamOptions.IncludeUsage
	}
	if raw.IgnoreEOS != nil {
		req.IgnoreEOS = *raw.IgnoreEOS
	}
	if raw.ReturnTokenIDs != nil {
		req.ReturnTokenIDs = *raw.ReturnTokenIDs
	}
	return nil
}

// applyLengths checks the prompt against the context and fills req's
// output bounds (apply's maxTokens and chat), checked against it.
func (raw *rawSampling) applyLengths(req *CompletionRequest, lim Limits, maxTokens *int, chat bool) *APIError {
	n := max(len(req.Prompt), req.promptLen)
	if n >= lim.MaxModelLen {
		return badRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", lim.MaxModelLen, n)
	}
	switch {
	case maxTokens != nil:
		req.MaxTokens = *maxTokens
		if req.MaxTokens < 1 {
			return badRequest("max_tokens must be at least 1, got %d.", req.MaxTokens)
		}
	case chat:
		req.MaxTokens = lim.MaxModelLen - n
	default:
		req.MaxTokens = min(DefaultMaxTokens, lim.MaxModelLen-n)
	}
	if req.MaxTokens > lim.MaxModelLen-n {
		name := "'max_tokens'"
		if chat {
			name = "'max_tokens' or 'max_completion_tokens'"
		}
		return badRequest("%s is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
			name, req.MaxTokens, lim.MaxModelLen, n, req.MaxTokens, lim.MaxModelLen, n)
	}
	if raw.MinTokens != nil {
		req.MinTokens = *raw.MinTokens
		if req.MinTokens < 0 {
			return badRequest("min_tokens must be greater than or equal to 0, got %d.", req.MinTokens)
		}
		if req.MinTokens > req.MaxTokens {
			return badRequest("min_tokens must be less than or equal to max_tokens=%d, got %d.", req.MaxTokens, req.MinTokens)
		}
	}
	return nil
}

// applyKVTransfer validates and fills req's kv_transfer_params.
func (raw *rawSampling) applyKVTransfer(req *CompletionRequest) *APIError {
	if p := raw.KVTransferParams; p != nil {
		if p.DoRemoteDecode && p.DoRemotePrefill {
			return badRequest("kv_transfer_params: do_remote_decode and do_remote_prefill cannot both be true")
		}
		if p.DoRemotePrefill && (p.RemoteRequestID == nil || p.RemoteHost == nil || p.RemotePort == nil) {
			return badRequest("kv_transfer_params: do_remote_prefill needs remote_request_id, remote_host and remote_port")
		}
		for _, b := range p.RemoteBlockIDs {
			if b < 0 {
				return badRequest("kv_transfer_params: remote_block_ids must be >= 0, got %d", b)
			}
		}
		req.KVTransferParams = p
	}
	return nil
}

// parsePrompt accepts a string, a list of token ids, or a one-element
// list of either. It keeps nothing of raw: the prompt's text is decoded
// into a string of its own, and at most max-model-len ids are kept
// (tokens), all counted.
func parsePrompt(raw []byte, req *CompletionRequest, lim Limits, tok *Tokenizer) *APIError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return badRequest("Either prompt or prompt_embeds must be provided and non-empty.")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return badRequest("Prompt cannot be empty.")
		}
		req.PromptText = s
		if tok == nil {
			tok = NewTokenizer()
		}
		k := newTokens(lim)
		tok.tokenizeInto(s, k)
		k.into(req)
		return nil
	}
	k := newTokens(lim)
	if parseIDs(raw, k) {
		if k.n == 0 {
			return badRequest("Prompt cannot be empty.")
		}
		k.into(req)
		return nil
	}
	var first []byte
	n := 0
	if !eachElem(raw, func(e []byte) bool { first = e; n++; return true }) {
		var list []json.RawMessage
		err := json.Unmarshal(raw, &list)
		return badRequest("prompt: want a string, a list of token ids, or a list of one of these: %v", err)
	}
	if n != 1 {
		return badRequest("prompt: the emulator serves one prompt per request, got a batch of %d", n)
	}
	if first[0] == '"' || first[0] == '[' {
		return parsePrompt(first, req, lim, tok)
	}
	return badRequest("prompt: want a string, a list of token ids, or a list of one of these")
}

// eachElem calls fn with each element of the JSON array raw, a slice of
// it (where json.Unmarshal into []json.RawMessage would copy each), until
// fn returns false. raw must be valid JSON, as json.Unmarshal hands it to
// an UnmarshalJSON; eachElem reports false if it is not an array.
func eachElem(raw []byte, fn func(elem []byte) bool) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' {
		return false
	}
	i := skipSpace(raw, 1)
	for raw[i] != ']' {
		end := valueEnd(raw, i)
		if !fn(raw[i:end]) {
			return true
		}
		i = skipSpace(raw, end)
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd is the index after the JSON value starting at b[i], b valid JSON.
func valueEnd(b []byte, i int) int {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			for j++; b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j
			}
			depth--
			if depth == 0 {
				return j + 1
			}
		case ',', ' ', '\n', '\t', '\r':
			if depth == 0 {
				return j
			}
		}
	}
	return len(b)
}

// Usage is the OpenAI usage object. PromptTokensDetails is set only with
// --enable-prompt-tokens-details, and, as in vLLM, only when some prompt
// tokens were cached.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"` // streams omit it unset, as vLLM (exclude_unset); vLLM's non-streaming answers write null
}

// Cached is the usage's cached prompt tokens: 0 when prompt_tokens_details
// is absent, which is how vLLM (and the emulator) say 0.
func (u *Usage) Cached() int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// PromptTokensDetails carries cached_tokens: the prompt tokens whose KV
// this engine took from its own prefix cache, exactly.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// RequestMetrics is the per-request "metrics" object
// (--enable-per-request-metrics), in model milliseconds.
//
// The first five keys are vLLM's, with vLLM's definitions: vLLM builds them
// (build_per_request_timing_metrics in vllm/entrypoints/generate/base/
// serving.py) from the engine core's timestamps of the request
// (RequestStateStats: queued_ts when the engine core took it in,
// scheduled_ts its first scheduling — "ignore preemptions" —, first_token_ts,
// last_token_ts):
//
//	time_to_first_token_ms  first scheduled → first token. Not from arrival:
//	                        vLLM's TTFT here leaves the queue out, so
//	                        TTFT − queue_time_ms would count the queue twice.
//	generation_time_ms      first token → last token (queue and TTFT excluded)
//	queue_time_ms           queued → first scheduled. A decode worker schedules
//	                        a remote-prefill request only once its KV has
//	                        arrived, so there it holds the KV wait too.
//	mean_itl_ms             generation_time_ms / (output tokens − 1); absent
//	                        for one output token (vLLM: null)
//	tokens_per_second       output tokens / (first scheduled → last token);
//	                        absent when that interval is 0 (vLLM: null)
//
// The emulator's queued instant is the request's arrival plus the
// profile's frontend_ms (the API server's work before the engine core). As vLLM, the object comes only
// with the flag: on a non-streaming answer, and in a stream on the final
// usage chunk (stream_options.include_usage).
//
// The remaining keys are hone extensions, the emulator's ground truth; vLLM
// has none of them (its other keys, speculative_decoding and
// output_token_metrics, are not modelled):
//
//	prefill_time_ms      first scheduled → first token (= time_to_first_token_ms)
//	kv_transfer_time_ms  decode worker: receipt → pulled KV usable
//	kv_transfer_late_ms  of kv_transfer_time_ms, the part past the modelled
//	                     end: the bytes crossed this host's side channel
//	                     late, so it is host time, not the modelled link's
//	decode_time_ms       first → last token (= generation_time_ms)
//	e2e_time_ms          arrival → last token
//	time_scale           wall = model × time_scale
type RequestMetrics struct {
	TimeToFirstTokenMs float64  `json:"time_to_first_token_ms"`
	GenerationTimeMs   float64  `json:"generation_time_ms"`
	QueueTimeMs        float64  `json:"queue_time_ms"`
	MeanITLMs          *float64 `json:"mean_itl_ms,omitempty"`
	TokensPerSecond    *float64 `json:"tokens_per_second,omitempty"`
	PrefillTimeMs      float64  `json:"prefill_time_ms"`
	KVTransferTimeMs   float64  `json:"kv_transfer_time_ms"`
	KVTransferLateMs   float64  `json:"kv_transfer_late_ms"`
	DecodeTimeMs       float64  `json:"decode_time_ms"`
	E2ETimeMs          float64  `json:"e2e_time_ms"`
	TimeScale          float64  `json:"time_scale"`
}

// requestMetrics builds the "metrics" object of a finished request by
// vLLM's definitions (see RequestMetrics).
func requestMetrics(res *Result, scale float64) *RequestMetrics {
	t := res.Timing
	m := &RequestMetrics{PrefillTimeMs: t.PrefillMs, KVTransferTimeMs: t.TransferMs, KVTransferLateMs: t.TransferLateMs, DecodeTimeMs: t.DecodeMs,
		E2ETimeMs: t.E2EMs, TimeScale: scale}
	if t.ScheduledMono != 0 {
		m.QueueTimeMs = t.ScheduledMs - t.QueuedMs
	}
	n := res.OutputTokens
	if n == 0 {
		return m
	}
	m.TimeToFirstTokenMs, m.GenerationTimeMs = t.PrefillMs, t.DecodeMs
	if n > 1 {
		itl := t.DecodeMs / float64(n-1)
		m.MeanITLMs = &itl
	}
	if inference := t.PrefillMs + t.DecodeMs; inference > 0 {
		tps := float64(n) / inference * 1000
		m.TokensPerSecond = &tps
	}
	return m
}

// CompletionChoice is one choice of a completion or stream chunk.
type CompletionChoice struct {
	Index          int     `json:"index"`
	Text           string  `json:"text"`
	Logprobs       any     `json:"logprobs"`
	FinishReason   *string `json:"finish_reason"`
	StopReason     any     `json:"stop_reason"`
	TokenIDs       []int   `json:"token_ids,omitempty"`
	PromptTokenIDs []int   `json:"prompt_token_ids,omitempty"`
}

// CompletionResponse is a non-streaming /v1/completions answer.
type CompletionResponse struct {
	ID               string             `json:"id"`
	Object           string             `json:"object"`
	Created          int64              `json:"created"`
	Model            string             `json:"model"`
	Choices          []CompletionChoice `json:"choices"`
	Usage            *Usage             `json:"usage"`
	KVTransferParams *KVTransferParams  `json:"kv_transfer_params"`
	Metrics          *RequestMetrics    `json:"metrics,omitempty"`
}

// CompletionChunk is one streamed event.
type CompletionChunk struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
	Metrics *RequestMetrics    `json:"metrics,omitempty"`
}

// parseIDs reads a JSON array of non-negative or negative integers, the
// common case of a token-id prompt, several times faster than
// encoding/json; anything else (floats, exponents, huge values, other
// types) reports false and goes through encoding/json. The ids go to k
// (which keeps at most max-model-len of them), not to a slice sized by the
// body.
func parseIDs(raw []byte, k *tokens) bool {
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return false
	}
	if k.max == 0 {
		k.ids = make([]int, 0, len(raw)/6)
	}
	i, n := 1, len(raw)-1
	skip := func() {
		for i < n && (raw[i] == ' ' || raw[i] == '\n' || raw[i] == '\t' || raw[i] == '\r') {
			i++
		}
	}
	skip()
	if i == n {
		return true
	}
	for {
		neg := false
		if raw[i] == '-' {
			neg = true
			i++
		}
		start, v := i, 0
		for i < n && raw[i] >= '0' && raw[i] <= '9' {
			if i-start >= 15 {
				return false
			}
			v = v*10 + int(raw[i]-'0')
			i++
		}
		if i == start || (raw[start] == '0' && i-start > 1) {
			return false
		}
		if neg {
			v = -v
		}
		k.add(v)
		skip()
		if i == n {
			return true
		}
		if raw[i] != ',' {
			return false
		}
		i++
		skip()
		if i == n {
			return false
		}
	}
}
