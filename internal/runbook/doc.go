// Package runbook holds the test that keeps docs/device.md, the GPU-host
// runbook, runnable: TestDeviceRunbook extracts the document's fenced
// shell blocks and runs them, in order and verbatim, in one bash shell on
// a host without a GPU, with fakes for what that host lacks (vLLM, the
// Hugging Face CLI, sudo) from scripts/fake-vllm and scripts/fake-gpu-host.
// A block's fence may carry runbook=skip (not run; the document says
// why), runbook=root (run only with root and kernel BTF),
// runbook=no-gpu-exit-1 (a check that fails without a GPU: exit 0 or 1)
// or runbook=measures (a measurement, which may find that this shared
// host invalidated a level: exit 0, or 1 or 2 for that reason only).
//
// The package has no code of its own; it is not a test framework for
// other documents.
package runbook
