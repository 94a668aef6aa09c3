//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/hone-llm/hone/internal/atomicfile"
)

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
	return writeOutputs(d.Snapshot(), opts, log)
}

// outputPerm is the mode of the snapshot and profile files, as it always
// was: the daemon runs as root and they hold other processes' command lines.
const outputPerm = 0o600

// writeOutputs writes the final snapshot and profile where opts ask, and
// logs each one written, or why it was not.
func writeOutputs(s *Snapshot, opts RunOptions, log *slog.Logger) error {
	toFile := opts.Output != "" && opts.Output != "-"
	var errs []error
	if opts.Once || toFile {
		where := opts.Output
		if !toFile {
			where = "stdout"
		}
		if err := writeSnapshot(s, opts.Output); err != nil {
			log.Error("snapshot not written", "path", where, "err", err)
			errs = append(errs, fmt.Errorf("snapshot: %w", err))
		} else if toFile {
			log.Info("snapshot written", "path", opts.Output)
		}
	}
	if opts.Profile != "" {
		if err := writeProfile(s, opts.Profile); err != nil {
			log.Error("profile not written", "path", opts.Profile, "err", err)
			errs = append(errs, fmt.Errorf("profile: %w", err))
		} else {
			log.Info("profile written", "path", opts.Profile)
		}
	}
	return errors.Join(errs...)
}

// writeSnapshot writes s as indented JSON to path, or to stdout for "" or "-".
func writeSnapshot(s *Snapshot, path string) error {
	encode := func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(s) // MarshalIndent's bytes and a newline, in one write
	}
	if path == "" || path == "-" {
		return encode(os.Stdout)
	}
	return atomicfile.WriteFunc(path, outputPerm, encode)
}

// writeProfile writes the pprof profile of s's traced time (syscalls view).
func writeProfile(s *Snapshot, path string) error {
	p, err := Profile(s, ViewSyscalls)
	if err != nil {
		return err
	}
	return atomicfile.WriteFunc(path, outputPerm, p.Write)
}
