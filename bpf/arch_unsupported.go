//go:build linux && !(386 || amd64 || arm64)

package bpf

// bpf/gen.go generates hone's eBPF objects for amd64 and arm64 only (the
// x86 bindings also serve 386 binaries, which run on x86-64 kernels). Say so
// at build time rather than with undefined bindings: add the architecture to
// gen.go's -target list (and its syscall table to syscalls.bpf.c).
var _ = eBPF_objects_are_generated_for_amd64_and_arm64_only__see_bpf_gen_go
