package emulator

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
)

// A CUDA worker makes an engine's CUDA calls from a child process, as
// vLLM does: its API server (the HTTP exchanges) starts the engine core,
// and with tensor parallelism the core starts one worker per rank, and
// those launch the CUDA work, so a daemon sees a request's exchange and
// its engine's steps under different PIDs of one process tree. The engine
// (workerProbe) writes one byte per call on the child's stdin: 'k'
// cuLaunchKernel, 'g' cuGraphLaunch, 's' cuStreamSynchronize; the child
// (ServeCUDAWorker) makes the call. A launch is not answered (it is
// asynchronous on a GPU too); a sync is, with two CLOCK_MONOTONIC ns
// readings, 8 bytes little-endian each: the one taken right before the
// step's launch (0 if none since the last sync) and the one right before
// the sync. A step's trace line records the child's instants, and the
// engine goes on (sends its tokens) only after the child's synchronize
// returned, as vLLM's API server streams only what a step produced.

// Worker protocol bytes.
const (
	workerLaunchKernel = 'k'
	workerGraphLaunch  = 'g'
	workerStreamSync   = 's'
)

// ServeCUDAWorker is a CUDA worker's side (hone sim cuda-worker): it
// loads lib (openCUDAProbe) and serves calls read from r until EOF.
func ServeCUDAWorker(lib string, r io.Reader, w io.Writer) error {
	p, err := openCUDAProbe(lib)
	if err != nil {
		return err
	}
	br, bw := bufio.NewReader(r), bufio.NewWriter(w)
	var ack [16]byte
	var launched int64
	for {
		op, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cuda worker: read: %w", err)
		}
		now := monotonicNow()
		switch op {
		case workerLaunchKernel, workerGraphLaunch:
			if launched == 0 {
				launched = now // the step's first launch
			}
			p.launch(op == workerGraphLaunch)
			continue
		case workerStreamSync:
			p.sync()
		default:
			return fmt.Errorf("cuda worker: unknown call byte %q (want k, g or s)", op)
		}
		binary.LittleEndian.PutUint64(ack[:8], uint64(launched))
		binary.LittleEndian.PutUint64(ack[8:], uint64(now))
		launched = 0
		if _, err := bw.Write(ack[:]); err != nil {
			return fmt.Errorf("cuda worker: write: %w", err)
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("cuda worker: write: %w", err)
		}
	}
}

// workerProbe is the engine's side: a cudaProbe whose calls a child
// process makes. If the child fails, the probe says so once and calls
// nothing more (the engine runs on without step probes; a daemon then sees
// none, which its tests notice).
type workerProbe struct {
	mu     sync.Mutex
	ctx    context.Context // ends when the server stops
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	log    *slog.Logger
	broken bool
}

// startCUDAWorker starts argv (hone sim cuda-worker --cuda-lib PATH) as
// the engine's CUDA worker; ctx's end kills it.
func startCUDAWorker(ctx context.Context, argv []string, log *slog.Logger) (*workerProbe, error) {
	if len(argv) == 0 {
		return nil, errors.New("cuda worker: no command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	setDeathSignal(cmd)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("cuda worker: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("cuda worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cuda worker %s: %w", argv[0], err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &workerProbe{ctx: ctx, cmd: cmd, in: in, out: bufio.NewReader(out), log: log}
	// A sync with its answer proves the child loaded the library before
	// the engine serves a request.
	if _, m := p.sync(); m == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("cuda worker %v: did not answer its first call (see its error above)", argv)
	}
	go cmd.Wait() // reaps it when ctx ends or it fails
	return p, nil
}

// fail marks the worker failed; the caller holds mu.
func (p *workerProbe) fail() {
	p.broken = true
	if p.ctx.Err() != nil {
		return // the server is stopping: the worker was killed
	}
	p.log.Error("cuda worker failed: the engine's steps call no probe from now on", "pid", p.cmd.Process.Pid)
}

func (p *workerProbe) launch(graph bool) {
	op := byte(workerLaunchKernel)
	if graph {
		op = workerGraphLaunch
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken {
		return
	}
	if _, err := p.in.Write([]byte{op}); err != nil {
		p.fail()
	}
}

// sync makes the step's synchronize in the child and returns its
// readings, zeros when the worker has failed.
func (p *workerProbe) sync() (launchNs, syncNs int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken {
		return 0, 0
	}
	var ack [16]byte
	if _, err := p.in.Write([]byte{workerStreamSync}); err == nil {
		if _, err = io.ReadFull(p.out, ack[:]); err == nil {
			return int64(binary.LittleEndian.Uint64(ack[:8])), int64(binary.LittleEndian.Uint64(ack[8:]))
		}
	}
	p.fail()
	return 0, 0
}
