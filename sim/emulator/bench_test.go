package emulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStreams512 holds 512 concurrent streams at time scale 1 on the
// A10 profile (max-num-seqs raised to 512): each iteration sends 512
// streaming requests of 128 prompt and 64 output tokens at once and reads
// every token. It reports the p99 step lateness (how long after its
// modelled end a step's tokens were released; the target is <= 2 ms), the
// process CPU time per emulated token (client and server together: an
// upper bound for the server), and the token rate.
//
//	go test ./sim/emulator -run '^$' -bench Streams512 -benchtime 3x -count 5
func BenchmarkStreams512(b *testing.B) {
	const streams, promptLen, outLen = 512, 128, 64
	s := startServer(b, Config{Profile: "qwen2.5-coder-0.5b-a10", TimeScale: 1, MaxNumSeqs: streams})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * streams, MaxConnsPerHost: 0}}
	bodies := make([][]byte, streams)
	for i := range bodies {
		bodies[i], _ = json.Marshal(map[string]any{"prompt": suffix(i, promptLen), "max_tokens": outLen,
			"ignore_eos": true, "stream": true})
	}
	ctx := context.Background()
	run := func() (int, error) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		var firstErr error
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := rawStream(ctx, client, s.URL(), bodies[i])
				mu.Lock()
				total += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		return total, firstErr
	}
	if _, err := run(); err != nil { // warm connections and the prefix cache
		b.Fatal(err)
	}
	before := len(s.StepLateness())
	cpu0 := cpuTime()
	t0 := time.Now()
	tokens := 0
	b.ResetTimer()
	for range b.N {
		n, err := run()
		if err != nil {
			b.Fatal(err)
		}
		tokens += n
	}
	b.StopTimer()
	elapsed := time.Since(t0)
	cpu := cpuTime() - cpu0
	lateRun := s.StepLateness()[before:]
	slices.Sort(lateRun)
	if tokens != b.N*streams*outLen {
		b.Fatalf("%d tokens, want %d", tokens, b.N*streams*outLen)
	}
	p99 := lateRun[min(len(lateRun)-1, int(float64(len(lateRun))*0.99))]
	b.ReportMetric(float64(p99)/1e6, "step-late-p99-ms")
	b.ReportMetric(float64(lateRun[len(lateRun)/2])/1e6, "step-late-p50-ms")
	b.ReportMetric(float64(cpu)/float64(tokens)/1e3, "cpu-us/token")
	b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tokens/s")
	b.ReportMetric(float64(len(lateRun)), "steps")
}

// rawStream reads an SSE stream and counts token chunks without decoding
// them, so the client costs little CPU.
func rawStream(ctx context.Context, c *http.Client, base string, body []byte) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	n := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return n, fmt.Errorf("stream ended early after %d tokens: %w", n, err)
		}
		if bytes.HasPrefix(line, []byte("data: {")) {
			n++
		} else if bytes.HasPrefix(line, []byte("data: [DONE]")) {
			return n, nil
		}
	}
}

// StepLateness is every step's completion lateness so far, in step order:
// how long after its modelled end (in wall time) the engine finished it.
func (s *Server) StepLateness() []time.Duration { return s.eng.stepLateness() }

// stepLateness returns a copy of every step's lateness so far, in step
// order: how long after its modelled end the engine completed the step.
func (e *engine) stepLateness() []time.Duration {
	e.lateMu.Lock()
	defer e.lateMu.Unlock()
	return append([]time.Duration(nil), e.late...)
}
