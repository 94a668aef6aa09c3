package emulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	engines "github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/finesleep"
	"github.com/hone-llm/hone/internal/guard"
)

// Role is what a worker does in a deployment.
type Role string

const (
	// RoleColocated prefills and decodes; kv_transfer_params are ignored.
	RoleColocated Role = "colocated"
	// RolePrefill answers do_remote_decode requests with kv_transfer_params
	// and serves the KV over its side channel.
	RolePrefill Role = "prefill"
	// RoleDecode pulls the KV named by do_remote_prefill params.
	RoleDecode Role = "decode"
)

// ParseRole accepts colocated, prefill or decode.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case RoleColocated, RolePrefill, RoleDecode:
		return Role(s), nil
	}
	return "", fmt.Errorf("unknown role %q: want colocated, prefill or decode", s)
}

// Config is one emulated engine. Zero values take the documented default.
type Config struct {
	Role Role // default colocated
	// Profile is a built-in profile's name or a .yaml profile file's path
	// (LookupProfile); default DefaultProfile.
	Profile string
	// ProfileValue, when set, is the cost model itself, used in place of
	// looking Profile up (a copy: TP is set on the copy); Profile then
	// defaults to its name.
	ProfileValue *Profile
	// TensorParallelSize is the GPUs one worker spans (vLLM's
	// --tensor-parallel-size), 1..64; default 1. The roofline splits each
	// step across them and the KV cache is sized per GPU (Profile.TP).
	TensorParallelSize int
	// KVCacheDType is vLLM's --kv-cache-dtype: "" or auto (the model's),
	// bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2 (Profile.WithKVCacheDType).
	KVCacheDType string
	Model        string // served model name; default the profile's model id
	Host         string // default 127.0.0.1
	Port         int    // 0: any free port
	// KVHost and KVPort are the prefill worker's side channel (vLLM's
	// VLLM_NIXL_SIDE_CHANNEL_HOST/PORT); port 0 picks a free one.
	// KVAdvertiseHost is what kv_transfer_params.remote_host says
	// (default KVHost, or 127.0.0.1 for an unspecified address).
	KVHost          string
	KVPort          int
	KVAdvertiseHost string
	EngineID        string  // default a random id
	TimeScale       float64 // wall = model × TimeScale; default 1
	BlockSize       int     // default 16
	// Defaults from the profile: MaxNumSeqs, MaxNumBatchedTokens;
	// MaxModelLen from the model.
	MaxNumSeqs           int
	MaxNumBatchedTokens  int
	MaxModelLen          int
	GPUMemoryUtilization float64 // default 0.9
	NumGPUBlocksOverride int     // > 0 replaces the profile's capacity
	DisablePrefixCaching bool
	EnforceEager         bool
	// EnablePromptTokensDetails fills usage.prompt_tokens_details.
	EnablePromptTokensDetails bool
	// EnablePerRequestMetrics adds the "metrics" object.
	EnablePerRequestMetrics bool
	KVLease                 time.Duration // prefill side; default 480 s (wall)
	KVLoadFailurePolicy     string        // "fail" (default) or "recompute"
	Trace                   io.Writer     // JSON lines, see TraceHelp; nil: none
	Faults                  Faults
	Logger                  *slog.Logger
	// OnCrash runs when the crash-after fault fires, after the server has
	// dropped every connection; the CLI exits the process here.
	OnCrash func()
	// Version is reported by GET /version.
	Version string
	// Guard limits clients: body size and memory, header/body/idle
	// timeouts, connections on the HTTP port and on the KV side channel
	// (package guard; zero fields take its defaults).
	Guard guard.Limits
	// CUDALib, when set, is the path of a libcuda-shaped shared library
	// (exporting cuLaunchKernel, cuGraphLaunch and cuStreamSynchronize)
	// that each live engine step calls, so uprobes on it see step
	// boundaries as on a GPU host: cuGraphLaunch (a decode-only step with
	// CUDA graphs, i.e. not EnforceEager) or cuLaunchKernel (a step with
	// prefill tokens, or eager) at the step's start, cuStreamSynchronize at
	// its modelled end. With Trace, one "step" line per step records them.
	// For tests and demos, never a real driver; Linux and cgo only; the
	// virtual-time engine ignores it.
	CUDALib string
	// CUDAWorker, when set, is the command of a child process that makes
	// the steps' CUDA calls instead of the engine's (cudaworker.go; hone
	// sim serve --cuda-worker runs hone sim cuda-worker --cuda-lib
	// CUDALib), so exchanges and steps are different processes' as on
	// vLLM.
	CUDAWorker []string

	faults          faultState
	kvAdvertiseHost string
	kvPort          int
	// pullLineMax bounds a pull request line on the side channel
	// (pullLineLimit).
	pullLineMax int
	// cudaProbe, when set (tests), replaces the library CUDALib would load.
	cudaProbe cudaProbe
}

