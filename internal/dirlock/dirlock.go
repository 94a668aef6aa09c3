// Package dirlock keeps processes that write one directory from writing it
// at once: a flock(2) on the directory itself, which the kernel drops when
// the process dies, however it dies, so that no lock file outlives its
// holder.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrBusy is Lock's error when another process holds a lock on the
// directory that conflicts with the one asked for.
var ErrBusy = errors.New("in use by another process")

// Lock locks dir, exclusively or shared (any number of shared holders, or
// one exclusive), without waiting: ErrBusy when that conflicts with a lock
// another open of dir holds. Any other error (a file system without locks,
// say) is the caller's to judge: a warning, usually. unlock releases it.
func Lock(dir string, exclusive bool) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrBusy)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
