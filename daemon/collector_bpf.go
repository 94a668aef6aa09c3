package daemon

import "github.com/prometheus/client_golang/prometheus"

// bpfCollector exports the daemon's own kernel-side cost and losses.
type bpfCollector struct{ c *cachedSnapshot }

var (
	bpfRunsDesc    = desc("bpf_program_runs_total", "Times each eBPF program ran (counted only while BPF statistics are enabled: --bpf-stats).", "program")
	bpfRunSecDesc  = desc("bpf_program_run_seconds_total", "Time each eBPF program ran (while BPF statistics are enabled).", "program")
	ringDropsDesc  = desc("bpf_ringbuf_dropped_events_total", "Events lost because the ring buffer was full.")
	mapFullDesc    = desc("bpf_map_full_updates_total", "Map updates that failed because a map was full.")
	eventsReadDesc = desc("bpf_events_read_total", "Ring-buffer events the daemon read.")
)

func (bpfCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{bpfRunsDesc, bpfRunSecDesc, ringDropsDesc, mapFullDesc, eventsReadDesc} {
		ch <- d
	}
}

func (bc bpfCollector) Collect(ch chan<- prometheus.Metric) {
	b := bc.c.get().BPF
	for _, p := range b.Programs {
		ch <- prometheus.MustNewConstMetric(bpfRunsDesc, prometheus.CounterValue, float64(p.Runs), p.Name)
		ch <- prometheus.MustNewConstMetric(bpfRunSecDesc, prometheus.CounterValue, float64(p.RunTimeNS)/1e9, p.Name)
	}
	ch <- prometheus.MustNewConstMetric(ringDropsDesc, prometheus.CounterValue, float64(b.RingbufDrops))
	ch <- prometheus.MustNewConstMetric(mapFullDesc, prometheus.CounterValue, float64(b.MapFullDrops))
	ch <- prometheus.MustNewConstMetric(eventsReadDesc, prometheus.CounterValue, float64(b.EventsRead))
}
