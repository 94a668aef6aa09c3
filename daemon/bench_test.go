//go:build linux

package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf/bpftest"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// BenchmarkEmulatorOverhead drives hone's engine emulator (in this process)
// with an open-loop 200 requests/s stream of short completions and compares
// windows with the daemon attached (a child process tracing this process:
// syscalls, sched, sockets) and detached, alternated. It reports throughput
// and p99 TTFT of each, their difference, and the daemon's own CPU and RSS.
func BenchmarkEmulatorOverhead(b *testing.B) {
	bpftest.Require(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := emulator.Start(ctx, emulator.Config{Port: 0, TimeScale: 0.05, Logger: nil})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	const rate = 200
	const window = 4 * time.Second
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	body := `{"model":"` + srv.Profile().Model.Name + `","prompt":"def add(a, b):","max_tokens":8,"stream":true}`
	run := func() (rps, p99 float64) {
		var mu sync.Mutex
		var ttfts []float64
		var wg sync.WaitGroup
		start := time.Now()
		for i := 0; ; i++ {
			at := start.Add(time.Duration(i) * time.Second / rate)
			if at.Sub(start) >= window {
				break
			}
			time.Sleep(time.Until(at))
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				resp, err := client.Post(srv.URL()+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					return
				}
				defer resp.Body.Close()
				r := bufio.NewReader(resp.Body)
				first := true
				for {
					line, err := r.ReadString('\n')
					if strings.HasPrefix(line, "data: ") && first {
						first = false
						mu.Lock()
						ttfts = append(ttfts, float64(time.Since(t0).Microseconds())/1e3)
						mu.Unlock()
					}
					if err != nil {
						break
					}
				}
				io.Copy(io.Discard, resp.Body)
			}()
		}
		wg.Wait()
		el := time.Since(start).Seconds()
		if len(ttfts) == 0 {
			b.Fatal("no request succeeded")
		}
		return float64(len(ttfts)) / el, slo.NearestRank(ttfts, 99)
	}
	run() // warm up
	var offRPS, onRPS, offP99, onP99, cpu, rss []float64
	for range b.N {
		for round := 0; round < 5; round++ {
			r, p := run()
			offRPS, offP99 = append(offRPS, r), append(offP99, p)
			dir := b.TempDir()
			spec, _ := json.Marshal(subprocessSpec{PIDs: []int{os.Getpid()}, Listen: "off",
				Output: filepath.Join(dir, "s.json"), Duration: window + 3*time.Second, ScanPeriod: time.Second})
			d := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
			d.Env = append(os.Environ(), subprocessEnv+"="+string(spec))
			var stderr strings.Builder
			d.Stderr = &stderr
			if err := d.Start(); err != nil {
				b.Fatal(err)
			}
			for !strings.Contains(stderr.String(), "msg=attached") {
				time.Sleep(20 * time.Millisecond)
			}
			r, p = run()
			onRPS, onP99 = append(onRPS, r), append(onP99, p)
			if err := d.Wait(); err != nil {
				b.Fatalf("daemon: %v\n%s", err, stderr.String())
			}
			ru := d.ProcessState.SysUsage().(*syscall.Rusage)
			cpu = append(cpu, time.Duration(ru.Utime.Nano()+ru.Stime.Nano()).Seconds()/(window+3*time.Second).Seconds())
			rss = append(rss, float64(ru.Maxrss)/1024)
		}
	}
	b.ReportMetric(slo.Median(offRPS), "req/s-detached")
	b.ReportMetric(slo.Median(onRPS), "req/s-attached")
	b.ReportMetric(slo.Median(offP99), "p99-ttft-ms-detached")
	b.ReportMetric(slo.Median(onP99), "p99-ttft-ms-attached")
	b.ReportMetric(100*(slo.Median(onP99)/slo.Median(offP99)-1), "p99-ttft-diff-%")
	b.ReportMetric(100*(slo.Median(onRPS)/slo.Median(offRPS)-1), "throughput-diff-%")
	b.ReportMetric(slo.Median(cpu), "daemon-cpu-s/s")
	b.ReportMetric(slo.Median(rss), "daemon-maxrss-MiB")
	fmt.Fprintf(os.Stderr, "windows detached rps %v p99 %v; attached rps %v p99 %v\n", offRPS, offP99, onRPS, onP99)
}
