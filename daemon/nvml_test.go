//go:build cgo

package daemon

import (
	"encoding/binary"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// h200 is go-nvml's 8-GPU H200 mock with the sampling calls filled in:
// device i reports i*10 % utilization, i*100 W, and so on.
func h200(t *testing.T) nvml.Interface {
	srv := dgxh200.New()
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		i := uint32(i)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: i * 10, Memory: i * 5}, nvml.SUCCESS
		}
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return i * 100_000, nvml.SUCCESS }
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return uint64(i) * 2_000_000, nvml.SUCCESS }
		dev.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_SM {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return 1980, nvml.SUCCESS
		}
		dev.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
			if c == nvml.PCIE_UTIL_TX_BYTES {
				return 100, nvml.SUCCESS
			}
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		dev.GetFieldValuesFunc = func(v []nvml.FieldValue) nvml.Return {
			for j := range v {
				v[j].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				binary.LittleEndian.PutUint64(v[j].Value[:], uint64(7+j))
			}
			return nvml.SUCCESS
		}
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			if i != 0 {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return []nvml.ProcessUtilizationSample{{Pid: 4242, TimeStamp: 99, SmUtil: 75, MemUtil: 20}}, nvml.SUCCESS
		}
	}
	return srv
}

func TestNVMLSamplesH200(t *testing.T) {
	s := OpenNVML(func() nvml.Interface { return h200(t) })
	defer s.Close()
	if s.Status() != "ok" || !s.Available() {
		t.Fatalf("status %q", s.Status())
	}
	got := s.Sample()
	if len(got) != 8 {
		t.Fatalf("%d samples, want one per H200 (8)", len(got))
	}
	g := got[3]
	if g.Index != 3 || g.UUID == "" || *g.UtilizationRatio != 0.3 || *g.MemoryUtilRatio != 0.15 || *g.PowerWatts != 300 ||
		*g.EnergyJoules != 6000 || *g.SMClockHertz != 1.98e9 || *g.PCIeTXBytesPerSecond != 102400 {
		t.Errorf("sample 3 = %+v", g)
	}
	if g.PCIeRXBytesPerSecond != nil {
		t.Errorf("unsupported PCIe RX reported as %v", *g.PCIeRXBytesPerSecond)
	}
	if *g.NVLinkTXBytes != 7*1024 || *g.NVLinkRXBytes != 8*1024 {
		t.Errorf("NVLink tx %d rx %d, want 7 KiB and 8 KiB", *g.NVLinkTXBytes, *g.NVLinkRXBytes)
	}
	if *g.MemoryTotalBytes == 0 || *g.MemoryTotalBytes < 140<<30 {
		t.Errorf("H200 memory %d bytes", *g.MemoryTotalBytes)
	}
	if p := got[0].Processes; len(p) != 1 || p[0].PID != 4242 || p[0].SMUtilRatio != 0.75 {
		t.Errorf("process utilization = %+v", p)
	}
	r := s.Report()
	if len(r.Devices) != 8 || r.Devices[0].Name == "" || len(r.Samples) != 8 {
		t.Errorf("report: %d devices (%+v), %d samples", len(r.Devices), r.Devices[0], len(r.Samples))
	}
	s.Sample()
	if n := len(s.Report().Samples); n != 16 {
		t.Errorf("%d samples kept after two rounds, want 16", n)
	}
}

func TestNVMLUnavailable(t *testing.T) {
	for _, tc := range []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "unavailable (libnvidia-ml.so.1 not found: no NVIDIA driver)"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "unavailable (NVIDIA driver not loaded)"},
	} {
		s := OpenNVML(func() nvml.Interface {
			return &mock.Interface{InitFunc: func() nvml.Return { return tc.ret }}
		})
		if s.Status() != tc.want || s.Available() || s.Sample() != nil {
			t.Errorf("Init %v: status %q available %v", tc.ret, s.Status(), s.Available())
		}
	}
	// The real library on a host without a driver.
	if s := OpenNVML(nil); s.Available() {
		s.Close()
		t.Skip("this host has an NVIDIA driver")
	} else if s.Status() != "unavailable (libnvidia-ml.so.1 not found: no NVIDIA driver)" {
		t.Errorf("real NVML without a driver: %q", s.Status())
	}
}
