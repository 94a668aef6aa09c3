//go:build !linux || !cgo

package main

import "errors"

func childSyscalls(i int) (other, file uint64) { return uint64(1+i%10) + 2, 1 }

func forkWave(n, first int) error {
	return errors.New("the churn parent forks through cgo on Linux: build hone-soak with CGO_ENABLED=1 on Linux")
}
