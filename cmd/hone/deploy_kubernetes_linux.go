package main

import (
	"strings"

	"github.com/hone-llm/hone/daemon"
)

// daemonStartCapabilities are what the DaemonSet adds: the daemon's start
// capabilities on kernels with uprobe_multi links (Linux >= 6.6), without
// --bpf-stats, as the systemd unit has them.
func daemonStartCapabilities() ([]string, error) {
	var out []string
	for _, c := range daemon.StartCapabilities(true, false) {
		out = append(out, strings.TrimPrefix(strings.ToUpper(c.String()), "CAP_"))
	}
	return out, nil
}
