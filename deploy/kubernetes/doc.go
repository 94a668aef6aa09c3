// Package kubernetes renders a deployment spec as typed Kubernetes objects,
// applies them with server-side apply, waits for their pods, and deletes
// them by label; it also renders hone's daemon as a DaemonSet.
//
// The engines run exactly the argv and environment deploy.Render gives the
// local workers, with the substitutions a pod needs and nothing else (see
// Substitutions): each pool is one StatefulSet — stable pod names, so the
// proxy's static worker list stays valid across restarts — behind a
// headless Service, and hone's proxy is a Deployment with a Service, its
// configuration (deploy.ProxyConfig with pod DNS names) in a ConfigMap.
//
// It does not build images, create namespaces or secrets, or manage
// clusters; specs it cannot express in pods are refused, naming the field.
//
// RenderCommand, UpCommand and DownCommand (cli.go) carry out hone deploy
// render, up and down --target kubernetes.
package kubernetes
