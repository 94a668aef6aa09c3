//go:build linux

package bpf_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/bpf/bpftest"
)

// TestLoadWithoutFamily: a kernel that refuses an optional family's
// programs at load (here the sockets' tp_btf hooks renamed to a
// tracepoint the kernel's BTF lacks, as before Linux 5.19) costs that
// family only. Load succeeds and says why sockets did not load; the
// other families load and attach; everything of the sockets family
// (Attach, SetPortClass, its maps and programs) says it is missing
// rather than failing on a nil object. procs holds the shared maps:
// refused, Load fails naming it.
func TestLoadWithoutFamily(t *testing.T) {
	bpftest.Require(t)
	objs, err := bpf.Load(bpf.Options{EditSpec: bpftest.MissingHooks(bpf.FamilySockets, "sock_send_length", "sock_recv_length")})
	if err != nil {
		t.Fatalf("load without the socket tracepoints: %v", err)
	}
	defer objs.Close()
	loadErr := objs.LoadError(bpf.FamilySockets)
	if loadErr == nil || !strings.HasPrefix(loadErr.Error(), "load sockets: ") || !strings.Contains(loadErr.Error(), "_nonexistent") {
		t.Fatalf("LoadError(sockets) = %v, want the kernel's refusal of the renamed hook", loadErr)
	}
	t.Logf("sockets: %v", loadErr)
	for _, f := range bpf.Families {
		if err := objs.LoadError(f); f != bpf.FamilySockets && err != nil {
			t.Errorf("LoadError(%s) = %v, want loaded", f, err)
		}
	}
	if _, err := objs.Attach(bpf.Probes{Procs: true, Syscalls: true, Sched: true, Sockets: true}); !errors.Is(err, loadErr) {
		t.Errorf("Attach with sockets = %v, want the sockets load error", err)
	}
	links, err := objs.Attach(bpf.Probes{Procs: true, Syscalls: true, Sched: true})
	if err != nil {
		t.Fatalf("attach the other families: %v", err)
	}
	defer links.Close()
	if len(links) != 3+2+3 {
		t.Errorf("%d links, want 8 (procs 3, syscalls 2, sched 3)", len(links))
	}
	if err := objs.SetPortClass(8080, bpf.PortHTTP); !errors.Is(err, loadErr) {
		t.Errorf("SetPortClass = %v, want the sockets load error", err)
	}
	if objs.Conns() != nil || objs.PortClass() != nil {
		t.Error("the sockets maps exist although sockets did not load")
	}
	if objs.SysStats() == nil || objs.SchedStats() == nil || objs.CUDAStats() == nil {
		t.Error("a loaded family's map is nil")
	}
	progs := objs.Programs()
	for _, name := range []string{"on_send", "on_recv", "on_state"} {
		if _, ok := progs[name]; ok {
			t.Errorf("Programs() lists %s of the family that did not load", name)
		}
	}
	for _, name := range []string{"on_fork", "sys_enter", "on_switch", "cuda_launch"} {
		if progs[name] == nil {
			t.Errorf("Programs() lacks %s", name)
		}
	}

	if o, err := bpf.Load(bpf.Options{EditSpec: bpftest.MissingHooks(bpf.FamilyProcs, "sched_process_fork")}); err == nil {
		o.Close()
		t.Error("Load succeeded without the procs programs")
	} else if !strings.HasPrefix(err.Error(), "load procs: ") {
		t.Errorf("Load without the procs programs: %v, want an error naming them", err)
	}
}
