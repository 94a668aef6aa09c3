package bpftest

import "time"

func runtimeSleep() { time.Sleep(5 * time.Millisecond) }
