//go:build linux

// Command fake-vllm stands in for vLLM's `vllm` executable on a host
// without a GPU, for hone's runbook test (internal/runbook), which runs
// docs/device.md as written. It is never a measurement: what it serves is
// hone's emulator, whose GET /version says so, so every record made
// against it is "emulated".
//
//	vllm --version        prints FAKE_VLLM_VERSION
//	vllm serve MODEL ...  checks the arguments as that vLLM would
//	                      (engine.CheckVLLMServeArgs: hone's version table)
//	                      and exits 2 on one it would refuse; else serves
//	                      hone sim serve with the same settings
//
// Like vLLM, it serves POST /reset_prefix_cache only with
// VLLM_SERVER_DEV_MODE=1: without it the emulator runs behind a small
// proxy that answers that route 404, as vLLM's router would. Linux only,
// as the runbook test is.
//
// Environment:
//
//	FAKE_VLLM_VERSION     the vLLM version to be (default: the newest
//	                      release vLLM's version table names)
//	FAKE_VLLM_HONE        the hone binary (default: hone on PATH)
//	FAKE_VLLM_TIME_SCALE  the emulator's --time-scale (default 1)
//	FAKE_VLLM_PROFILE     the emulator's --profile (default: its own)
//	FAKE_VLLM_REVISION    the one model commit the fake hub has: any other
//	                      --revision fails, as vLLM fails to fetch it
//	FAKE_VLLM_LOG         a file to which each invocation appends a JSON line
//	FAKE_VLLM_ROLE        prefill | decode for a kv_both worker (default:
//	                      from the name of the log file stdout goes to,
//	                      which hone deploy up names after the worker)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/hone-llm/hone/engine"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fake vllm:", err)
		var u usage
		if errors.As(err, &u) {
			os.Exit(2) // argparse's status
		}
		os.Exit(1)
	}
}

// usage is an error vLLM's argument parser would report.
type usage struct{ error }

func version() (engine.Version, error) {
	raw := os.Getenv("FAKE_VLLM_VERSION")
	if raw == "" {
		raw = newestVersion()
	}
	return engine.ParseVLLMVersion(raw)
}

// newestVersion is the newest release vLLM's version table names.
func newestVersion() string {
	return engine.FactsOf(engine.VLLM).Versions.Newest().Raw
}

func run(args []string) error {
	v, err := version()
	if err != nil {
		return fmt.Errorf("FAKE_VLLM_VERSION: %w", err)
	}
	switch {
	case len(args) == 1 && args[0] == "--version":
		fmt.Println(v.Raw)
		return nil
	case len(args) >= 1 && args[0] == "serve":
	default:
		return usage{fmt.Errorf("usage: vllm --version | vllm serve MODEL [flags]; got %q", args)}
	}
	sa, err := engine.CheckVLLMServeArgs(v, args[1:])
	logInvocation(v, args, err)
	if err != nil {
		return usage{err}
	}
	if want := os.Getenv("FAKE_VLLM_REVISION"); want != "" && sa.Flags["--revision"] != "" && sa.Flags["--revision"] != want {
		return fmt.Errorf("huggingface_hub.errors.RevisionNotFoundError: revision %s of %s not found (the fake hub has %s)",
			sa.Flags["--revision"], sa.Model, want)
	}
	argv, err := emulatorArgs(sa)
	if err != nil {
		return err
	}
	hone := os.Getenv("FAKE_VLLM_HONE")
	if hone == "" {
		hone = "hone"
	}
	if hone, err = exec.LookPath(hone); err != nil {
		return fmt.Errorf("FAKE_VLLM_HONE: %w", err)
	}
	if os.Getenv(engine.EnvServerDevMode) == "1" {
		// vLLM in development mode serves /reset_prefix_cache, as the
		// emulator always does: the emulator can take this process's place.
		return syscall.Exec(hone, append([]string{hone}, argv...), os.Environ())
	}
	return serveWithoutReset(hone, argv, sa.Flags["--host"], sa.Flags["--port"])
}

