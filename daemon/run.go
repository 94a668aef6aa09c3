//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/internal/atomicfile"
)

// Run starts the daemon, serves its API until ctx ends (or for Duration
// with Once), then writes the final snapshot and profile where asked.
//
// With opts.DropCaps it drops privileges once everything is attached and
// before it serves anything (see dropPrivileges): the listening socket is
// bound, and the output files opened, before the drop, so that a low port
// or a directory only root may write to still work.
func Run(ctx context.Context, cfg Config, opts RunOptions, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	remote, err := CheckListen(opts.Listen, opts.AllowRemote, opts.TokenFile)
	if err != nil {
		return err
	}
	var token string
	if opts.TokenFile != "" { // read before privileges are dropped
		if token, err = ReadToken(opts.TokenFile); err != nil {
			return err
		}
	}
	uid, gid, err := ParseUser(opts.User)
	if err != nil {
		return fmt.Errorf("--user: %w", err)
	}
	d, err := New(cfg, log)
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return fmt.Errorf("start: %w (the daemon needs root, or CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN too for --bpf-stats, and alone on kernels before 6.6), and a kernel with BTF)", err)
	}
	defer d.Close()
	var ln net.Listener
	if opts.Listen != "" && opts.Listen != "off" {
		if ln, err = net.Listen("tcp", opts.Listen); err != nil {
			return fmt.Errorf("--listen %s: %w", opts.Listen, err)
		}
		defer ln.Close()
	}
	var files *outputFiles
	if opts.DropCaps && hasCapabilities() {
		if files, err = openOutputs(opts); err != nil {
			return err
		}
		defer files.close()
		keep := KeptCapabilities(d.objs.UprobeMulti())
		if os.Geteuid() != 0 {
			uid = -1
		}
		d.scanMu.Lock()
		caps, err := dropPrivileges(dropSpec{keep: keep, uid: uid, gid: gid, denyPerf: d.objs.UprobeMulti()})
		d.scanMu.Unlock()
		if err != nil {
			files.remove()
			return fmt.Errorf("drop privileges (pass --keep-capabilities to run without dropping them): %w", err)
		}
		d.caps.set(caps)
		log.Info("privileges dropped", "kept", capabilityNames(keep), "uid", os.Getuid(), "gid", os.Getgid(),
			"no_new_privs", true, "seccomp", seccompAuditArch != 0)
	} else {
		d.caps.set(currentCapabilities())
	}
	log.Info("attached", "targets", len(d.Targets()), "nvml", d.nvml.Status())
	if opts.Ready != nil {
		opts.Ready(d)
	}
	if ln != nil {
		h := Handler(d.Snapshot)
		if token != "" {
			h = RequireToken(h, token)
		}
		api, err := serveAPI(ln, h, opts.API)
		if err != nil {
			return err
		}
		defer api.Close()
		if remote {
			log.Warn("serving on a non-loopback address (--allow-remote), bearer token required: anyone who has the "+
				"token reads the traced processes' command lines (likely secrets redacted) and measurements",
				"addr", ln.Addr().String())
		}
		log.Info("serving", "addr", ln.Addr().String(), "paths", "/metrics /v1/snapshot /v1/connections /v1/threads /v1/profile",
			"max_connections", api.lim.MaxConnections)
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
	return writeOutputsTo(d.Snapshot(), opts, files, log)
}

// hasCapabilities says whether the process holds any capability to drop.
func hasCapabilities() bool {
	h := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&h, &data[0]); err != nil {
		return true
	}
	return data[0].Permitted != 0 || data[1].Permitted != 0
}

// outputFiles are the snapshot and profile files, opened before privileges
// are dropped: afterwards the daemon may no longer create files where it
// was asked to write (a directory of root's, or of the user who ran sudo).
type outputFiles struct {
	snapshot, profile *os.File
	created           []string
}

// openOutputs opens the --out and --profile files for writing at the end.
// An existing file keeps its content until then.
func openOutputs(opts RunOptions) (*outputFiles, error) {
	o := &outputFiles{}
	open := func(path, what string) (*os.File, error) {
		f, created, err := openOutput(path)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", what, path, err)
		}
		if created {
			o.created = append(o.created, path)
		}
		return f, nil
	}
	var err error
	if opts.Output != "" && opts.Output != "-" {
		if o.snapshot, err = open(opts.Output, "--out"); err != nil {
			o.close()
			o.remove()
			return nil, err
		}
	}
	if opts.Profile != "" {
		if o.profile, err = open(opts.Profile, "--profile"); err != nil {
			o.close()
			o.remove()
			return nil, err
		}
	}
	return o, nil
}

