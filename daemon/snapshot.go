package daemon

import (
	"net/netip"
	"strconv"

	"github.com/hone-llm/hone/internal/monoclock"
	"github.com/hone-llm/hone/schema"
)

// SchemaVersion is the version of the snapshot JSON layout.
const SchemaVersion = schema.SnapshotVersion

// The snapshot's types are package schema's (schema/snapshot.go), stated
// once for the daemon that writes them and diagnose that reads them.
type (
	Snapshot         = schema.Snapshot
	ProbeStatus      = schema.ProbeStatus
	Target           = schema.Target
	ExitedGroup      = schema.ExitedGroup
	TargetTable      = schema.TargetTable
	ConnectionTotals = schema.ConnectionTotals
	Thread           = schema.Thread
	SyscallStats     = schema.SyscallStats
	SchedStats       = schema.SchedStats
	CUDAStats        = schema.CUDAStats
	Connection       = schema.Connection
	Burst            = schema.Burst
	CUDAReport       = schema.CUDAReport
	Step             = schema.Step
	KeptTable        = schema.KeptTable
	Exchange         = schema.Exchange
	CUDALibrary      = schema.CUDALibrary
	BPFReport        = schema.BPFReport
	ProgramRun       = schema.ProgramRun
	SelfUsage        = schema.SelfUsage
	NVMLReport       = schema.NVMLReport
	GPUDevice        = schema.GPUDevice
	GPUSample        = schema.GPUSample
	GPUProcess       = schema.GPUProcess
)

// ProbeStatus.Status values.
const (
	ProbeAttached    = schema.ProbeAttached
	ProbeUnavailable = schema.ProbeUnavailable
	ProbeOff         = schema.ProbeOff
)

// monotonicNow reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns,
// directly: a snapshot taken after an event is never stamped before it.
func monotonicNow() uint64 {
	ns, _ := monoclock.Read() // 0 if unreadable
	return uint64(ns)
}

func trimHist(h []uint32) []uint32 {
	n := len(h)
	for n > 0 && h[n-1] == 0 {
		n--
	}
	return append([]uint32{}, h[:n]...)
}

func addrPort(family uint8, addr [16]uint8, port uint16) string {
	var a netip.Addr
	if family == 2 {
		a = netip.AddrFrom4([4]byte(addr[:4]))
	} else {
		a = netip.AddrFrom16(addr)
	}
	return netip.AddrPortFrom(a, port).String()
}

func dirName(d uint32) string {
	if d == 0 {
		return "tx"
	}
	return "rx"
}

func itoa(i int) string { return strconv.Itoa(i) }
