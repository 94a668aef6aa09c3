//go:build !linux

package finesleep

import (
	"errors"
	"os"
	"time"
)

// newTimerfd reports no timerfd off Linux: Timer uses a Go timer.
func newTimerfd() (*os.File, int, bool) { return nil, 0, false }

func armTimerfd(int, time.Duration) error { return errors.New("no timerfd") }