// openOutput opens path to write an output into: a regular file, created
// if absent, is given outputPerm; anything else that exists (a device
// such as /dev/null, a FIFO) is written as it is, its mode untouched. A
// symbolic link is refused (the daemon writes as root). A FIFO needs its
// reader already there: the open does not block.
func openOutput(path string) (f *os.File, created bool, err error) {
	_, statErr := os.Lstat(path)
	f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, outputPerm)
	if err != nil {
		if errors.Is(err, unix.ENXIO) {
			err = fmt.Errorf("%w (a FIFO without a reader: start the reader first)", err)
		}
		return nil, false, err
	}
	st, err := f.Stat()
	if err == nil && st.Mode().IsRegular() {
		err = f.Chmod(outputPerm)
	}
	if err != nil {
		f.Close()
		return nil, false, err
	}
	return f, statErr != nil, nil
}

func (o *outputFiles) close() {
	if o == nil {
		return
	}
	for _, f := range []*os.File{o.snapshot, o.profile} {
		if f != nil {
			f.Close()
		}
	}
}

// remove deletes the files openOutputs created (while it still may).
func (o *outputFiles) remove() {
	if o == nil {
		return
	}
	for _, p := range o.created {
		os.Remove(p)
	}
}

// rewrite replaces f's content with what fill writes, rendered in memory
// first so that a failing fill leaves the old content. A file that is not
// regular (a device, a FIFO) has no content to replace: it is written.
func rewrite(f *os.File, fill func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := fill(&buf); err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		_, err := f.Write(buf.Bytes())
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(buf.Bytes(), 0); err != nil {
		return err
	}
	return f.Sync()
}

// writeOutput writes what fill renders to f if open, else to path. A
// regular file (or a new one) is replaced atomically, through a temporary
// file renamed over it; an existing file that is not regular (/dev/null,
// a FIFO) is opened and written: a rename would replace the device.
func writeOutput(path string, f *os.File, fill func(io.Writer) error) error {
	if f != nil {
		return rewrite(f, fill)
	}
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() && st.Mode()&os.ModeSymlink == 0 {
		f, _, err := openOutput(path)
		if err == nil {
			err = errors.Join(rewrite(f, fill), f.Close())
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	}
	return atomicfile.WriteFunc(path, outputPerm, fill)
}

// outputPerm is the mode of the snapshot and profile files, as it always
// was: the daemon runs as root and they hold other processes' command lines.
const outputPerm = 0o600

// writeOutputsTo writes the final snapshot and profile where opts ask,
// into files opened earlier where given, and logs each one written, or why
// it was not.
func writeOutputsTo(s *Snapshot, opts RunOptions, files *outputFiles, log *slog.Logger) error {
	if files == nil {
		files = &outputFiles{}
	}
	toFile := opts.Output != "" && opts.Output != "-"
	var errs []error
	if opts.Once || toFile {
		where := opts.Output
		if !toFile {
			where = "stdout"
		}
		if err := writeSnapshot(s, opts.Output, files.snapshot); err != nil {
			log.Error("snapshot not written", "path", where, "err", err)
			errs = append(errs, fmt.Errorf("snapshot: %w", err))
		} else if toFile {
			log.Info("snapshot written", "path", opts.Output)
		}
	}
	if opts.Profile != "" {
		if err := writeProfile(s, opts.Profile, files.profile); err != nil {
			log.Error("profile not written", "path", opts.Profile, "err", err)
			errs = append(errs, fmt.Errorf("profile: %w", err))
		} else {
			log.Info("profile written", "path", opts.Profile)
		}
	}
	return errors.Join(errs...)
}

// writeSnapshot writes s as indented JSON to f if open, else to path (see
// writeOutput), or to stdout for "" or "-".
func writeSnapshot(s *Snapshot, path string, f *os.File) error {
	encode := func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(s) // MarshalIndent's bytes and a newline, in one write
	}
	if path == "" || path == "-" {
		return encode(os.Stdout)
	}
	return writeOutput(path, f, encode)
}

// writeProfile writes the pprof profile of s's traced time (syscalls view)
// to f if open, else to path.
func writeProfile(s *Snapshot, path string, f *os.File) error {
	p, err := Profile(s, ViewSyscalls)
	if err != nil {
		return err
	}
	return writeOutput(path, f, p.Write)
}
