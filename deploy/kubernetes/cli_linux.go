package kubernetes

import (
	"strings"

	"github.com/hone-llm/hone/daemon"
)

// daemonStartCapabilities are what the DaemonSet adds: the daemon's start
// capabilities, without --bpf-stats, as the systemd unit has them, for GPU
// nodes running kernel release nodeKernel ("": Linux >= 6.6, with
// uprobe_multi links: CAP_BPF + CAP_PERFMON; before 6.6, CAP_SYS_ADMIN).
func daemonStartCapabilities(nodeKernel string) ([]string, error) {
	multi, err := NodeUprobeMulti(nodeKernel)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range daemon.StartCapabilities(multi, false) {
		out = append(out, strings.TrimPrefix(strings.ToUpper(c.String()), "CAP_"))
	}
	return out, nil
}
