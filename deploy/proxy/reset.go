package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// resetTimeout bounds one worker's answer to POST /reset_prefix_cache. An
// engine resets between steps, so a busy one may take a moment, not more.
const resetTimeout = 30 * time.Second

// resetAnswer is one worker's answer to the reset.
type resetAnswer struct {
	worker string
	status int   // 0 when no answer came
	err    error // transport error, or the answer's body when it is not 2xx
}

// ResetReply is POST /reset_prefix_cache's answer when every worker reset.
type ResetReply struct {
	Reset []string `json:"reset"` // the workers, all of them
}

// serveResetPrefixCache sends the engine's cache-reset route
// (Facts.Cache.ResetRoute, vLLM's POST /reset_prefix_cache) to every
// worker of every pool at once, so the whole deployment starts the next load level
// with a cold prefix cache. Forwarding it to one worker, as other unknown
// routes are, would leave the others warm.
//
// 200: every worker answered 2xx. 404: some worker answered 404 or 405, so
// the engine does not offer the route (vLLM serves it only with
// VLLM_SERVER_DEV_MODE=1: Facts.Cache.ResetEnv) and the client should use
// another way to a cold cache. 502: some worker failed otherwise (unreachable, timed out, 5xx).
// Error bodies are OpenAI-style and name each failing worker.
func (p *Proxy) serveResetPrefixCache(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read request body: "+err.Error(), nil)
		return
	}
	all := p.set().all
	answers := make([]resetAnswer, len(all))
	var wg sync.WaitGroup
	for i, b := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = p.resetWorker(r.Context(), b, r, body)
		}()
	}
	wg.Wait()

	var missing, failed []string
	var msgs []string
	for _, a := range answers {
		switch {
		case a.status >= 200 && a.status < 300:
		case a.status == http.StatusNotFound || a.status == http.StatusMethodNotAllowed:
			missing = append(missing, a.worker)
			msgs = append(msgs, "worker "+a.worker+" answered "+strconv.Itoa(a.status)+" ("+p.resetMissing()+")")
		default:
			failed = append(failed, a.worker)
			msg := "worker " + a.worker
			if a.status != 0 {
				msg += " answered " + strconv.Itoa(a.status)
			}
			if a.err != nil {
				msg += ": " + a.err.Error()
			}
			msgs = append(msgs, msg)
		}
	}
	switch {
	case len(missing) > 0:
		// The route is missing somewhere: no reset can make the deployment
		// cold, whatever else failed, so the client's fallback is the answer.
		writeError(w, http.StatusNotFound, p.resetName()+": "+strings.Join(msgs, "; "), append(missing, failed...))
	case len(failed) > 0:
		writeError(w, http.StatusBadGateway, p.resetName()+": "+strings.Join(msgs, "; "), failed)
	default:
		names := make([]string, len(all))
		for i, b := range all {
			names[i] = b.Name
		}
		sort.Strings(names)
		out, _ := json.Marshal(ResetReply{Reset: names})
		writeRaw(w, http.StatusOK, out)
	}
}

// resetPath is the path of the engine's cache-reset route
// ("/reset_prefix_cache").
func (p *Proxy) resetPath() string {
	_, path, _ := strings.Cut(p.eng.Cache.ResetRoute, " ")
	return path
}

// resetName names the reset in error messages ("reset_prefix_cache").
func (p *Proxy) resetName() string { return strings.TrimPrefix(p.resetPath(), "/") }

// resetMissing says why a worker lacks the cache-reset route.
func (p *Proxy) resetMissing() string {
	if env := p.eng.Cache.ResetEnv; env != "" {
		return "no " + p.resetPath() + ": " + p.eng.Title + " serves it only with " + env
	}
	return "no " + p.resetPath() + ": " + p.eng.Title + " does not serve it"
}

// resetWorker posts the reset to one worker, with the client's query and
// body, and reads its answer.
func (p *Proxy) resetWorker(ctx context.Context, b *backend, r *http.Request, body []byte) resetAnswer {
	a := resetAnswer{worker: b.Name}
	ctx, cancel := context.WithTimeout(ctx, resetTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		a.err = err
		return a
	}
	for _, k := range []string{"Content-Type", "Authorization"} {
		if v := r.Header.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v", resetTimeout)
		}
		a.err = err
		return a
	}
	defer resp.Body.Close()
	a.status = resp.StatusCode
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if a.status < 200 || a.status >= 300 {
		if t := strings.TrimSpace(string(text)); t != "" {
			a.err = errors.New(t)
		}
	}
	return a
}

// writeError answers with an OpenAI-style JSON error; workers, when given,
// lists the workers it is about.
func writeError(w http.ResponseWriter, status int, msg string, workers []string) {
	e := map[string]any{"message": msg, "type": "hone_proxy_error", "code": status}
	if len(workers) > 0 {
		e["workers"] = workers
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	writeRaw(w, status, b)
}
