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
	probeUpDesc    = desc("probe_family_attached", "1 when the probe family is attached, 0 when the kernel could not attach it (/v1/snapshot probes[] says why and what is lost); families turned off (--no-sched) are absent.", "family")
)

func (bpfCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{bpfRunsDesc, bpfRunSecDesc, ringDropsDesc, mapFullDesc, eventsReadDesc, probeUpDesc} {
		ch <- d
	}
}

func (bc bpfCollector) Collect(ch chan<- prometheus.Metric) {
	s := bc.c.get()
	for _, p := range s.Probes {
		if p.Status != ProbeOff {
			up := 0.0
			if p.Status == ProbeAttached {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(probeUpDesc, prometheus.GaugeValue, up, p.Family)
		}
	}
	b := s.BPF
	for _, p := range b.Programs {
		ch <- prometheus.MustNewConstMetric(bpfRunsDesc, prometheus.CounterValue, float64(p.Runs), p.Name)
		ch <- prometheus.MustNewConstMetric(bpfRunSecDesc, prometheus.CounterValue, float64(p.RunTimeNS)/1e9, p.Name)
	}
	ch <- prometheus.MustNewConstMetric(ringDropsDesc, prometheus.CounterValue, float64(b.RingbufDrops))
	ch <- prometheus.MustNewConstMetric(mapFullDesc, prometheus.CounterValue, float64(b.MapFullDrops))
	ch <- prometheus.MustNewConstMetric(eventsReadDesc, prometheus.CounterValue, float64(b.EventsRead))
}