// Server is a running emulated engine.
type Server struct {
	cfg    Config
	prof   *Profile
	eng    *engine
	tok    *Tokenizer
	hs     *http.Server
	ln     net.Listener
	kvLn   net.Listener
	cancel context.CancelFunc
	done   chan struct{}
	served atomic.Int64
	crash  sync.Once
	seq    atomic.Int64
	lim    Limits
	guard  *guard.Guard

	jsonMu   sync.RWMutex
	jsonText map[int][]byte
}

func (c *Config) resolve() (*Profile, error) {
	p, err := c.resolveProfile()
	if err != nil {
		return nil, err
	}
	if c.Model == "" {
		c.Model = p.Model.Name
	}
	c.resolveAddresses()
	if err := c.resolveLimits(p); err != nil {
		return nil, err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Version == "" {
		c.Version = engines.EmulatorVersionPrefix
	}
	if err := c.Guard.Fill(); err != nil {
		return nil, err
	}
	c.faults = c.Faults.state()
	return p, nil
}

// resolveProfile checks c's role and resolves its profile: the given one
// or the named one (DefaultProfile when none), at c's tensor parallelism
// and KV cache dtype.
func (c *Config) resolveProfile() (*Profile, error) {
	if c.Role == "" {
		c.Role = RoleColocated
	}
	if _, err := ParseRole(string(c.Role)); err != nil {
		return nil, err
	}
	var p *Profile
	if c.ProfileValue != nil {
		p = c.ProfileValue.clone()
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("profile %s: %w", p.Name, err)
		}
		if c.Profile == "" {
			c.Profile = p.Name
		}
	} else {
		if c.Profile == "" {
			c.Profile = DefaultProfile
		}
		var err error
		if p, err = LookupProfile(c.Profile); err != nil {
			return nil, err
		}
	}
	if c.TensorParallelSize == 0 {
		c.TensorParallelSize = 1
	}
	if c.TensorParallelSize < 1 || c.TensorParallelSize > 64 {
		return nil, fmt.Errorf("--tensor-parallel-size %d: want 1..64", c.TensorParallelSize)
	}
	if st := p.Steps; st != nil {
		if err := st.HoldsFor(c.TensorParallelSize); err != nil {
			return nil, fmt.Errorf("--tensor-parallel-size %d: profile %s: %w", c.TensorParallelSize, p.Name, err)
		}
	}
	if c.TensorParallelSize > 1 && p.Exercise == nil && p.Linear == nil && p.Steps == nil && !(p.GPU.InterconnectBytesSec > 0) {
		return nil, fmt.Errorf("--tensor-parallel-size %d: profile %s has no gpu.interconnect_bytes_sec for the all-reduces", c.TensorParallelSize, p.Name)
	}
	p.TP = c.TensorParallelSize
	if err := p.WithKVCacheDType(c.KVCacheDType); err != nil {
		return nil, fmt.Errorf("--kv-cache-dtype: %w", err)
	}
	return p, nil
}

// resolveAddresses defaults c's listen and KV addresses and its engine id.
func (c *Config) resolveAddresses() {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.KVHost == "" {
		c.KVHost = c.Host
	}
	if c.KVAdvertiseHost == "" {
		c.KVAdvertiseHost = c.KVHost
		if ip := net.ParseIP(c.KVHost); ip != nil && ip.IsUnspecified() {
			c.KVAdvertiseHost = "127.0.0.1"
		}
	}
	if c.EngineID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.EngineID = "hone-emu-" + hex.EncodeToString(b[:])
	}
}

