//go:build linux

package diagnose

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf/bpftest"
	"github.com/hone-llm/hone/daemon"
	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// The daemon's view of each request's KV pull, joined to the request by
// time alone, carries exactly the bytes the emulator says it moved: the
// kernel-side evidence and the engine's ground truth agree per request.
func TestKernelKVJoin(t *testing.T) {
	bpftest.Require(t)
	if testing.Short() {
		t.Skip("starts engines, a proxy and the daemon")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The daemon never traces its own process, so the engines run as
	// separate hone sim serve processes.
	hone := honetest.Binary(t)
	dir := t.TempDir()
	freePort := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	kvPort, pfPort, dcPort := freePort(), freePort(), freePort()
	serve := func(role string, port int, extra ...string) *exec.Cmd {
		args := append([]string{"sim", "serve", "--role", role, "--port", strconv.Itoa(port), "--profile", testProfile,
			"--time-scale", strconv.FormatFloat(timeScale, 'g', -1, 64), "--enable-prompt-tokens-details", "--enable-per-request-metrics",
			"--trace-file", filepath.Join(dir, role+".jsonl")}, extra...)
		cmd := exec.CommandContext(ctx, hone, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	pfCmd := serve("prefill", pfPort, "--kv-port", strconv.Itoa(kvPort))
	dcCmd := serve("decode", dcPort)
	pfURL, dcURL := "http://127.0.0.1:"+strconv.Itoa(pfPort), "http://127.0.0.1:"+strconv.Itoa(dcPort)
	for _, u := range []string{pfURL, dcURL} {
		honetest.WaitHealthy(t, u)
	}
	d, err := daemon.New(daemon.Config{PIDs: []int{pfCmd.Process.Pid, dcCmd.Process.Pid}, KVPorts: []uint16{uint16(kvPort)},
		BurstGap: 50 * time.Millisecond}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	p, pu := serveProxy(t, ctx, proxy.Config{Listen: "127.0.0.1:0", Mode: proxy.ModeDisaggregated, Connector: proxy.NixlConnector,
		Workers: []proxy.Worker{{Name: "p0", Role: proxy.RolePrefill, URL: pfURL}, {Name: "d0", Role: proxy.RoleDecode, URL: dcURL}}})
	w := replay.DefaultWorkload()
	w.Requests = 24
	rec, err := replay.Run(ctx, replay.Options{Endpoint: pu, TokenizeEndpoint: dcURL, Model: "Qwen/Qwen2.5-Coder-0.5B-Instruct",
		Kind: schema.KindEmulated, Backend: "emulator", Workload: w, QPS: []float64{2}, TimeScale: timeScale, GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Every one of the 24 requests pulled its KV over its own connection;
	// on a loaded runner the last reads can take a moment to reach the
	// maps, so poll the snapshot instead of sleeping a fixed time.
	var conns []KVConn
	for deadline := time.Now().Add(10 * time.Second); ; {
		snap, err := json.Marshal(d.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		if conns, err = ParseKVConns(snap); err != nil {
			t.Fatal(err)
		}
		if len(conns) >= w.Requests || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	tls, _ := p.Timelines(0, 0)
	atts, err := Attribute(rec, Evidence{Timelines: tls, KV: conns})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := os.ReadFile(filepath.Join(dir, "decode.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(tb, []byte("\n"))
	want := map[string]int64{} // request id → KV payload bytes the decode worker received
	for _, l := range lines {
		var tr emulator.TraceRecord
		if json.Unmarshal(l, &tr) == nil && tr.Event == "request" && tr.Role == emulator.RoleDecode {
			want[tr.RequestID[len("cmpl-"):]] = tr.KVBytesReceived
		}
	}
	joined := 0
	for _, a := range atts {
		payload, ok := want[a.RequestID]
		if !ok || a.KernelKVBytes == 0 {
			continue
		}
		joined++
		// The socket also carries the pull's JSON header line before the
		// payload; a few hundred bytes at most.
		if int64(a.KernelKVBytes) < payload || int64(a.KernelKVBytes) > payload+512 {
			t.Errorf("%s: kernel saw %d bytes, the emulator sent %d of KV", a.RequestID, a.KernelKVBytes, payload)
		}
		if a.KernelTransferMs <= 0 || a.KernelTransferMs > a.TTFTMs {
			t.Errorf("%s: kernel transfer %v ms, TTFT %v ms", a.RequestID, a.KernelTransferMs, a.TTFTMs)
		}
	}
	// 16 measured requests at 2 req/s, one pull each.
	if joined != 16 {
		t.Errorf("%d of 16 measured requests joined to a KV connection (%d connections seen)", joined, len(conns))
		for _, c := range conns {
			t.Logf("conn %s→%s rx %d B, %d..%d ns, joined to %q", c.Local, c.Remote, c.RXBytes, c.FirstNs, c.LastNs, c.Attributed)
		}
	}
	if d := Summarize(rec.Kind, atts, rec.SLO, nil); d.Levels[0].KernelJoined != joined {
		t.Errorf("summary: %d joined, want %d", d.Levels[0].KernelJoined, joined)
	}
	t.Logf("joined %d requests; e.g. %d kernel bytes, %.2f ms", joined, atts[0].KernelKVBytes, atts[0].KernelTransferMs)
}
