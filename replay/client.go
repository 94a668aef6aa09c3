package replay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hone-llm/hone/schema"
	openai "github.com/sashabaranov/go-openai"
)

// completionBody is the JSON body of POST /v1/completions. It sends no
// min_tokens: ignore_eos with max_tokens already yields exactly max_tokens
// tokens (validation checks the count), and vLLM rejects min_tokens > 1
// under a speculative-decoding config. go-openai's
// CompletionRequest supplies the OpenAI fields; vLLM's own fields sit beside
// it in this wrapper instead of a fork, so the upstream type can be updated
// freely. Temperature is shadowed because go-openai tags it omitempty: a 0
// would be dropped and vLLM would sample at its default temperature.
// encoding/json prefers the shallower field, so this one is the one written.
// The body goes out through net/http, not go-openai's client: its
// CreateCompletionStream takes only a CompletionRequest (no vLLM fields) and
// its stream reader hides when each event arrived (see sseReader).
type completionBody struct {
	openai.CompletionRequest
	Temperature    float32 `json:"temperature"`
	IgnoreEOS      bool    `json:"ignore_eos"`
	ReturnTokenIDs bool    `json:"return_token_ids"`
}

// encodeCompletion renders the body of one request: the prompt as token
// ids, greedy, exactly outputTokens tokens, streamed with a usage chunk
// (vLLM's per-request metrics ride on it and on nothing else; they need no
// other request field: see enginemetrics.go).
func encodeCompletion(model string, prompt []int, outputTokens int) ([]byte, error) {
	return json.Marshal(completionBody{
		CompletionRequest: openai.CompletionRequest{
			Model: model, Prompt: prompt, MaxTokens: outputTokens, Stream: true,
			StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		},
		Temperature: 0, IgnoreEOS: true, ReturnTokenIDs: true,
	})
}

// client sends completion requests and reads their streams.
type client struct {
	http *http.Client
	url  string // .../v1/completions
	// idHeader carries each request's id (the engine's
	// HTTP.RequestIDHeader); "": X-Request-Id.
	idHeader string
	scale    float64
	timeout  time.Duration // real time
	tb       timebase
	// pack: every request's chunks are packed when it ends (Chunks.Pack)
	// and, with spill, moved there.
	pack  bool
	spill *spill
}

// newTransport is tuned for an open loop: enough idle connections that a
// burst never waits for a dial, no compression on the event stream.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     50 * time.Second, // below the servers' 60 s idle timeout: never reuse a connection they are closing
		DisableCompression:  true,
		ReadBufferSize:      32 << 10,
		WriteBufferSize:     32 << 10,
	}
}

// ms converts a real duration since the level start to model milliseconds.
func (c *client) ms(d time.Duration) float64 { return float64(d) / 1e6 / c.scale }

// do sends one prepared request and streams its answer into rr, which the
// caller filled with the request's identity and schedule. start is the
// level's start; outputTokens is what validation expects.
func (c *client) do(ctx context.Context, body []byte, rr *schema.RequestRecord, start, due time.Time, outputTokens int, sse *sseReader) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		failRequest(rr, schema.OutcomeMalformed, fmt.Errorf("build request: %w", err))
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(cmp.Or(c.idHeader, "X-Request-Id"), rr.RequestID)

	sent := time.Now()
	rr.Sent = c.tb.Stamp(sent)
	rr.SentMs = c.ms(sent.Sub(start))
	rr.DispatchLagMs = c.ms(sent.Sub(due))
	resp, err := c.http.Do(req)
	if err != nil {
		failRequest(rr, classify(ctx, err, schema.OutcomeConnectError), fmt.Errorf("POST %s: %w", c.url, err))
		return
	}
	defer resp.Body.Close()
	rr.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		failRequest(rr, schema.OutcomeHTTPError, fmt.Errorf("POST %s: HTTP %d: %s", c.url, resp.StatusCode, errorMessage(resp.Body)))
		return
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		failRequest(rr, schema.OutcomeMalformed, fmt.Errorf("POST %s: reply is not an event stream (Content-Type %q): %s",
			c.url, resp.Header.Get("Content-Type"), errorMessage(resp.Body)))
		return
	}
	c.stream(ctx, resp.Body, rr, start, outputTokens, sse)
}