// resolveLimits defaults and checks c's time scale, block size, scheduler
// limits (the profile's where unset), memory utilisation and KV lease and
// load-failure policy.
func (c *Config) resolveLimits(p *Profile) error {
	if c.TimeScale == 0 {
		c.TimeScale = 1
	}
	if !(c.TimeScale > 0) || c.TimeScale > 1e6 {
		return fmt.Errorf("time scale %v: want a positive number", c.TimeScale)
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.BlockSize < 1 || c.BlockSize > 1024 {
		return fmt.Errorf("block size %d: want 1..1024", c.BlockSize)
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = p.MaxNumSeqs
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = p.MaxNumBatchedTokens
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = p.Model.MaxModelLen
	}
	if c.MaxNumSeqs < 1 || c.MaxNumBatchedTokens < 1 || c.MaxModelLen < 2 {
		return fmt.Errorf("max-num-seqs %d, max-num-batched-tokens %d, max-model-len %d: want >= 1, >= 1, >= 2",
			c.MaxNumSeqs, c.MaxNumBatchedTokens, c.MaxModelLen)
	}
	if c.GPUMemoryUtilization == 0 {
		c.GPUMemoryUtilization = 0.9
	}
	if !(c.GPUMemoryUtilization > 0 && c.GPUMemoryUtilization <= 1) {
		return fmt.Errorf("gpu memory utilization %v: want (0, 1]", c.GPUMemoryUtilization)
	}
	if c.KVLease == 0 {
		c.KVLease = 480 * time.Second
	}
	switch c.KVLoadFailurePolicy {
	case "":
		c.KVLoadFailurePolicy = "fail"
	case "fail", "recompute":
	default:
		return fmt.Errorf("kv load failure policy %q: want fail or recompute", c.KVLoadFailurePolicy)
	}
	return nil
}

// resolveEngine resolves c (resolve) and sizes the KV cache: the
// profile's capacity at the memory utilisation, or the override, which
// must hold one sequence of max-model-len.
func (c *Config) resolveEngine() (*Profile, int, error) {
	prof, err := c.resolve()
	if err != nil {
		return nil, 0, err
	}
	blocks := prof.NumBlocks(c.BlockSize, c.GPUMemoryUtilization)
	if c.NumGPUBlocksOverride > 0 {
		blocks = c.NumGPUBlocksOverride
	}
	if blocks*c.BlockSize < c.MaxModelLen {
		return nil, 0, fmt.Errorf("KV cache of %d blocks × %d tokens cannot hold one sequence of max-model-len %d",
			blocks, c.BlockSize, c.MaxModelLen)
	}
	return prof, blocks, nil
}

// Start validates cfg, binds the HTTP port (and, for a prefill worker, the
// KV side channel), and starts serving until ctx ends or Close is called.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	prof, blocks, err := cfg.resolveEngine()
	if err != nil {
		return nil, err
	}
	g, err := guard.New(cfg.Guard)
	if err != nil {
		return nil, err
	}
	probe := cfg.cudaProbe
	workerStop := func() {}
	switch {
	case probe != nil:
	case len(cfg.CUDAWorker) > 0:
		// The worker lives as long as the server: its stop cancels wctx.
		wctx, stop := context.WithCancel(ctx)
		w, err := startCUDAWorker(wctx, cfg.CUDAWorker, cfg.Logger)
		if err != nil {
			stop()
			return nil, err
		}
		probe, workerStop = w, stop
	case cfg.CUDALib != "":
		if probe, err = openCUDAProbe(cfg.CUDALib); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		workerStop()
		return nil, fmt.Errorf("listen on --host %s --port %d: %w", cfg.Host, cfg.Port, err)
	}
	s := &Server{cfg: cfg, prof: prof, tok: NewTokenizer(), done: make(chan struct{}), jsonText: map[int][]byte{},
		lim: Limits{Model: cfg.Model, MaxModelLen: cfg.MaxModelLen, Vocab: prof.Model.Vocab}, guard: g}
	if cfg.Role == RolePrefill {
		kvLn, err := net.Listen("tcp", net.JoinHostPort(cfg.KVHost, strconv.Itoa(cfg.KVPort)))
		if err != nil {
			ln.Close()
			workerStop()
			return nil, fmt.Errorf("listen on KV side channel %s:%d: %w", cfg.KVHost, cfg.KVPort, err)
		}
		s.kvLn = guard.Limit(kvLn, cfg.Guard.MaxConnections)
		s.cfg.kvPort = kvLn.Addr().(*net.TCPAddr).Port
	}
	s.cfg.kvAdvertiseHost = s.cfg.KVAdvertiseHost
	s.cfg.pullLineMax = pullLineLimit(cfg.MaxModelLen, cfg.BlockSize, blocks)
	ctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	e := &engine{cfg: &s.cfg, prof: prof, scale: cfg.TimeScale, log: cfg.Logger,
		kv: newKVCache(blocks, cfg.BlockSize, !cfg.DisablePrefixCaching), inbox: make(chan msg, 1024),
		clock: newClock(cfg.TimeScale), metrics: newMetrics(cfg.Model), holds: map[string]*hold{}, probe: probe}
	e.metrics.watchCache(e.kv)
	if cfg.Trace != nil {
		e.trace = &traceWriter{w: cfg.Trace}
	}
	e.puller = func(r *request, from int) { e.pull(ctx, r, from) }
	e.done = ctx.Done()
	e.ftimer = finesleep.NewTimer()
	e.fineArm, e.fineFired = make(chan time.Time, 1), make(chan time.Time, 1)
	context.AfterFunc(ctx, e.ftimer.Wake)
	s.eng = e
	s.hs = g.Server(s.Handler())
	unlimitHeap := g.LimitHeap()
	s.hs.BaseContext = func(net.Listener) context.Context { return ctx }
	s.ln = g.Listener(ln, s.hs)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); e.run(ctx) }()
	go func() { defer wg.Done(); e.fineLoop(ctx) }()
	go func() { defer wg.Done(); _ = s.hs.Serve(s.ln) }()
	if s.kvLn != nil {
		wg.Add(1)
		go func() { defer wg.Done(); e.serveSideChannel(ctx, s.kvLn) }()
	}
	go func() {
		<-ctx.Done()
		defer unlimitHeap()
		defer workerStop()
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.hs.Shutdown(sctx)
		c()
		_ = s.hs.Close()
		if s.kvLn != nil {
			s.kvLn.Close()
		}
	}()
	go func() { wg.Wait(); close(s.done) }()
	cfg.Logger.Info("emulator serving", "addr", ln.Addr().String(), "role", cfg.Role, "profile", prof.Name,
		"kv_blocks", blocks, "block_size", cfg.BlockSize, "time_scale", cfg.TimeScale, "kv_side_channel", s.KVAddr(),
		"max_connections", cfg.Guard.MaxConnections, "max_body_bytes", cfg.Guard.MaxBodyBytes)
	return s, nil
}