// emulatorArgs spells `hone sim serve` for a checked `vllm serve`, the
// way the emulator engine (engine/emulator.go Render) spells the same spec.
func emulatorArgs(sa engine.ServeArgs) ([]string, error) {
	f := sa.Flags
	argv := []string{"sim", "serve", "--model", sa.Model, "--host", cmpOr(f["--host"], "127.0.0.1"), "--port", cmpOr(f["--port"], "8000")}
	if n, ok := f["--served-model-name"]; ok {
		argv = append(argv, "--served-model-name", n)
	}
	if p := os.Getenv("FAKE_VLLM_PROFILE"); p != "" {
		argv = append(argv, "--profile", p)
	}
	argv = append(argv, "--time-scale", cmpOr(os.Getenv("FAKE_VLLM_TIME_SCALE"), "1"))
	for _, name := range []string{"--tensor-parallel-size", "--kv-cache-dtype", "--max-num-seqs", "--max-num-batched-tokens",
		"--gpu-memory-utilization", "--block-size", "--max-model-len"} {
		if v, ok := f[name]; ok {
			argv = append(argv, name, v)
		}
	}
	for _, name := range []string{"--no-enable-prefix-caching", "--enable-prompt-tokens-details", "--enable-per-request-metrics", "--enforce-eager"} {
		if _, ok := f[name]; ok {
			argv = append(argv, name)
		}
	}
	if c, ok := f["--compilation-config"]; ok {
		var cc struct {
			Mode string `json:"cudagraph_mode"`
		}
		if json.Unmarshal([]byte(c), &cc) == nil && cc.Mode == "NONE" {
			argv = append(argv, "--enforce-eager")
		}
	}
	kv, ok := f["--kv-transfer-config"]
	if !ok {
		return argv, nil
	}
	var tc struct {
		Connector string `json:"kv_connector"`
		Role      string `json:"kv_role"`
		Policy    string `json:"kv_load_failure_policy"`
	}
	if err := json.Unmarshal([]byte(kv), &tc); err != nil {
		return nil, err
	}
	if tc.Connector != engine.NixlConnector {
		return nil, fmt.Errorf("--kv-transfer-config: the fake serves hone's emulator, which speaks NixlConnector only, not %q", tc.Connector)
	}
	role, err := roleOf(tc.Role)
	if err != nil {
		return nil, err
	}
	argv = append(argv, "--role", role)
	if role == engine.RoleDecode && tc.Policy != "" {
		argv = append(argv, "--kv-load-failure-policy", tc.Policy)
	}
	return argv, nil
}

var workerLogRE = regexp.MustCompile(`^(prefill|decode)-[0-9]+\.log$`)

// roleOf is the emulator role of a worker with kv_role kvRole. With
// kv_both a vLLM worker does either and the proxy decides; the emulator
// needs one, which hone deploy up's name for the worker's log says.
func roleOf(kvRole string) (string, error) {
	switch kvRole {
	case "kv_producer":
		return engine.RolePrefill, nil
	case "kv_consumer":
		return engine.RoleDecode, nil
	}
	if r := os.Getenv("FAKE_VLLM_ROLE"); r != "" {
		return r, nil
	}
	if out, err := os.Readlink("/proc/self/fd/1"); err == nil {
		if m := workerLogRE.FindStringSubmatch(filepath.Base(out)); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf("kv_role %q: set FAKE_VLLM_ROLE (prefill or decode); stdout is not a hone deploy worker log", kvRole)
}

// serveWithoutReset runs the emulator on a free loopback port and serves
// it on host:port, answering POST /reset_prefix_cache 404 as vLLM does
// outside development mode.
func serveWithoutReset(hone string, argv []string, host, port string) error {
	for i := 0; i+1 < len(argv); i++ {
		switch argv[i] {
		case "--host":
			argv[i+1] = "127.0.0.1"
		case "--port":
			argv[i+1] = "0"
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := exec.Command(hone, argv...)
	cmd.Stdout = os.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	backend := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(os.Stderr, line)
			// "hone sim serve: http://127.0.0.1:PORT role=..."
			if rest, ok := strings.CutPrefix(line, "hone sim serve: "); ok && strings.HasPrefix(rest, "http://") {
				select {
				case backend <- strings.Fields(rest)[0]:
				default:
				}
			}
		}
	}()
	var target string
	select {
	case target = <-backend:
	case <-time.After(60 * time.Second):
		return errors.New("the emulator did not say where it listens within 60 s")
	case <-ctx.Done():
		return nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // stream every event as it comes
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"detail":"Not Found"}`)
	})
	mux.Handle("/", rp)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	exited := make(chan struct{})
	go func() { cmd.Process.Wait(); close(exited) }()
	go func() { <-exited; srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// logInvocation appends what this invocation was asked and answered to
// FAKE_VLLM_LOG, for the runbook test to read.
func logInvocation(v engine.Version, args []string, checkErr error) {
	path := os.Getenv("FAKE_VLLM_LOG")
	if path == "" {
		return
	}
	rec := map[string]any{"version": v.Raw, "args": args, engine.EnvServerDevMode: os.Getenv(engine.EnvServerDevMode)}
	if checkErr != nil {
		rec["refused"] = checkErr.Error()
	}
	b, _ := json.Marshal(rec)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	f.Write(append(b, '\n'))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