// stream reads events until [DONE], timing each chunk as it is parsed.
func (c *client) stream(ctx context.Context, body io.Reader, rr *schema.RequestRecord, start time.Time, outputTokens int, sse *sseReader) {
	sse.reset(body)
	ch := &rr.Chunks
	ch.MonoNs = make([]int64, 0, outputTokens)
	ch.UnixNs = make([]int64, 0, outputTokens)
	ch.TokenIDs = make([][]int, 0, outputTokens)
	var first, last time.Time
	flat := make([]int, 0, outputTokens) // every output id; chunks slice it
	for n := 0; ; n++ {
		data, err := sse.next()
		now := time.Now()
		if err != nil {
			switch {
			case err == io.EOF || err == io.ErrUnexpectedEOF:
				failRequest(rr, schema.OutcomeStreamCut, fmt.Errorf("stream ended after %d events without [DONE]", n))
			default:
				failRequest(rr, classify(ctx, err, schema.OutcomeStreamCut), fmt.Errorf("stream cut after %d events: %w", n, err))
			}
			break
		}
		if string(data) == "[DONE]" {
			rr.Outcome = schema.OutcomeOK
			break
		}
		v, err := parseChunk(data, flat)
		if err != nil {
			failRequest(rr, schema.OutcomeMalformed, fmt.Errorf("event %d is not a completion chunk: %v: %.200q", n, err, data))
			break
		}
		if v.errRaw != nil {
			failRequest(rr, schema.OutcomeHTTPError, fmt.Errorf("error event in stream: %s", apiErrorText(v.errRaw)))
			break
		}
		if v.usage != nil {
			var u openai.Usage
			if err := json.Unmarshal(v.usage, &u); err != nil {
				failRequest(rr, schema.OutcomeMalformed, fmt.Errorf("event %d: usage: %v", n, err))
				break
			}
			rr.PromptTokens = &u.PromptTokens
			if d := u.PromptTokensDetails; d != nil {
				rr.CachedTokens = &d.CachedTokens
			}
		}
		if v.metrics != nil {
			rr.EngineMetrics = append(json.RawMessage(nil), v.metrics...)
		}
		if v.hasFinish {
			rr.FinishReason = v.finish
		}
		if !v.output {
			continue
		}
		if first.IsZero() {
			first = now
		}
		last = now
		ch.MonoNs = append(ch.MonoNs, c.tb.MonoNs(now))
		ch.UnixNs = append(ch.UnixNs, now.UnixNano())
		ch.TokenIDs = append(ch.TokenIDs, v.ids[len(flat):len(v.ids):len(v.ids)])
		flat = v.ids
	}
	finishRequest(rr, start, first, last, flat, c.ms)
	validateRequest(rr, outputTokens)
	if c.pack {
		if err := rr.Chunks.Pack(); err != nil {
			panic(err) // the columns were built together above
		}
	}
	if c.spill != nil {
		// On failure (the disk beside the record full or gone) the chunks
		// stay in memory, as without a spill file; the spill keeps the
		// first error.
		_ = rr.Chunks.MoveTo(c.spill)
	}
}

// finishRequest derives the output count, hash and timings from the chunks.
func finishRequest(rr *schema.RequestRecord, start, first, last time.Time, ids []int, ms func(time.Duration) float64) {
	rr.OutputTokens = len(ids)
	if len(ids) > 0 {
		rr.OutputSHA256 = HashTokens(ids)
	} else if len(rr.Chunks.MonoNs) > 0 {
		// An engine without return_token_ids: count chunks, one token each.
		rr.OutputTokens = len(rr.Chunks.MonoNs)
	}
	if first.IsZero() {
		return
	}
	f, l := ms(first.Sub(start)), ms(last.Sub(start))
	ttft, fromSent := f-rr.ScheduledMs, f-rr.SentMs
	rr.FirstMs, rr.FinishMs, rr.TTFTMs, rr.TTFTFromSentMs = &f, &l, &ttft, &fromSent
	o := Outcome{ID: rr.ID, ArrivalMs: rr.SentMs, FirstMs: f, FinishMs: l, OutputTokens: rr.OutputTokens}
	tpot := o.TPOT()
	rr.TPOTMs = &tpot
}

// validateRequest checks the output against what the request asked for. Invalid
// reads "<check>: <detail>"; the record counts invalid requests by check.
func validateRequest(rr *schema.RequestRecord, outputTokens int) {
	switch {
	case rr.Outcome != schema.OutcomeOK:
		rr.Invalid = "failed: " + rr.Outcome
	case rr.OutputTokens != outputTokens:
		rr.Invalid = fmt.Sprintf("output_tokens: got %d, want %d", rr.OutputTokens, outputTokens)
	case rr.FinishReason != "length":
		rr.Invalid = fmt.Sprintf("finish_reason: got %q, want \"length\"", rr.FinishReason)
	case rr.PromptTokens != nil && *rr.PromptTokens != rr.InputTokens:
		rr.Invalid = fmt.Sprintf("prompt_tokens: the engine counted %d, hone sent %d", *rr.PromptTokens, rr.InputTokens)
	default:
		rr.Valid, rr.Invalid = true, ""
		return
	}
	rr.Valid = false
}

// failRequest records the first failure; later ones do not overwrite it.
func failRequest(rr *schema.RequestRecord, outcome string, err error) {
	if rr.Outcome != "" && rr.Outcome != schema.OutcomeOK {
		return
	}
	rr.Outcome, rr.Error = outcome, err.Error()
	rr.Invalid = "failed: " + outcome
}

// classify maps a transport error to an outcome: the request's own
// deadline is a timeout, the run's cancellation is canceled.
func classify(ctx context.Context, err error, otherwise string) string {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return schema.OutcomeTimeout
	case errors.Is(ctx.Err(), context.Canceled), errors.Is(err, context.Canceled):
		return schema.OutcomeCanceled
	case errors.As(err, &ne) && ne.Timeout():
		return schema.OutcomeTimeout
	}
	return otherwise
}

// errorMessage reads an error body (at most 64 KiB) and returns the
// engine's message: OpenAI's {"error":{"message"}}, vLLM's older
// {"object":"error","message"}, or the text itself.
func errorMessage(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	var v struct {
		openai.ErrorResponse
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &v) == nil {
		if v.Error != nil && v.Error.Message != "" {
			return v.Error.Message
		}
		if v.Message != "" {
			return v.Message
		}
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}

func apiErrorText(raw json.RawMessage) string {
	var e openai.APIError
	if json.Unmarshal(raw, &e) == nil && e.Message != "" {
		return e.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