// URL is the server's base URL, e.g. http://127.0.0.1:8000.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Addr is the HTTP listen address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// KVAddr is the side channel's address (prefill role), else "".
func (s *Server) KVAddr() string {
	if s.kvLn == nil {
		return ""
	}
	return s.kvLn.Addr().String()
}

// EngineID is the id a prefill worker puts in remote_engine_id.
func (s *Server) EngineID() string { return s.cfg.EngineID }

// Profile is the resolved cost model.
func (s *Server) Profile() *Profile { return s.prof }

// Close stops the server and waits for its goroutines.
func (s *Server) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// Done is closed when the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

func (s *Server) crashNow() {
	s.crash.Do(func() {
		s.cfg.Logger.Warn("fault crash-after fired: dropping every connection", "after", s.cfg.Faults.CrashAfter)
		s.ln.Close()
		if s.kvLn != nil {
			s.kvLn.Close()
		}
		_ = s.hs.Close()
		s.cancel()
		if s.cfg.OnCrash != nil {
			s.cfg.OnCrash()
		}
	})
}

// Handler serves vLLM's API subset, every request body under the size
// limit and the body deadline (Config.Guard).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("POST /detokenize", s.detokenize)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		// The time scale is stated so that a client adopts it instead of
		// trusting a flag: a mismatch would make every figure S times off.
		writeJSON(w, map[string]any{"version": s.cfg.Version, "time_scale": s.cfg.TimeScale,
			"cost_profile": s.prof.Name, "cost_profile_source": s.prof.SourceKind()})
	})
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {
		done := make(chan struct{})
		if !s.eng.post(msg{kind: msgReset, done: done}) {
			writeError(w, &APIError{Object: "error", Message: "engine stopped", Type: "ServiceUnavailableError", Code: 503})
			return
		}
		select {
		case <-done:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.eng.metrics.reg, promhttp.HandlerOpts{}))
	return s.guard.Handler(mux)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"object": "list", "data": []map[string]any{{
		"id": s.cfg.Model, "object": "model", "created": time.Now().Unix(), "owned_by": engines.VLLM, // as vLLM answers
		"root": s.prof.Model.Name, "parent": nil, "max_model_len": s.cfg.MaxModelLen,
	}}})
}

