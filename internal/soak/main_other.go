//go:build !linux

package main

import (
	"fmt"
	"os"
	"runtime"
)

// The soak rig starts hone daemon (eBPF) and ties its children to it with
// Pdeathsig: Linux only.
func main() {
	fmt.Fprintf(os.Stderr, "hone-soak needs Linux (this build is for %s)\n", runtime.GOOS)
	os.Exit(2)
}
