//go:build linux

package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf/bpftest"
	"github.com/hone-llm/hone/daemon/probes"
)

// A kernel that cannot attach the socket probes (injected here) costs what
// they measure and nothing else: the daemon starts, logs a warning naming
// the family and what is lost, counts syscalls exactly and measures
// scheduling as before, records no connection although a TCP pair moved
// bytes, and names the missing family in its snapshot and metrics. A
// required family (procs) that fails still fails the start, naming it.
func TestDaemonWithoutSocketProbes(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	const n = 300
	target := startChild(t, prog, nil, "syscalls", strconv.Itoa(n))
	target.waitReady(t)
	server := startChild(t, prog, nil, "tcp-server")
	port, err := strconv.Atoi(server.line(t))
	if err != nil {
		t.Fatal(err)
	}
	const b = 64 << 10
	client := startChild(t, prog, nil, "tcp-client", strconv.Itoa(port), strconv.Itoa(b), "10")
	client.waitReady(t)
	injected := errors.New("injected: attach tp_btf/sock_send_length: no such tracepoint")
	var logs syncBuffer
	d, err := New(Config{PIDs: []int{target.pid(), server.pid(), client.pid()}, Sched: true, ScanPeriod: 100 * time.Millisecond,
		attachFault: map[string]error{probes.Sockets: injected}}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatalf("start without the socket probes: %v", err)
	}
	defer d.Close()
	target.goAhead(t)
	client.goAhead(t)
	client.line(t)
	client.wait(t)
	if got := server.line(t); got != strconv.Itoa(b) {
		t.Fatalf("server received %s bytes, want %d", got, b)
	}
	server.wait(t)
	target.wait(t)
	want := workloadSyscalls(n)
	eventually(t, 5*time.Second, func() string {
		s := d.Snapshot()
		if got := syscallCounts(s, target.pid()); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("target syscalls by class = %v, want exactly %v", got, want)
		}
		for _, th := range threadsOf(s, target.pid()) {
			if th.Sched == nil || th.Sched.OnCPUNS == 0 || th.Sched.Switches == 0 {
				return fmt.Sprintf("target thread %d: sched %+v, want on-CPU time and switches", th.TID, th.Sched)
			}
		}
		if len(s.Connections) != 0 || s.ClosedConnections.Connections != 0 {
			return fmt.Sprintf("connections recorded without the socket probes: %+v", s.Connections)
		}
		return ""
	})
	s := d.Snapshot()
	sockets, _ := probes.Lookup(probes.Sockets)
	got := map[string]ProbeStatus{}
	for _, p := range s.Probes {
		got[p.Family] = p
	}
	for _, f := range []string{probes.Procs, probes.Syscalls, probes.Sched} {
		if got[f] != (ProbeStatus{Family: f, Status: ProbeAttached}) {
			t.Errorf("probes[%s] = %+v, want attached", f, got[f])
		}
	}
	if w := (ProbeStatus{Family: probes.Sockets, Status: ProbeUnavailable, Error: injected.Error(), Lost: sockets.Lost}); got[probes.Sockets] != w {
		t.Errorf("probes[sockets] = %+v, want %+v", got[probes.Sockets], w)
	}
	if len(s.Probes) != len(probes.All) {
		t.Errorf("%d probe families in the snapshot, want %d: %+v", len(s.Probes), len(probes.All), s.Probes)
	}
	if l := logs.String(); !strings.Contains(l, `level=WARN msg="probes unavailable on this kernel; carrying on without them" family=sockets lost="`+sockets.Lost+`"`) {
		t.Errorf("no warning naming the family and what is lost:\n%s", l)
	}
	srv := httptest.NewServer(Handler(d.Snapshot))
	defer srv.Close()
	_, body := get(t, srv, "/metrics")
	for _, line := range []string{`hone_probe_family_attached{family="sockets"} 0`, `hone_probe_family_attached{family="syscalls"} 1`,
		`hone_probe_family_attached{family="procs"} 1`, `hone_probe_family_attached{family="sched"} 1`} {
		if !bytes.Contains(body, []byte(line+"\n")) {
			t.Errorf("/metrics lacks %s", line)
		}
	}

	d2, err := New(Config{PIDs: []int{os.Getpid()}, attachFault: map[string]error{probes.Procs: injected}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "attach the procs probes") || !errors.Is(err, injected) {
		t.Errorf("start without the procs probes: %v, want an error naming them", err)
	}
}
