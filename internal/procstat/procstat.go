// Package procstat reads /proc/PID/stat, the one place hone parses it: the
// command name (field 2) may hold spaces and parentheses, so fields are
// split after its last ')'.
package procstat

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Split returns the fields of a /proc/PID/stat line after the command name:
// index 0 is field 3 (state), index 1 the parent pid, index 11 utime.
// nil when b is not such a line.
func Split(b []byte) []string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// Fields reads /proc/PID/stat and splits it; nil when the process is gone.
func Fields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	return Split(b)
}

// Alive reports whether pid exists and has not exited (a zombie, state Z,
// or a dead task, X or x, has).
func Alive(pid int) bool {
	f := Fields(pid)
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "Z", "X", "x":
		return false
	}
	return true
}
