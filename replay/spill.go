package replay

import (
	"fmt"
	"os"
	"sync"
)

// spill is where a trace replay's requests put their packed chunks as they
// end (Options.SpillDir), so that what the replay holds per request is
// its summary (~0.9 kB: outcome, timings, hashes), not its chunks (~1.8
// kB at 256 output tokens). The file is unlinked as soon as it is made:
// its data lives as long as the process holds it open (the Record's
// chunks refer to it, and WriteRecord reads them back a request at a
// time), and no crash leaves it behind.
type spill struct {
	mu   sync.Mutex
	f    *os.File
	size int64
	err  error // the first write that failed
}

// newSpill makes an unlinked spill file in dir.
func newSpill(dir string) (*spill, error) {
	f, err := os.CreateTemp(dir, ".hone-spill-*")
	if err != nil {
		return nil, fmt.Errorf("spill file: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("spill file: %w", err)
	}
	return &spill{f: f}, nil
}

// Put appends data and returns where it went.
func (s *spill) Put(data []byte) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	off := s.size
	if _, err := s.f.WriteAt(data, off); err != nil {
		if s.err == nil {
			s.err = fmt.Errorf("spill file: %w", err)
		}
		return 0, s.err
	}
	s.size += int64(len(data))
	return off, nil
}

// failed is the first write that failed, or nil.
func (s *spill) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Get reads n bytes at off.
func (s *spill) Get(off int64, n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := s.f.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("spill file: %w", err)
	}
	return b, nil
}
