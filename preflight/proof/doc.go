// Package proof is `hone preflight --target gpu --prove`: a proof, on a GPU
// host with nothing but the NVIDIA driver, that hone's daemon counts the
// CUDA driver calls of a process exactly.
//
// The workload (RunWorkload, run as `hone preflight proof-workload`, a
// hidden subcommand, by hone re-executing itself) dlopens libcuda.so.1
// (HONE_LIBCUDA overrides it), makes device 0's primary context current,
// JIT-loads an embedded PTX kernel (kernel.ptx), captures a one-kernel
// graph, asks cuGetProcAddress for the entry points the daemon probes, and
// waits. The prover (Prove) then attaches an in-process daemon to it and
// has it run its counted phases one at a time: kernel launches through the
// exported cuLaunchKernel and through the pointer cuGetProcAddress returned
// (the CUDA runtime's path), graph launches, async and synchronous copies,
// context, stream and event synchronizes, and a few seconds of busy
// kernels over every SM. After each phase it compares the calls the phase
// made, by kind, with the daemon's counts: exact, missed or extra; the
// calls the host waits in must also have one uretprobe return each. NVML
// is sampled over the busy phase: the GPU's energy counter must rise.
//
// Without a driver (libcuda.so.1 cannot be loaded, or cuInit finds no GPU)
// the verdict is "skipped", status "no NVIDIA driver", and nothing is
// claimed.
package proof
