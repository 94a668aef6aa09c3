//go:build linux && (386 || amd64 || arm64)

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Reference is a floor the syscall programs are measured against
// (reference.bpf.c). Benchmarks load it beside hone's programs; the daemon
// never does.
type Reference struct {
	objs    referenceObjects
	latency bool
	links   []link.Link
}

// LoadReference loads a reference for process tgid and attaches it: the
// counting floor (a raw sys_enter program that counts the process's
// syscalls: a PID filter on a load-time constant and a per-CPU counter),
// or with latency the timing floor (sys_enter and sys_exit programs with
// the same filter, a clock read at each end, the entry time in an array
// slot and a per-CPU count and total).
func LoadReference(tgid uint32, latency bool) (_ *Reference, err error) {
	spec, err := loadReference()
	if err != nil {
		return nil, fmt.Errorf("load reference spec: %w", err)
	}
	if err := spec.Variables["ref_tgid"].Set(tgid); err != nil {
		return nil, fmt.Errorf("set ref_tgid: %w", err)
	}
	r := &Reference{latency: latency}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		return nil, fmt.Errorf("load reference: %w", verifierDetail(err))
	}
	attach := map[string]*ebpf.Program{"sys_enter": r.objs.RefEnter}
	if latency {
		attach = map[string]*ebpf.Program{"sys_enter": r.objs.LatEnter, "sys_exit": r.objs.LatExit}
	}
	for tp, p := range attach {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: p})
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("attach reference to %s: %w", tp, err)
		}
		r.links = append(r.links, l)
	}
	return r, nil
}

// Programs are the attached reference programs, for their run-time
// statistics.
func (r *Reference) Programs() []*ebpf.Program {
	if r.latency {
		return []*ebpf.Program{r.objs.LatEnter, r.objs.LatExit}
	}
	return []*ebpf.Program{r.objs.RefEnter}
}

// Count is the number of the process's syscalls counted (the timing floor:
// timed), summed over CPUs.
func (r *Reference) Count() (uint64, error) {
	var n uint64
	if r.latency {
		var per []struct{ Count, TotalNs uint64 }
		if err := r.objs.LatTotal.Lookup(uint32(0), &per); err != nil {
			return 0, err
		}
		for _, v := range per {
			n += v.Count
		}
		return n, nil
	}
	var per []uint64
	if err := r.objs.RefCount.Lookup(uint32(0), &per); err != nil {
		return 0, err
	}
	for _, v := range per {
		n += v
	}
	return n, nil
}

// Close detaches and unloads the reference programs.
func (r *Reference) Close() error {
	var errs []error
	for _, l := range r.links {
		errs = append(errs, l.Close())
	}
	errs = append(errs, r.objs.Close())
	return errors.Join(errs...)
}
