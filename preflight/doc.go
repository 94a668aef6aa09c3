// Package preflight answers "can this host run hone, and what is it?"
// before any experiment: host facts, the eBPF features the daemon uses
// (probed for real by loading and attaching trivial programs), the GPUs
// through NVML, the serving stack (vLLM, Python, ports, model files) and
// the CPU exercise's self-test.
//
// Every check is pass, warn, fail or skip, with the reason and the fix. It
// only reads and probes: it never changes GPU settings or kernel knobs.
// Run records embed the Host section so every result carries the
// environment it was measured on.
//
// Command carries out hone preflight: the checks, or with --prove the GPU
// proof of package proof, printed and written to a file.
package preflight