// Objects of a body's size that parsing holds beside the body at most
// (guard.ReadBodyDecoded), so that they count against the body memory
// budget with it. A JSON string with an escape in it is decoded by
// encoding/json into a scratch buffer of its size and then copied into the
// string: two. A completion's text prompt: those two (a token-id prompt
// keeps at most max-model-len ids, whatever its size); a chat's: those two
// for a message's content, then the contents and the last message
// rendered; /tokenize's prompt: two. TestParseMemory measures them.
const (
	completionCopies = 2
	chatCopies       = 3
	tokenizeCopies   = 2
)

// readBody reads the request body under Config.Guard's limits. The body,
// and copies more of its size, count against the body memory budget until
// release is called, once it has been parsed. Over a limit, the error names
// it: 413 too large, 408 too slow, 503 the budget full.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, copies int) (body []byte, release func(), aerr *APIError) {
	b, release, err := s.guard.ReadBodyDecoded(w, r, copies)
	if err != nil {
		typ := "BadRequestError"
		switch err.Status {
		case http.StatusRequestEntityTooLarge:
			typ = "RequestTooLargeError"
		case http.StatusRequestTimeout:
			typ = "RequestTimeoutError"
		case http.StatusServiceUnavailable:
			typ = "ServiceUnavailableError"
		}
		return nil, release, &APIError{Object: "error", Message: err.Message, Type: typ, Code: err.Status}
	}
	return b, release, nil
}

func (s *Server) checkModel(m *string) *APIError { return s.lim.checkModel(m) }

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := s.readBody(w, r, tokenizeCopies)
	defer release()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req struct {
		Model            *string `json:"model"`
		Prompt           *string `json:"prompt"`
		AddSpecialTokens *bool   `json:"add_special_tokens"`
		ReturnTokenStrs  bool    `json:"return_token_strs"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, badRequest("JSON decode error: %v", err))
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		writeError(w, e)
		return
	}
	if req.Prompt == nil {
		writeError(w, badRequest("prompt: field required (the emulator does not tokenize chat messages)"))
		return
	}
	ids, pieces := s.tok.Tokenize(*req.Prompt)
	out := map[string]any{"count": len(ids), "max_model_len": s.cfg.MaxModelLen, "tokens": ids, "token_strs": nil}
	if req.ReturnTokenStrs {
		out["token_strs"] = pieces
	}
	writeJSON(w, out)
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := s.readBody(w, r, 0)
	defer release()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req struct {
		Model  *string `json:"model"`
		Tokens []int   `json:"tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, badRequest("JSON decode error: %v", err))
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		writeError(w, e)
		return
	}
	for _, id := range req.Tokens {
		if id < 0 || id >= s.prof.Model.Vocab {
			writeError(w, badRequest("Token id %d is out of vocabulary", id))
			return
		}
	}
	writeJSON(w, map[string]string{"prompt": s.tok.Detokenize(req.Tokens)})
}

// post hands m to the engine unless it has stopped.
func (e *engine) post(m msg) bool {
	select {
	case e.inbox <- m:
		return true
	case <-e.done:
		return false
	}
}

// textJSON is text(id) as a JSON string, cached: a stream writes one per
// token, and generated ids are output-vocabulary words (or EOS), whose text
// never changes.
func (s *Server) textJSON(id int) []byte {
	s.jsonMu.RLock()
	b, ok := s.jsonText[id]
	s.jsonMu.RUnlock()
	if ok {
		return b
	}
	b = mustJSON(s.text(id))
	s.jsonMu.Lock()
	if len(s.jsonText) < 1<<16 {
		s.jsonText[id] = b
	}
	s.jsonMu.Unlock()
	return b
}

func (s *Server) text(id int) string {
	if id == TokenIMEnd || id == TokenEndOfText {
		return "" // skip_special_tokens, as vLLM does by default
	}
	return s.tok.Piece(id)
}

// apiKind is what differs between /v1/completions and
// /v1/chat/completions: names and the shape of the answer. Validation,
// scheduling, timing and the chunk writer are shared.
type apiKind struct {
	chat        bool
	idPrefix    string // "cmpl-" or "chatcmpl-"
	object      string // of a non-streaming answer
	chunkObject string // of a streamed chunk
	role        string // chat: the role of the answer's message
}

