package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// RunOptions say how `hone daemon` runs around a Daemon.
type RunOptions struct {
	Listen   string        // HTTP address for /metrics and /v1 (""/"off": none)
	Once     bool          // measure for Duration, write the snapshot, exit
	Duration time.Duration // with Once
	Output   string        // snapshot JSON file ("" or "-": stdout with Once; none otherwise)
	Profile  string        // pprof file of traced time (syscalls view) written at the end
	DropCaps bool          // keep only KeptCapabilities after attaching
	Ready    func(*Daemon) // called once attached (tests)
}

// Run starts the daemon, serves its API until ctx ends (or for Duration
// with Once), then writes the final snapshot and profile where asked.
func Run(ctx context.Context, cfg Config, opts RunOptions, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	d, err := New(cfg, log)
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return fmt.Errorf("start: %w (the daemon needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN, and a kernel with BTF)", err)
	}
	defer d.Close()
	if opts.DropCaps && os.Geteuid() == 0 {
		caps, err := DropCapabilities()
		if err != nil {
			return err
		}
		d.mu.Lock()
		d.caps = caps
		d.mu.Unlock()
		log.Info("capabilities dropped", "kept", caps)
	} else {
		d.mu.Lock()
		d.caps = currentCapabilities()
		d.mu.Unlock()
	}
	log.Info("attached", "targets", len(d.Targets()), "nvml", d.nvml.Status())
	if opts.Ready != nil {
		opts.Ready(d)
	}
	var srv *http.Server
	if opts.Listen != "" && opts.Listen != "off" {
		ln, err := net.Listen("tcp", opts.Listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", opts.Listen, err)
		}
		srv = &http.Server{Handler: Handler(d.Snapshot), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		log.Info("serving", "addr", ln.Addr().String(), "paths", "/metrics /v1/snapshot /v1/connections /v1/threads /v1/profile")
		defer srv.Close()
	}
	if opts.Once {
		t := time.NewTimer(opts.Duration)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	} else {
		<-ctx.Done()
	}
	s := d.Snapshot()
	var errs []error
	if opts.Once || (opts.Output != "" && opts.Output != "-") {
		errs = append(errs, writeSnapshot(s, opts.Output))
		if opts.Output != "" && opts.Output != "-" {
			log.Info("snapshot written", "path", opts.Output)
		}
	}
	if opts.Profile != "" {
		errs = append(errs, writeProfile(s, opts.Profile))
		log.Info("profile written", "path", opts.Profile)
	}
	return errors.Join(errs...)
}

func writeSnapshot(s *Snapshot, path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "" || path == "-" {
		_, err := os.Stdout.Write(b)
		return err
	}
	return writeAtomic(path, b)
}

func writeProfile(s *Snapshot, path string) error {
	p, err := Profile(s, ViewSyscalls)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".hone-profile-*")
	if err != nil {
		return fmt.Errorf("write profile %s: %w", path, err)
	}
	if err := p.Write(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("write profile %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// writeAtomic writes through a temporary file in the same directory.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".hone-snapshot-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
