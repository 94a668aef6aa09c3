//go:build linux

package calibrate

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf/bpftest"
	"github.com/hone-llm/hone/daemon"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// TestDaemonStepsLive (with -live, as root): the whole path a hone user on
// a GPU host takes to step data. hone sim serve runs qwen3-32b-b300 with
// its steps calling the fake libcuda, the daemon traces them, a replay
// sends the coding workload, and the daemon's steps joined with the
// record (StepsFromEvidence) are checked against the profile the
// emulator ran. The agreement is structural (the emulator slept the
// profile's step costs): what it tests is the join (which step held which
// prompt chunk and decode) and the daemon's step timing, whose error the
// host adds. Bounds are one-sided and loose for that.
func TestDaemonStepsLive(t *testing.T) {
	if !*live {
		t.Skip("a live replay of about a minute: run with -live (make test-consistency)")
	}
	bpftest.Require(t)
	_, libcuda := bpftest.Workload(t)
	ctx := context.Background()
	port := honetest.FreePorts(t, 1)
	cmd := exec.CommandContext(ctx, honetest.Binary(t), "sim", "serve", "--port", strconv.Itoa(port), "--profile", "qwen3-32b-b300",
		"--model", "Qwen/Qwen3-32B", "--max-num-batched-tokens", "2048", "--max-model-len", "8192",
		"--enable-prompt-tokens-details", "--cuda-lib", libcuda, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	honetest.WaitHealthy(t, url)
	d, err := daemon.New(daemon.Config{PIDs: []int{cmd.Process.Pid}, CUDALaunches: time.Hour, ScanPeriod: 100 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	rec, err := replay.Run(ctx, replay.Options{Endpoint: url, Model: "Qwen/Qwen3-32B", Kind: schema.KindEmulated,
		QPS: []float64{1, 4}, Workload: workload24(), CachedTokensReported: true,
		Config: map[string]any{"topology": map[string]any{"kind": "colocated", "replicas": 1, "tp": 1}}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the last steps' ring-buffer events
	snap, err := json.Marshal(d.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	ev, err := diagnose.ParseKernelEvidence(snap)
	if err != nil {
		t.Fatal(err)
	}
	sd, err := StepsFromEvidence(ev, cmd.Process.Pid, rec, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := emulator.LookupProfile("qwen3-32b-b300")
	if err != nil {
		t.Fatal(err)
	}
	res, err := CheckSteps(p, sd)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d steps joined: %+v, all %+v", len(sd.Steps), res.Phases, res.All)
	for _, ph := range Phases {
		if res.Phases[ph].Steps == 0 {
			t.Errorf("no %s step joined", ph)
		}
	}
	if res.All.MedianAPE > 3 || res.All.P90APE > 10 {
		t.Errorf("daemon steps against the profile the emulator ran: median %.2f%%, p90 %.2f%%; want <= 3%% and <= 10%% (the join misplaces work, or the host distorted the steps)", res.All.MedianAPE, res.All.P90APE)
	}
}

// workload24 is the default coding workload cut to 24 requests.
func workload24() schema.Workload {
	w := replay.DefaultWorkload()
	w.Requests = 24
	return w
}