var textAPI = apiKind{idPrefix: "cmpl-", object: "text_completion", chunkObject: "text_completion"}

func (s *Server) completions(w http.ResponseWriter, hr *http.Request) {
	s.generate(w, hr, completionCopies, func(body []byte) (*CompletionRequest, apiKind, *APIError) {
		req, err := ParseCompletion(body, s.lim, s.tok)
		return req, textAPI, err
	})
}

// generate serves one generation request: parse validates the body into a
// prompt and sampling fields, making at most copies objects of the body's
// size while it does (readBody).
func (s *Server) generate(w http.ResponseWriter, hr *http.Request, copies int, parse func([]byte) (*CompletionRequest, apiKind, *APIError)) {
	// Arrival is the frontend's receipt of the request: the engine clock
	// starts here, and reading and parsing the body overlap modelled time.
	arrival := time.Now()
	body, release, aerr := s.readBody(w, hr, copies)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	req, kind, aerr := parse(body)
	// The body is parsed: what the request keeps (its prompt's ids, at
	// most max-model-len of them) is bounded by validation, not by the
	// body's size; the prompt's text, which is not, is let go.
	body = nil
	if req != nil {
		req.PromptText = ""
	}
	release()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	base := hr.Header.Get("X-Request-Id")
	if base == "" {
		base = req.RequestID
	}
	if base == "" {
		base = fmt.Sprintf("%s-%d", s.cfg.EngineID, s.seq.Add(1))
	}
	if h := hr.Header.Get("X-Request-Id"); h != "" {
		w.Header().Set("X-Request-Id", h)
	}
	id := kind.idPrefix + base
	e := s.eng
	r := &request{id: id, prompt: req.Prompt, maxTokens: req.MaxTokens, minTokens: req.MinTokens,
		ignoreEOS: req.IgnoreEOS, arrival: arrival, arrivalMs: e.clock.modelMs(arrival),
		promptHash: hashTokens(0, req.Prompt), seq: e.arrivals.Add(1), out: newStream()}
	if p := req.KVTransferParams; p != nil {
		switch {
		case s.cfg.Role == RolePrefill && p.DoRemoteDecode:
			r.remoteDecode = true
		case s.cfg.Role == RoleDecode && p.DoRemotePrefill:
			r.remote = p
		}
	}
	// The engine core takes the request in frontend_ms after its receipt
	// (the API server's modelled work, which the parsing above overlaps):
	// what reaches the engine is then decided by the model, not by how
	// fast this host parsed the body.
	if fe := s.prof.FrontendMs; fe > 0 {
		sleepCtx(hr.Context(), time.Until(e.clock.real(r.arrivalMs+fe)))
		if hr.Context().Err() != nil {
			return
		}
	}
	if !e.post(msg{kind: msgAdd, req: r}) {
		writeError(w, &APIError{Object: "error", Message: "engine stopped", Type: "ServiceUnavailableError", Code: 503})
		return
	}
	ctx := hr.Context()
	abort := func() { e.post(msg{kind: msgAbort, req: r}) }
	if req.Stream {
		s.stream(ctx, w, req, kind, r, abort)
		return
	}
	s.answer(ctx, w, req, kind, r, abort)
}

// answer writes r's answer in one response once the engine has finished
// it (a non-streaming request); abort ends r when the client goes first.
func (s *Server) answer(ctx context.Context, w http.ResponseWriter, req *CompletionRequest, kind apiKind, r *request, abort func()) {
	var res *Result
	for res == nil {
		select {
		case <-r.out.notify:
			_, res = r.out.take(0)
		case <-ctx.Done():
			abort()
			return
		}
	}
	if res.Err != nil {
		writeError(w, &APIError{Object: "error", Message: res.Err.Error(), Type: "InternalServerError", Code: 500})
		return
	}
	id, arrival := r.id, r.arrival
	toks, _ := r.out.take(0)
	text := make([]byte, 0, len(toks)*4)
	for _, t := range toks {
		text = append(text, s.text(t)...)
	}
	var metrics *RequestMetrics
	if s.cfg.EnablePerRequestMetrics {
		metrics = requestMetrics(res, s.cfg.TimeScale)
	}
	fr := res.FinishReason
	if kind.chat {
		writeJSON(w, chatResponse(id, arrival.Unix(), s.cfg.Model, kind.role, string(text), toks, req, res, s.usage(res), metrics))
		s.responded()
		return
	}
	ch := CompletionChoice{Text: string(text), FinishReason: &fr}
	if req.ReturnTokenIDs {
		ch.TokenIDs = toks
		ch.PromptTokenIDs = req.Prompt
	}
	writeJSON(w, CompletionResponse{ID: id, Object: kind.object, Created: arrival.Unix(), Model: s.cfg.Model,
		Choices: []CompletionChoice{ch}, Usage: s.usage(res), KVTransferParams: res.KVTransferParams, Metrics: metrics})
	s.responded()
}

