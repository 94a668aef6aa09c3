// Package honetest holds what tests across hone's packages share to run
// hone itself: the hone binary (built once per test process) and ranges of
// free loopback ports. It is imported by tests only.
package honetest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hone-llm/hone/slo"
)

var (
	buildOnce sync.Once
	buildDir  string
	built     string
	buildErr  error
)

// Cleanup removes the binary Binary built, if it built one; call it from
// TestMain after m.Run.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Binary is $HONE_BIN (make test sets it), else hone built once for this
// test process. Under -short, without $HONE_BIN, the test is skipped.
func Binary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("HONE_BIN"); b != "" {
		return b
	}
	if testing.Short() {
		t.Skip("needs a hone binary: set HONE_BIN or run without -short")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "honetest")
		if buildErr != nil {
			return
		}
		built = filepath.Join(buildDir, "hone")
		if b, err := exec.Command("go", "build", "-o", built, "github.com/hone-llm/hone/cmd/hone").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build hone: %v\n%s", err, b)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// FreePorts returns the first of n consecutive loopback ports that are
// free now. They are drawn below the kernel's ephemeral range, so that the
// outgoing connections of every test running beside this one (which take
// ephemeral ports) cannot land in them between this check and their use.
func FreePorts(t testing.TB, n int) int {
	t.Helper()
	lo, hi := 10000, ephemeralLow()-n
	if hi <= lo {
		lo, hi = 1024, 65535-n
	}
	for range 200 {
		base := lo + rand.IntN(hi-lo)
		if rangeFree(base, n) {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports in [%d, %d)", n, lo, hi+n)
	return 0
}

func rangeFree(base, n int) bool {
	for p := base; p < base+n; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// ephemeralLow is the low end of the kernel's ephemeral port range
// (Linux's default, 32768, elsewhere or when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return v
}

// ReportAdded reports a proxy benchmark's latencies side by side: direct
// and proxied p50 and p99 (nearest rank, µs) and what the proxy added.
func ReportAdded(b *testing.B, direct, proxied []time.Duration) {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	for _, p := range []float64{50, 99} {
		d, q := slo.NearestRank(direct, p), slo.NearestRank(proxied, p)
		b.ReportMetric(us(d), fmt.Sprintf("direct-p%g-us", p))
		b.ReportMetric(us(q), fmt.Sprintf("proxied-p%g-us", p))
		b.ReportMetric(us(q-d), fmt.Sprintf("added-p%g-us", p))
	}
}

// WaitHealthy waits up to 20 s for GET url/health to answer, and fails
// the test when it never does.
func WaitHealthy(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became healthy: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// HeapPeak runs f and returns the most heap in use at any time during it
// (runtime.MemStats.HeapInuse, sampled every 5 ms) above what was in use
// before it, after a GC: what f needed at once, its garbage not yet
// collected included. Benchmarks report it beside their retained bytes.
func HeapPeak(f func()) uint64 {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				runtime.ReadMemStats(&m)
				peak.Store(max(peak.Load(), m.HeapInuse))
			}
		}
	}()
	f()
	close(stop)
	<-sampled
	return max(peak.Load(), before.HeapInuse) - before.HeapInuse
}
