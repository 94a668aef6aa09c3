//go:build linux && (386 || amd64 || arm64)

package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Reference is the floor the syscall programs are measured against
// (reference.bpf.c): a raw sys_enter program that counts one process's
// syscalls, a PID filter on a load-time constant and a per-CPU counter.
// Benchmarks load it beside hone's programs; the daemon never does.
type Reference struct {
	objs referenceObjects
	link link.Link
}

// LoadReference loads the reference program for process tgid and attaches
// it to raw_syscalls:sys_enter.
func LoadReference(tgid uint32) (_ *Reference, err error) {
	spec, err := loadReference()
	if err != nil {
		return nil, fmt.Errorf("load reference spec: %w", err)
	}
	if err := spec.Variables["ref_tgid"].Set(tgid); err != nil {
		return nil, fmt.Errorf("set ref_tgid: %w", err)
	}
	r := &Reference{}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		return nil, fmt.Errorf("load reference: %w", verifierDetail(err))
	}
	r.link, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: r.objs.RefEnter})
	if err != nil {
		r.objs.Close()
		return nil, fmt.Errorf("attach reference: %w", err)
	}
	return r, nil
}

// Program is the reference program, for its run-time statistics.
func (r *Reference) Program() *ebpf.Program { return r.objs.RefEnter }

// Count is the number of the process's syscalls counted, summed over CPUs.
func (r *Reference) Count() (uint64, error) {
	var per []uint64
	if err := r.objs.RefCount.Lookup(uint32(0), &per); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// Close detaches and unloads the reference program.
func (r *Reference) Close() error {
	err := r.link.Close()
	if cerr := r.objs.Close(); err == nil {
		err = cerr
	}
	return err
}
