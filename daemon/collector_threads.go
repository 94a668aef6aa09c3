package daemon

import "github.com/prometheus/client_golang/prometheus"

// exitedRows presents the exited groups as threads (TID 0).
func exitedRows(s *Snapshot) []Thread {
	out := make([]Thread, 0, len(s.Exited))
	for i := range s.Exited {
		out = append(out, groupThread(&s.Exited[i]))
	}
	return out
}

// threadCollector exports syscall, scheduling and CUDA figures of the
// traced threads, summed per process name.
type threadCollector struct{ c *cachedSnapshot }

var (
	targetsDesc    = desc("targets", "Traced processes alive now.")
	syscallsDesc   = desc("syscalls_total", "Syscalls made by traced threads, by class.", "process", "class")
	syscallSecDesc = desc("syscall_seconds_total", "Time traced threads spent in their timed syscalls (one call in hone daemon --syscall-sample, 16 by default), by class; their total is about this / syscalls_timed_total * syscalls_total.", "process", "class")
	syscallTimDesc = desc("syscalls_timed_total", "Of hone_syscalls_total, the calls timed (syscall_seconds_total's): one in hone daemon --syscall-sample.", "process", "class")
	onCPUDesc      = desc("sched_on_cpu_seconds_total", "Time traced threads ran on a CPU.", "process")
	offCPUDesc     = desc("sched_off_cpu_seconds_total", "Time traced threads were switched out (run-queue wait included).", "process")
	runQueueDesc   = desc("sched_run_queue_seconds_total", "Time traced threads waited runnable for a CPU.", "process")
	cudaCallsDesc  = desc("cuda_calls_total", "CUDA driver calls by traced threads, by call kind.", "process", "call")
	cudaWaitDesc   = desc("cuda_synchronize_wait_seconds_total", "Time traced threads waited in CUDA synchronize calls.", "process", "call")
	tableDesc      = desc("target_table_entries", "Processes in the daemon's target table: live ones and those exited in the last seconds.")
	tableMaxDesc   = desc("target_table_max_entries", "Capacity of the daemon's target table.")
	overflowDesc   = desc("target_table_overflows_total", "Traced processes left out of the full target table (their measurements still count).")
	exitedDesc     = desc("exited_processes_total", "Exited traced processes whose measurements were folded into per-root totals.")
)

func (threadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{targetsDesc, syscallsDesc, syscallSecDesc, syscallTimDesc, onCPUDesc, offCPUDesc, runQueueDesc, cudaCallsDesc, cudaWaitDesc,
		tableDesc, tableMaxDesc, overflowDesc, exitedDesc} {
		ch <- d
	}
}

func (tc threadCollector) Collect(ch chan<- prometheus.Metric) {
	s := tc.c.get()
	alive := 0
	for _, t := range s.Targets {
		if t.ExitMonotonicNS == 0 {
			alive++
		}
	}
	ch <- prometheus.MustNewConstMetric(targetsDesc, prometheus.GaugeValue, float64(alive))
	ch <- prometheus.MustNewConstMetric(tableDesc, prometheus.GaugeValue, float64(s.TargetTable.Entries))
	ch <- prometheus.MustNewConstMetric(tableMaxDesc, prometheus.GaugeValue, float64(s.TargetTable.MaxEntries))
	ch <- prometheus.MustNewConstMetric(overflowDesc, prometheus.CounterValue, float64(s.TargetTable.Overflow))
	ch <- prometheus.MustNewConstMetric(exitedDesc, prometheus.CounterValue, float64(s.TargetTable.ExitedProcesses))
	names := processNames(s)
	type pc struct{ proc, class string }
	calls, timed, callNS := map[pc]float64{}, map[pc]float64{}, map[pc]float64{}
	cuda, cudaWait := map[pc]float64{}, map[pc]float64{}
	on, off, rq := map[string]float64{}, map[string]float64{}, map[string]float64{}
	// Exited processes count under the name they had while alive, so
	// that the counters never go down when they are folded.
	rows := s.Threads
	if len(s.Exited) > 0 {
		rows = append(append(make([]Thread, 0, len(s.Threads)+len(s.Exited)), s.Threads...), exitedRows(s)...)
	}
	for i, th := range rows {
		p := nameOf(names, th.PID, th.Comm)
		if i >= len(s.Threads) {
			p = th.Comm
		}
		for class, st := range th.Syscalls {
			calls[pc{p, class}] += float64(st.Count)
			timed[pc{p, class}] += float64(st.Timed)
			callNS[pc{p, class}] += float64(st.TotalNS)
		}
		if th.Sched != nil {
			on[p] += float64(th.Sched.OnCPUNS)
			off[p] += float64(th.Sched.OffCPUNS)
			rq[p] += float64(th.Sched.RunQueueNS)
		}
		for call, st := range th.CUDA {
			cuda[pc{p, call}] += float64(st.Count)
			if st.WaitCount > 0 {
				cudaWait[pc{p, call}] += float64(st.WaitSumNS)
			}
		}
	}
	for k, v := range calls {
		ch <- prometheus.MustNewConstMetric(syscallsDesc, prometheus.CounterValue, v, k.proc, k.class)
		ch <- prometheus.MustNewConstMetric(syscallTimDesc, prometheus.CounterValue, timed[k], k.proc, k.class)
		ch <- prometheus.MustNewConstMetric(syscallSecDesc, prometheus.CounterValue, callNS[k]/1e9, k.proc, k.class)
	}
	for p := range on {
		ch <- prometheus.MustNewConstMetric(onCPUDesc, prometheus.CounterValue, on[p]/1e9, p)
		ch <- prometheus.MustNewConstMetric(offCPUDesc, prometheus.CounterValue, off[p]/1e9, p)
		ch <- prometheus.MustNewConstMetric(runQueueDesc, prometheus.CounterValue, rq[p]/1e9, p)
	}
	for k, v := range cuda {
		ch <- prometheus.MustNewConstMetric(cudaCallsDesc, prometheus.CounterValue, v, k.proc, k.class)
	}
	for k, v := range cudaWait {
		ch <- prometheus.MustNewConstMetric(cudaWaitDesc, prometheus.CounterValue, v/1e9, k.proc, k.class)
	}
}
