package procstat

import (
	"os"
	"testing"
)

func TestSplit(t *testing.T) {
	f := Split([]byte("42 (a (weird) name) S 1 42 42 0 -1 4194560 10 0 0 0 7 3 0 0 20 0 1 0 100 0 0\n"))
	if len(f) < 12 || f[0] != "S" || f[1] != "1" || f[11] != "7" {
		t.Errorf("fields %q", f)
	}
	if Split([]byte("garbage")) != nil {
		t.Error("a line without ')' split")
	}
}

func TestAliveAndFields(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	if !Alive(os.Getpid()) || Fields(os.Getpid())[1] == "" {
		t.Error("this process is not alive")
	}
	if Alive(1<<22+7) || Fields(1<<22+7) != nil {
		t.Error("a pid past pid_max is alive")
	}
}
