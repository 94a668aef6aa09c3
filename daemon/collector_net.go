package daemon

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// netCollector exports socket traffic of the traced processes.
type netCollector struct{ c *cachedSnapshot }

var (
	socketBytesDesc = desc("socket_bytes_total", "Bytes traced processes sent (tx) or received (rx) on inet sockets.", "direction", "kv_transfer")
	socketOpsDesc   = desc("socket_operations_total", "Send or receive operations of traced processes on inet sockets.", "direction", "kv_transfer")
	burstsDesc      = desc("kv_transfer_bursts_total", "Bursts seen on KV-transfer connections, closed and in progress.", "direction")
	burstSecDesc    = desc("kv_transfer_burst_seconds_total", "Time from first to last operation of bursts on KV-transfer connections.", "direction")
)

func (netCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- socketBytesDesc
	ch <- socketOpsDesc
	ch <- burstsDesc
	ch <- burstSecDesc
}

func (nc netCollector) Collect(ch chan<- prometheus.Metric) {
	s := nc.c.get()
	var bytes, ops [2][2]float64 // [kv][dir]
	var bursts, burstSec [2]float64
	f := s.ClosedConnections // closed connections no longer listed
	for kv := range 2 {
		bytes[kv][0], bytes[kv][1] = float64(f.TXBytes[kv]), float64(f.RXBytes[kv])
		ops[kv][0], ops[kv][1] = float64(f.TXOps[kv]), float64(f.RXOps[kv])
		bursts[kv] = float64(f.Bursts[kv])
		burstSec[kv] = float64(f.BurstNS[kv]) / 1e9
	}
	for _, c := range s.Connections {
		kv := 0
		if c.KVTransfer {
			kv = 1
		}
		bytes[kv][0] += float64(c.TXBytes)
		bytes[kv][1] += float64(c.RXBytes)
		ops[kv][0] += float64(c.TXOps)
		ops[kv][1] += float64(c.RXOps)
		for _, b := range c.Bursts {
			d := 0
			if b.Direction == "rx" {
				d = 1
			}
			bursts[d]++
			burstSec[d] += float64(b.EndMonotonicNS-b.StartMonotonicNS) / 1e9
		}
	}
	for kv := range 2 {
		for d, dir := range []string{"tx", "rx"} {
			ch <- prometheus.MustNewConstMetric(socketBytesDesc, prometheus.CounterValue, bytes[kv][d], dir, strconv.FormatBool(kv == 1))
			ch <- prometheus.MustNewConstMetric(socketOpsDesc, prometheus.CounterValue, ops[kv][d], dir, strconv.FormatBool(kv == 1))
		}
	}
	for d, dir := range []string{"tx", "rx"} {
		ch <- prometheus.MustNewConstMetric(burstsDesc, prometheus.CounterValue, bursts[d], dir)
		ch <- prometheus.MustNewConstMetric(burstSecDesc, prometheus.CounterValue, burstSec[d], dir)
	}
}