func (s *Server) usage(res *Result) *Usage {
	u := &Usage{PromptTokens: res.PromptTokens, CompletionTokens: res.OutputTokens, TotalTokens: res.PromptTokens + res.OutputTokens}
	// As vLLM: prompt_tokens_details only when the count is non-zero
	// (serving_completion.py / serving_chat.py: `if
	// self.enable_prompt_tokens_details and num_cached_tokens`).
	if s.cfg.EnablePromptTokensDetails && res.CachedTokens > 0 {
		u.PromptTokensDetails = &PromptTokensDetails{CachedTokens: res.CachedTokens}
	}
	return u
}

func (s *Server) responded() {
	if n := s.cfg.Faults.CrashAfter; n > 0 && s.served.Add(1) == int64(n) {
		go s.crashNow()
	}
}

func (s *Server) stream(ctx context.Context, w http.ResponseWriter, req *CompletionRequest, kind apiKind, r *request, abort func()) {
	cw := s.newChunkWriter(w, req, kind, r)
	for {
		select {
		case <-r.out.notify:
		case <-ctx.Done():
			abort()
			return
		}
		toks, res := r.out.take(cw.sent)
		if !cw.started {
			if res != nil && res.Err != nil && len(toks) == 0 {
				writeError(w, &APIError{Object: "error", Message: res.Err.Error(), Type: "InternalServerError", Code: 500})
				return
			}
			if err := cw.start(); err != nil {
				abort()
				return
			}
		}
		for i, t := range toks {
			last := res != nil && i == len(toks)-1 && res.Err == nil && res.FinishReason != "abort"
			if err := cw.token(t, last, res); err != nil {
				abort()
				return
			}
			if k := s.cfg.Faults.CutAfter; k > 0 && cw.sent == k && !last {
				cw.flush()
				s.eng.metrics.faultCuts.Inc()
				abort()
				panic(http.ErrAbortHandler) // closes the connection without a terminating chunk
			}
		}
		if res != nil {
			cw.end(res)
			return
		}
		cw.flush()
	}
}

// chunkWriter writes one streamed answer's server-sent events: its chunks
// share a head rendered once, and one buffer.
type chunkWriter struct {
	s         *Server
	w         http.ResponseWriter
	fl        http.Flusher
	req       *CompletionRequest
	kind      apiKind
	r         *request
	buf       []byte
	head      []byte // every chunk's start, to its "choices":[
	prefix    []byte // a token chunk's start, to its text's value
	textEnd   string // what closes a token chunk's text (a chat delta's brace)
	promptIDs []byte // the first token chunk's ,"prompt_token_ids":[...], until sent
	started   bool   // the head of the response was written
	sent      int    // tokens sent
}

// newChunkWriter renders the head of r's chunks and, when req asks for
// them, its prompt's ids.
func (s *Server) newChunkWriter(w http.ResponseWriter, req *CompletionRequest, kind apiKind, r *request) *chunkWriter {
	fl, _ := w.(http.Flusher)
	cw := &chunkWriter{s: s, w: w, fl: fl, req: req, kind: kind, r: r, buf: make([]byte, 0, 512)}
	// Every chunk starts the same way; the rest is appended by hand, byte
	// for byte what encoding/json writes for CompletionChunk (a chat token
	// chunk carries its text as "delta":{"content":...} where a completion
	// chunk has "text", as vLLM's do).
	head := append([]byte(`data: {"id":`), mustJSON(r.id)...)
	head = append(head, `,"object":`...)
	head = append(head, mustJSON(kind.chunkObject)...)
	head = append(head, `,"created":`...)
	head = strconv.AppendInt(head, r.arrival.Unix(), 10)
	head = append(head, `,"model":`...)
	head = append(head, mustJSON(s.cfg.Model)...)
	head = append(head, `,"choices":[`...)
	cw.head = head
	cw.prefix, cw.textEnd = append(head[:len(head):len(head)], `{"index":0,"text":`...), ""
	if kind.chat {
		cw.prefix, cw.textEnd = append(head[:len(head):len(head)], `{"index":0,"delta":{"content":`...), "}"
	}
	// The first chunk echoes the prompt's ids (tens of KiB of JSON for a
	// coding prompt): render them now, while the engine prefills, rather
	// than between the first token and its delivery.
	if req.ReturnTokenIDs {
		cw.promptIDs = appendInts(append([]byte(nil), `,"prompt_token_ids":`...), req.Prompt)
	}
	return cw
}

