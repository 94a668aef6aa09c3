//go:build !linux || !cgo

package emulator

import "errors"

// openCUDAProbe needs dlopen, so Linux and cgo.
func openCUDAProbe(path string) (cudaProbe, error) {
	return nil, errors.New("--cuda-lib needs Linux and cgo (this hone was built without them): " + path)
}
