package emulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startServer starts an emulator on a free loopback port and stops it when
// the test ends.
func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	cfg.Host = "127.0.0.1"
	cfg.Port = 0
	if cfg.Role == RolePrefill {
		cfg.KVPort = 0
	}
	cfg.EnablePromptTokensDetails = true
	cfg.EnablePerRequestMetrics = true
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var testClient = &http.Client{Transport: &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 2048,
	IdleConnTimeout: time.Minute}, Timeout: 5 * time.Minute}

// streamResult is what the test client saw of one streamed completion.
type streamResult struct {
	sent, first, last time.Time
	tokens            []int
	text              string
	finish            string
	usage             *Usage
	metrics           *RequestMetrics
	status            int
	err               error
}

func postJSON(ctx context.Context, url string, body any, reqID string) (*http.Response, error) {
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if reqID != "" {
		req.Header.Set("X-Request-Id", reqID)
	}
	return testClient.Do(req)
}

// streamCompletion sends body with stream:true and reads the SSE stream.
func streamCompletion(ctx context.Context, base string, body map[string]any, reqID string) streamResult {
	body = maps.Clone(body)
	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	body["return_token_ids"] = true
	b, err := json.Marshal(body)
	if err != nil {
		return streamResult{err: err}
	}
	// The clock starts once the body is ready to go, as a replay client
	// that prepares its requests ahead of their send times would.
	res := streamResult{sent: time.Now()}
	resp, err := postJSON(ctx, base+"/v1/completions", b, reqID)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		res.err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20) // the first chunk echoes the prompt ids
	var text strings.Builder
	done := false
	for sc.Scan() {
		line := sc.Text()
		now := time.Now() // the token's arrival, before parsing it
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			done = true
			break
		}
		var ch CompletionChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			res.err = fmt.Errorf("bad chunk %q: %v", data, err)
			return res
		}
		if ch.Usage != nil {
			res.usage, res.metrics = ch.Usage, ch.Metrics
		}
		for _, c := range ch.Choices {
			if len(c.TokenIDs) > 0 {
				if res.first.IsZero() {
					res.first = now
				}
				res.last = now
				res.tokens = append(res.tokens, c.TokenIDs...)
			}
			text.WriteString(c.Text)
			if c.FinishReason != nil {
				res.finish = *c.FinishReason
			}
		}
	}
	res.text = text.String()
	if !done && res.err == nil {
		res.err = fmt.Errorf("stream ended without [DONE] after %d tokens: %v", len(res.tokens), sc.Err())
	}
	return res
}

// complete sends a non-streaming request.
func complete(ctx context.Context, base string, body map[string]any, reqID string) (*CompletionResponse, int, error) {
	resp, err := postJSON(ctx, base+"/v1/completions", body, reqID)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode != 200 {
		return nil, resp.StatusCode, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var out CompletionResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, resp.StatusCode, err
	}
	return &out, resp.StatusCode, nil
}

// pdStream is a minimal P/D proxy following vLLM's NIXL test proxy: the
// prefill leg with stream false, max_tokens 1, no min_tokens or
// stream_options, and do_remote_decode; then the original request to the
// decode worker with the returned kv_transfer_params, streamed. The result's
// sent time is the proxy's receipt of the request.
func pdStream(ctx context.Context, prefill, decode string, body map[string]any, reqID string) (streamResult, *KVTransferParams) {
	sent := time.Now()
	pb := maps.Clone(body)
	pb["stream"] = false
	pb["max_tokens"] = 1
	delete(pb, "min_tokens")
	delete(pb, "stream_options")
	pb["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	pr, _, err := complete(ctx, prefill, pb, reqID)
	if err != nil {
		return streamResult{sent: sent, err: fmt.Errorf("prefill leg: %w", err)}, nil
	}
	db := maps.Clone(body)
	if pr.KVTransferParams != nil {
		db["kv_transfer_params"] = pr.KVTransferParams
	}
	res := streamCompletion(ctx, decode, db, reqID)
	res.sent = sent
	return res, pr.KVTransferParams
}

// metricValue reads one sample of a metric (any labels) from /metrics.
func metricValue(t testing.TB, base, name string) float64 {
	t.Helper()
	resp, err := testClient.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sum, found := 0.0, false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			var v float64
			f := strings.Fields(line)
			if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
				sum += v
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("metric %s not in /metrics", name)
	}
	return sum
}

// sessionPrefix is a deterministic prefix of n token ids for a session.
func sessionPrefix(session, n int) []int {
	out := make([]int, n)
	for k := range out {
		out[k] = int(mix(uint64(session)<<32|uint64(k)) % regularVocab)
	}
	return out
}

// suffix is request id's own n token ids.
func suffix(id, n int) []int {
	out := make([]int, n)
	for k := range out {
		out[k] = int(mix(uint64(id)<<32|uint64(k)|1<<62) % regularVocab)
	}
	return out
}
