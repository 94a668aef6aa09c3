//go:build !linux

package kubernetes

import "errors"

// daemonStartCapabilities: the daemon's capability sets are defined with
// its Linux code (daemon/caps.go).
func daemonStartCapabilities(string) ([]string, error) {
	return nil, errors.New("--daemonset: render the daemon on Linux, where its capability set is defined (daemon/caps.go)")
}
