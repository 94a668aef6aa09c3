package daemon

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// gpuCollector exports the latest NVML sample of each GPU. Labels gpu and
// UUID match dcgm-exporter's, so the two join.
type gpuCollector struct{ c *cachedSnapshot }

var (
	nvmlUpDesc      = desc("nvml_up", "1 when NVML is sampling GPUs, 0 when it is unavailable (see hone_nvml_info).")
	nvmlInfoDesc    = desc("nvml_info", "NVML status and driver version.", "status", "driver_version")
	gpuUtilDesc     = desc("gpu_utilization_ratio", "Fraction of the last sample period a kernel was running.", "gpu", "UUID")
	gpuMemUtilDesc  = desc("gpu_memory_utilization_ratio", "Fraction of the last sample period device memory was read or written.", "gpu", "UUID")
	gpuMemUsedDesc  = desc("gpu_memory_used_bytes", "Device memory in use.", "gpu", "UUID")
	gpuMemTotalDesc = desc("gpu_memory_total_bytes", "Device memory.", "gpu", "UUID")
	gpuPowerDesc    = desc("gpu_power_watts", "Power draw.", "gpu", "UUID")
	gpuEnergyDesc   = desc("gpu_energy_joules_total", "Energy used since the driver loaded.", "gpu", "UUID")
	gpuSMClockDesc  = desc("gpu_sm_clock_hertz", "SM clock.", "gpu", "UUID")
	gpuPCIeDesc     = desc("gpu_pcie_throughput_bytes_per_second", "PCIe throughput over the last 20 ms.", "gpu", "UUID", "direction")
	gpuNVLinkDesc   = desc("gpu_nvlink_data_bytes_total", "NVLink data bytes, all links.", "gpu", "UUID", "direction")
)

func (gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nvmlUpDesc, nvmlInfoDesc, gpuUtilDesc, gpuMemUtilDesc, gpuMemUsedDesc, gpuMemTotalDesc, gpuPowerDesc, gpuEnergyDesc, gpuSMClockDesc, gpuPCIeDesc, gpuNVLinkDesc} {
		ch <- d
	}
}

func (gc gpuCollector) Collect(ch chan<- prometheus.Metric) {
	r := gc.c.get().NVML
	up := 0.0
	if r.Status == "ok" {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(nvmlUpDesc, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(nvmlInfoDesc, prometheus.GaugeValue, 1, r.Status, r.Driver)
	latest := map[int]GPUSample{}
	for _, s := range r.Samples {
		latest[s.Index] = s
	}
	for _, s := range latest {
		l := []string{strconv.Itoa(s.Index), s.UUID}
		gauge := func(d *prometheus.Desc, v *float64) {
			if v != nil {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, *v, l...)
			}
		}
		gauge(gpuUtilDesc, s.UtilizationRatio)
		gauge(gpuMemUtilDesc, s.MemoryUtilRatio)
		if s.MemoryUsedBytes != nil {
			ch <- prometheus.MustNewConstMetric(gpuMemUsedDesc, prometheus.GaugeValue, float64(*s.MemoryUsedBytes), l...)
			ch <- prometheus.MustNewConstMetric(gpuMemTotalDesc, prometheus.GaugeValue, float64(*s.MemoryTotalBytes), l...)
		}
		gauge(gpuPowerDesc, s.PowerWatts)
		if s.EnergyJoules != nil {
			ch <- prometheus.MustNewConstMetric(gpuEnergyDesc, prometheus.CounterValue, *s.EnergyJoules, l...)
		}
		gauge(gpuSMClockDesc, s.SMClockHertz)
		for dir, v := range map[string]*float64{"tx": s.PCIeTXBytesPerSecond, "rx": s.PCIeRXBytesPerSecond} {
			if v != nil {
				ch <- prometheus.MustNewConstMetric(gpuPCIeDesc, prometheus.GaugeValue, *v, append(l, dir)...)
			}
		}
		for dir, v := range map[string]*uint64{"tx": s.NVLinkTXBytes, "rx": s.NVLinkRXBytes} {
			if v != nil {
				ch <- prometheus.MustNewConstMetric(gpuNVLinkDesc, prometheus.CounterValue, float64(*v), append(l, dir)...)
			}
		}
	}
}
