package emulator

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/hone-llm/hone/internal/finesleep"
)

// KVTransferParams is vLLM's kv_transfer_params object (NixlConnector).
// The proxy sends {"do_remote_decode": true} to a prefill worker, which
// answers with the remote_* fields; the proxy forwards those to a decode
// worker, which pulls the KV it lacks from remote_host:remote_port.
type KVTransferParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  []int   `json:"remote_block_ids"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	RemoteRequestID *string `json:"remote_request_id,omitempty"`
	TPSize          int     `json:"tp_size,omitempty"`
}

// holdBlocks keeps a finished prefill's blocks for the decode worker's
// pull, until the pull is acknowledged or the lease expires, and returns
// the params that tell the decode worker where to pull from.
func (e *engine) holdBlocks(r *request) *KVTransferParams {
	h := &hold{blocks: r.blocks, promptLen: len(r.prompt), readyMs: r.lastMs}
	id := r.id
	if e.virt == nil { // virtual time: every pull comes, so no lease runs out
		h.timer = time.AfterFunc(e.cfg.KVLease, func() {
			e.post(msg{kind: msgRelease, id: id})
		})
	}
	e.holdsMu.Lock()
	if old, ok := e.holds[id]; ok { // a reused request id: the old pull never came
		old.stop()
		e.kv.free(old.blocks)
	}
	e.holds[id] = h
	e.holdsMu.Unlock()
	ids := make([]int, len(r.blocks))
	for i, b := range r.blocks {
		ids[i] = int(b)
	}
	host, port, eng := e.cfg.kvAdvertiseHost, e.cfg.kvPort, e.cfg.EngineID
	return &KVTransferParams{DoRemotePrefill: true, RemoteEngineID: &eng, RemoteBlockIDs: ids,
		RemoteHost: &host, RemotePort: &port, RemoteRequestID: &id, TPSize: 1}
}

// release frees a held prefill's blocks (after the pull, or at lease end).
func (e *engine) release(id string) {
	e.holdsMu.Lock()
	h, ok := e.holds[id]
	delete(e.holds, id)
	e.holdsMu.Unlock()
	if ok {
		h.stop()
		e.kv.free(h.blocks)
	}
}

func (h *hold) stop() {
	if h.timer != nil {
		h.timer.Stop()
	}
}

// allocRemote, on a decode worker, matches r's prompt against the local
// prefix cache, allocates blocks for the whole prompt and starts pulling
// the tokens beyond the local hit. It reports false when blocks are short.
func (e *engine) allocRemote(r *request) bool {
	e.extendHashes(r)
	bs := e.kv.blockSize
	hit := e.kv.match(r.hashes, (len(r.prompt)-1)/bs)
	need := e.blocksFor(len(r.prompt)) - len(hit)
	if !e.kv.canAllocate(hit, need) {
		return false
	}
	e.kv.touch(hit)
	r.blocks = append(hit, e.kv.allocate(need)...)
	r.committed = len(hit)
	r.cached = len(hit) * bs
	r.computed = r.cached
	r.hitDone = true
	e.metrics.prefixQueries.Add(float64(len(r.prompt)))
	e.metrics.prefixHits.Add(float64(r.cached))
	// The modelled transfer starts when the decode worker took the request
	// in (its frontend's receipt plus the profile's frontend_ms, or later
	// when blocks were short), like a colocated prefill. The
	// exercise profile moves it back to the prefill's end (pullOnce).
	r.transferFromMs = r.readyMs
	if len(e.pending) > 0 && e.pending[0] == r {
		r.transferFromMs = e.nowMs()
	}
	if e.virt != nil {
		e.virt.pull(r, r.cached)
	} else {
		go e.puller(r, r.cached)
	}
	return true
}

func (e *engine) retryPending() {
	for len(e.pending) > 0 {
		if !e.allocRemote(e.pending[0]) {
			return
		}
		e.pending = e.pending[1:]
	}
}

// loaded takes the end of a pull: the request becomes ready to decode at
// the transfer's end, or on failure recomputes locally or fails, per
// --kv-load-failure-policy.
func (e *engine) loaded(m msg) {
	r := m.req
	if r.finished {
		return
	}
	if r.aborted {
		e.abortNow(r)
		return
	}
	r.transferFromMs = m.fromMs
	r.transferToMs = m.endMs
	r.kvBytesIn = m.bytes
	r.transferModel = m.model
	if m.err != nil {
		e.metrics.nixlFailed.Inc()
		if e.cfg.KVLoadFailurePolicy == "recompute" {
			r.readyMs = m.endMs
			e.enqueue(r)
			return
		}
		e.finish(r, "error", fmt.Errorf("KV transfer from %s failed: %w", remoteAddr(r.remote), m.err))
		return
	}
	r.pulledTokens = len(r.prompt) - r.cached
	// A pull that ended on time ended at exactly fromMs + model (pullOnce,
	// vworker.pull): any excess is the host's, host time in model time,
	// which replay reports as emulator_bound when it matters.
	r.transferLateMs = max(m.endMs-(m.fromMs+m.model), 0)
	if r.transferLateMs > 0 {
		e.metrics.kvPullsLate.Inc()
		e.metrics.kvPullLateSeconds.Add(r.transferLateMs / 1000)
		e.metrics.kvPullLateModelSeconds.Add(m.model / 1000)
	}
	e.metrics.nixlBytes.Observe(float64(m.bytes))
	e.metrics.nixlXfer.Observe((m.endMs - r.transferFromMs) / 1000)
	e.metrics.kvBytesReceived.Add(float64(m.bytes))
	// Every prompt token's KV is now here; the last one is recomputed by
	// the first decode step, which samples the first output token.
	r.computed = len(r.prompt) - 1
	bs := e.kv.blockSize
	for ; r.committed < r.computed/bs; r.committed++ {
		e.kv.commit(r.blocks[r.committed], r.hashes[r.committed])
	}
	r.readyMs = m.endMs
	e.enqueue(r)
}

func remoteAddr(p *KVTransferParams) string {
	if p == nil || p.RemoteHost == nil || p.RemotePort == nil {
		return "?"
	}
	return net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort))
}

// The side channel. A decode worker opens one TCP connection per pull and
// sends one JSON line, pullRequest; the prefill worker answers with one
// JSON line, pullHeader, then exactly Bytes bytes of KV (the model's
// per-token KV size × tokens), paced to the profile's link bandwidth in
// model time, then one JSON line, pullTrailer, carrying the transfer's
// modelled duration (with any slow-transfer fault). The decode worker
// holds the KV until that much model time has passed since the transfer
// started on its side, then answers {"ack":true}, after which the prefill
// worker frees its blocks.
type pullRequest struct {
	RequestID string `json:"request_id"`
	BlockIDs  []int  `json:"block_ids"`
	// FromToken is the first prompt token the decode side lacks.
	FromToken int `json:"from_token"`
}

type pullHeader struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	Bytes int64  `json:"bytes"`
	// HeldNs is how long the KV had been complete on the prefill worker
	// when the pull came in: a duration, so it needs no shared clock.
	HeldNs int64 `json:"held_ns"`
	// ReadyMonoNs is the prefill's end on the prefill worker's
	// CLOCK_MONOTONIC, exact for a decode worker on the same boot (BootID).
	ReadyMonoNs int64  `json:"ready_mono_ns"`
	BootID      string `json:"boot_id,omitempty"`
}

type pullTrailer struct {
	End     bool    `json:"end"`
	ModelMs float64 `json:"model_ms"`
}

// parsePullHeader reads the prefill worker's first answer line: the
// header of a pull it serves, or why it does not. A negative byte count is
// malformed (it would pass for an empty payload and a finished transfer).
func parsePullHeader(line []byte) (pullHeader, error) {
	var h pullHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return h, fmt.Errorf("bad pull header: %w", err)
	}
	if !h.OK {
		return h, errors.New(h.Error)
	}
	if h.Bytes < 0 {
		return h, fmt.Errorf("bad pull header: bytes %d", h.Bytes)
	}
	return h, nil
}

// parsePullTrailer reads the line after the KV payload: its end mark and
// the transfer's modelled duration, at most 1e9 ms.
func parsePullTrailer(line []byte) (pullTrailer, error) {
	var t pullTrailer
	if err := json.Unmarshal(line, &t); err != nil || !t.End || !(t.ModelMs >= 0) || t.ModelMs > 1e9 {
		return t, fmt.Errorf("bad pull trailer %q", line)
	}
	return t, nil
}

// kvPayload is the pattern the KV bytes are cut from.
var kvPayload = func() []byte {
	b := make([]byte, 256<<10)
	x := uint64(0x5eed)
	for i := range b {
		x = x*6364136223846793005 + 1442695040888963407
		b[i] = byte(x >> 56)
	}
	return b
}()

// serveSideChannel answers pulls on ln until it is closed.
func (e *engine) serveSideChannel(ctx context.Context, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go e.servePull(ctx, c)
	}
}

// Side-channel limits. A pull request line is bounded by pullLineLimit; a
// decode worker reads the prefill worker's header and trailer lines (and
// the prefill worker the ack) under maxReplyLine: each is well under 1 KiB,
// and a decode worker dials whatever remote_host and remote_port the
// client's kv_transfer_params name. The request line must arrive within
// sideChannelReadTimeout of the connection (a decode worker sends it at
// once), the ack within pullAckTimeout of the trailer.
const (
	maxReplyLine           = 64 << 10
	sideChannelReadTimeout = 10 * time.Second
	pullAckTimeout         = 30 * time.Second
)

// pullLineLimit is the longest pull request line a prefill worker reads:
// 1 MiB, or more when the block ids of a max-model-len sequence could need
// it (ceil(maxModelLen / blockSize) ids of up to digits(numBlocks) digits
// and a comma each, plus 64 KiB for the request id and the rest). For the
// default 32768-token model and 16-token blocks that is 2048 ids, under
// 20 KiB.
func pullLineLimit(maxModelLen, blockSize, numBlocks int) int {
	ids := (maxModelLen + blockSize - 1) / blockSize
	need := ids*(len(strconv.Itoa(numBlocks))+1) + 64<<10
	return max(1<<20, need)
}

var errLineTooLong = errors.New("line too long")

// readLine reads one '\n'-terminated line of at most max bytes (the newline
// included) from br, never buffering more than max plus br's buffer.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > max {
			return nil, errLineTooLong
		}
		switch {
		case err == nil:
			if line == nil {
				return frag, nil
			}
			return appendWithin(line, frag, max), nil
		case errors.Is(err, bufio.ErrBufferFull):
			line = appendWithin(line, frag, max)
		default:
			return nil, err
		}
	}
}

// appendWithin appends frag to line, whose length with frag's is at most
// limit, growing it by doubling but never past limit bytes of capacity
// (append's own growth could overshoot the line limit by a quarter or
// more).
func appendWithin(line, frag []byte, limit int) []byte {
	if n := len(line) + len(frag); n > cap(line) {
		grown := make([]byte, len(line), min(limit, max(n, 2*cap(line))))
		copy(grown, line)
		line = grown
	}
	return append(line, frag...)
}

func (e *engine) servePull(ctx context.Context, c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(sideChannelReadTimeout))
	enc := json.NewEncoder(c)
	line, err := readLine(br, e.cfg.pullLineMax)
	if err != nil {
		if errors.Is(err, errLineTooLong) {
			_ = c.SetWriteDeadline(time.Now().Add(sideChannelReadTimeout))
			_ = enc.Encode(pullHeader{Error: fmt.Sprintf("pull request line longer than %d bytes", e.cfg.pullLineMax)})
			lingerClose(c)
		}
		return
	}
	var pr pullRequest
	if err := json.Unmarshal(line, &pr); err != nil {
		_ = enc.Encode(pullHeader{Error: "bad pull request: " + err.Error()})
		return
	}
	e.holdsMu.Lock()
	h, ok := e.holds[pr.RequestID]
	var tokens int
	var heldNs, readyMono int64
	if ok {
		heldNs, readyMono = int64(time.Since(e.clock.real(h.readyMs))), e.clock.mono(h.readyMs)
		tokens = h.promptLen - pr.FromToken
		valid := pr.FromToken >= 0 && tokens >= 0
		held := map[int]bool{}
		for _, b := range h.blocks {
			held[int(b)] = true
		}
		for _, b := range pr.BlockIDs {
			valid = valid && held[b]
		}
		if !valid {
			ok = false
		}
	}
	e.holdsMu.Unlock()
	if !ok {
		id := pr.RequestID
		if len(id) > 256 {
			id = id[:256] + "..."
		}
		_ = enc.Encode(pullHeader{Error: fmt.Sprintf("no held KV for request %q with those blocks", id)})
		return
	}
	bytes := int64(tokens) * int64(e.prof.Model.KVBytesPerToken())
	factor := e.cfg.faults.slowTransfer
	modelMs := e.prof.TransferMs(bytes) * factor
	rate := e.prof.LinkBytesPerSec() / factor / e.scale // real bytes/s
	start := time.Now()
	_ = c.SetWriteDeadline(time.Now().Add(time.Minute + time.Duration(modelMs*e.scale*2e6)))
	if err := enc.Encode(pullHeader{OK: true, Bytes: bytes, HeldNs: heldNs, ReadyMonoNs: readyMono, BootID: bootID()}); err != nil {
		return
	}
	var sent int64
	for sent < bytes {
		n := min(int64(len(kvPayload)), bytes-sent)
		w, err := c.Write(kvPayload[:n])
		sent += int64(w)
		e.metrics.kvBytesSent.Add(float64(w))
		if err != nil {
			e.trace.kvSend(e, pr.RequestID, sent, start, err)
			return
		}
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(float64(sent) / rate * 1e9))); d > 0 {
				sleepCtx(ctx, d)
			}
		}
	}
	if err := enc.Encode(pullTrailer{End: true, ModelMs: modelMs}); err != nil {
		e.trace.kvSend(e, pr.RequestID, sent, start, err)
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(pullAckTimeout))
	if _, err := readLine(br, maxReplyLine); err != nil {
		e.trace.kvSend(e, pr.RequestID, sent, start, fmt.Errorf("no ack: %w", err))
		return
	}
	e.trace.kvSend(e, pr.RequestID, sent, start, nil)
	e.post(msg{kind: msgRelease, id: pr.RequestID})
}

// lingerClose ends a connection whose peer is still sending: it stops
// writing (FIN after the reply), then discards at most 64 KiB for at most a
// second, so that the reply is read before the close resets the
// connection, and closes it.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, c, 64<<10)
	c.Close()
}

// sleepCtx sleeps d unless ctx ends first, to within about 0.1 ms (a Go
// timer alone can be a millisecond late, which would cap the paced KV
// stream at one chunk per millisecond).
func sleepCtx(ctx context.Context, d time.Duration) {
	finesleep.Until(ctx, time.Now().Add(d))
}

// pull fetches r's missing KV from the prefill worker named in r.remote and
// reports the outcome to the engine.
func (e *engine) pull(ctx context.Context, r *request, from int) {
	fromMs, endMs := r.transferFromMs, 0.0
	bytes, modelMs, err := e.pullOnce(ctx, r, from, &fromMs, &endMs)
	if err != nil {
		endMs = e.clock.modelMs(time.Now())
	}
	e.post(msg{kind: msgLoaded, req: r, endMs: endMs, fromMs: fromMs, bytes: bytes, model: modelMs, err: err})
}

// pullOnce runs one pull. *fromMs is the modelled start of the transfer: the
// decode worker's receipt of the request (NIXL: it reads the blocks once the
// proxy hands it the request), or, for the exercise profile, the prefill's
// end, since the exact model's equation (package sim), first =
// max(prefill_end + 8, decode_end) + d, counts the 8 ms handoff from there;
// the proxy's hop to the decode worker then falls inside the 8 ms instead of
// adding to it. On success *endMs is when the KV became usable: the modelled
// end, or the last byte's arrival if the transport was slower than the model.
func (e *engine) pullOnce(ctx context.Context, r *request, from int, fromMs, endMs *float64) (int64, float64, error) {
	p := r.remote
	if p.RemoteRequestID == nil || p.RemoteHost == nil || p.RemotePort == nil {
		return 0, 0, errors.New("kv_transfer_params lack remote_request_id, remote_host or remote_port")
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", remoteAddr(p))
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	bs := e.kv.blockSize
	var blocks []int
	if first := from / bs; first < len(p.RemoteBlockIDs) {
		blocks = p.RemoteBlockIDs[first:]
	}
	asked := time.Now()
	if err := json.NewEncoder(c).Encode(pullRequest{RequestID: *p.RemoteRequestID, BlockIDs: blocks, FromToken: from}); err != nil {
		return 0, 0, err
	}
	br := bufio.NewReaderSize(c, 256<<10)
	line, err := readLine(br, maxReplyLine)
	if err != nil {
		return 0, 0, fmt.Errorf("read pull header: %w", err)
	}
	h, err := parsePullHeader(line)
	if err != nil {
		return 0, 0, err
	}
	if e.prof.Exercise != nil && *fromMs == r.arrivalMs+e.prof.FrontendMs { // (a pull that waited for blocks keeps its later start)
		switch {
		case h.BootID != "" && h.BootID == bootID() && h.ReadyMonoNs > 0:
			*fromMs = min(*fromMs, e.clock.fromMono(h.ReadyMonoNs))
		case h.HeldNs > 0:
			// Another host: the prefill worker measured HeldNs when the
			// pull reached it, between asking and now; take the midpoint.
			got := time.Now()
			ready := asked.Add(got.Sub(asked)/2 - time.Duration(h.HeldNs))
			*fromMs = min(*fromMs, e.clock.modelMs(ready))
		}
	}
	n, err := io.CopyN(io.Discard, br, h.Bytes)
	if err != nil {
		return n, 0, fmt.Errorf("KV payload cut after %d of %d bytes: %w", n, h.Bytes, err)
	}
	line, err = readLine(br, maxReplyLine)
	if err != nil {
		return n, 0, fmt.Errorf("read pull trailer: %w", err)
	}
	t, err := parsePullTrailer(line)
	if err != nil {
		return n, 0, err
	}
	// The KV is usable once the modelled transfer has ended. The engine
	// is told that instant, not when this goroutine woke after it, so its
	// model clock does not take on the wake-up's lateness.
	arrived := e.clock.modelMs(time.Now())
	sleepCtx(ctx, time.Until(e.clock.real(*fromMs+t.ModelMs)))
	if _, err := c.Write([]byte("{\"ack\":true}\n")); err != nil {
		return n, t.ModelMs, err
	}
	// Where the bytes took longer on this host than on the modelled link,
	// the engine is told the later instant (loaded counts it as late).
	*endMs = max(*fromMs+t.ModelMs, arrived)
	return n, t.ModelMs, nil
}
