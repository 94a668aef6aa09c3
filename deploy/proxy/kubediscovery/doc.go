// Package kubediscovery finds a hone proxy's workers in Kubernetes: the
// ready endpoints of each pool's Service, read from discovery.k8s.io/v1
// EndpointSlices (label kubernetes.io/service-name) with a client-go
// informer, and handed to the proxy as a whole worker set after each
// change settles. It keeps client-go out of package proxy, which only
// offers Proxy.SetWorkers.
//
// It is not a general service-discovery layer: one namespace, a fixed
// port per pool, plain HTTP.
package kubediscovery
