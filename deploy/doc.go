// Package deploy turns a deployment spec into running engines behind hone's
// proxy, and tears them down.
//
// A Spec (YAML, strictly decoded) names the engine (one registered in package
// engine: vllm or hone's emulator), the model, precision, the GPU budget and
// its split — colocated replicas of TP GPUs each, or disaggregated prefill
// and decode pools joined by a KV connector — the engine knobs and the
// proxy's routing. Render turns it into a Plan: the exact argv and
// environment of every worker, as the spec's engine spells them
// (engine.Engine's Render). Up starts the workers and the proxy
// (deploy/proxy), each in its own process group, waits for /health and writes
// a state file; Down stops every group from that file (SIGTERM, then SIGKILL
// after a grace period), also after the process that ran Up has crashed.
//
// deploy does not decide which config is better; the optimizer does.
// deploy/kubernetes renders the same plan as Kubernetes objects (one
// StatefulSet per pool, hone's proxy listing the pods by DNS name) and
// applies them with server-side apply (docs/kubernetes.md).
//
// RenderCommand, UpCommand and DownCommand (cli.go) carry out hone deploy
// render, up and down for local processes; deploy/kubernetes has the same
// for --target kubernetes.
package deploy