// start writes the response's head and, for chat, the role chunk.
func (cw *chunkWriter) start() error {
	w := cw.w
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	cw.started = true
	if cw.kind.chat {
		// vLLM's first chat chunk names the role, with the first
		// output and on the same write; it carries prompt_token_ids.
		cw.buf = appendRoleChunk(append(cw.buf[:0], cw.head...), cw.kind.role, cw.promptIDs)
		cw.promptIDs = nil
		if _, err := w.Write(cw.buf); err != nil {
			return err
		}
	}
	return nil
}

// token writes token t's chunk; the last one carries res's finish reason.
func (cw *chunkWriter) token(t int, last bool, res *Result) error {
	buf := append(cw.buf[:0], cw.prefix...)
	buf = append(buf, cw.s.textJSON(t)...)
	buf = append(buf, cw.textEnd...)
	buf = append(buf, `,"logprobs":null,"finish_reason":`...)
	if last {
		buf = appendJSONString(buf, res.FinishReason)
	} else {
		buf = append(buf, "null"...)
	}
	if last || !cw.kind.chat { // vLLM's chat chunks name stop_reason only on the last one
		buf = append(buf, `,"stop_reason":null`...)
	}
	if cw.req.ReturnTokenIDs {
		buf = append(buf, `,"token_ids":[`...)
		buf = strconv.AppendInt(buf, int64(t), 10)
		buf = append(buf, ']')
		if cw.sent == 0 {
			buf = append(buf, cw.promptIDs...)
			cw.promptIDs = nil
		}
	}
	// No metrics here: vLLM puts them only on the usage chunk
	// (stream_options.include_usage), never on a content chunk.
	buf = append(buf, "}]"...)
	buf = append(buf, "}\n\n"...)
	cw.buf = buf
	if _, err := cw.w.Write(buf); err != nil {
		return err
	}
	cw.sent++
	return nil
}

// end writes the stream's end after its last token: an in-stream error or
// the usage chunk (when asked for), then [DONE].
func (cw *chunkWriter) end(res *Result) {
	s := cw.s
	if res.Err != nil {
		// In-stream errors use the newer vLLM shape {"error": {...}}.
		_ = cw.event(map[string]any{"error": &APIError{Object: "error", Message: res.Err.Error(), Type: "InternalServerError", Code: 500}})
	} else if cw.req.IncludeUsage {
		chunk := CompletionChunk{ID: cw.r.id, Object: cw.kind.chunkObject, Created: cw.r.arrival.Unix(), Model: s.cfg.Model,
			Choices: []CompletionChoice{}, Usage: s.usage(res)}
		if s.cfg.EnablePerRequestMetrics {
			chunk.Metrics = requestMetrics(res, s.cfg.TimeScale)
		}
		_ = cw.event(chunk)
	}
	_, err := cw.w.Write([]byte("data: [DONE]\n\n"))
	cw.flush()
	if err == nil && res.Err == nil && res.FinishReason != "abort" {
		s.responded()
	}
}

// event writes v as one event, encoded by encoding/json.
func (cw *chunkWriter) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	cw.buf = append(cw.buf[:0], "data: "...)
	cw.buf = append(cw.buf, b...)
	cw.buf = append(cw.buf, "\n\n"...)
	_, err = cw.w.Write(cw.buf)
	return err
}

// flush sends what was written, where the writer can.
func (cw *chunkWriter) flush() {
	if cw.fl != nil {
		cw.fl.Flush()
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func appendJSONString(buf []byte, s string) []byte {
	return append(buf, mustJSON(s)...)
}

func appendInts(buf []byte, ids []int) []byte {
	buf = append(buf, '[')
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(id), 10)
	}
	return append(buf, ']')
}
