package preflight

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Host is what every run record carries about the machine it ran on.
type Host struct {
	Hostname    string `json:"hostname"`
	OS          string `json:"os"`
	Kernel      string `json:"kernel"`
	Arch        string `json:"arch"`
	CPUModel    string `json:"cpu_model"`
	CPUs        int    `json:"cpus"`
	MemoryBytes uint64 `json:"memory_bytes"`
	GoVersion   string `json:"go_version"`
	HoneVersion string `json:"hone_version"`
	HoneCommit  string `json:"hone_commit"`
}

// HostInfo reads the host's facts from /etc/os-release, uname and /proc.
func HostInfo(honeVersion, honeCommit string) Host {
	h := Host{Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		HoneVersion: honeVersion, HoneCommit: honeCommit}
	h.Hostname, _ = os.Hostname()
	h.OS = osRelease()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	h.CPUModel = procField("/proc/cpuinfo", "model name")
	if kb := procField("/proc/meminfo", "MemTotal"); kb != "" {
		n, _ := strconv.ParseUint(strings.Fields(kb)[0], 10, 64)
		h.MemoryBytes = n * 1024
	}
	return h
}

func osRelease() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}

// procField returns the value of the first "key: value" line with key.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func hostChecks(h Host) []Check {
	cs := []Check{{Section: "host", Name: "os", Status: Pass, Detail: fmt.Sprintf("%s (%s/%s)", h.OS, runtime.GOOS, h.Arch)}}
	if runtime.GOOS != "linux" {
		cs[0].Status, cs[0].Fix = Fail, "hone's daemon and emulator need Linux; use the Vagrantfile's VM"
	}
	k := Check{Section: "host", Name: "kernel", Status: Pass, Detail: h.Kernel}
	if maj, min := kernelVersion(h.Kernel); maj < 5 || (maj == 5 && min < 8) {
		k.Status, k.Fix = Warn, "the daemon needs Linux >= 5.8 (ring buffers, CAP_BPF); tp_btf socket tracepoints need >= 5.15"
	}
	cs = append(cs, k,
		Check{Section: "host", Name: "cpu", Status: Pass, Detail: fmt.Sprintf("%d × %s", h.CPUs, h.CPUModel)},
		Check{Section: "host", Name: "memory", Status: Pass, Detail: fmt.Sprintf("%.1f GiB", float64(h.MemoryBytes)/(1<<30))},
		Check{Section: "host", Name: "hone", Status: Pass, Detail: fmt.Sprintf("hone %s (commit %s), built with %s", h.HoneVersion, h.HoneCommit, h.GoVersion)})
	return cs
}

func kernelVersion(rel string) (int, int) {
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	maj, _ := strconv.Atoi(parts[0])
	min, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return maj, min
}
