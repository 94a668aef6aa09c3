//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/bpf/bpftest"
)

// writeOutputs logs a file as written only when it was: a failed write is
// logged as an error and returned, with no success line.
func TestWriteOutputsLogsTruthfully(t *testing.T) {
	s := &Snapshot{SchemaVersion: SchemaVersion, Clock: "CLOCK_MONOTONIC", TakenWall: time.Unix(1, 0).UTC(),
		Threads: []Thread{{PID: 1, TID: 1, Comm: "x", Syscalls: map[string]*SyscallStats{"read": {Count: 2, TotalNS: 10}}}}}
	dir := t.TempDir()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))

	missing := filepath.Join(dir, "missing")
	err := writeOutputs(s, RunOptions{Once: true, Output: filepath.Join(missing, "s.json"), Profile: filepath.Join(missing, "p.pb.gz")}, log)
	if err == nil || !strings.Contains(err.Error(), "snapshot: ") || !strings.Contains(err.Error(), "profile: ") {
		t.Errorf("writes into a missing directory: error %v, want both named", err)
	}
	got := buf.String()
	for _, bad := range []string{"snapshot written", "profile written"} {
		if strings.Contains(got, bad) {
			t.Errorf("log says %q after a failed write:\n%s", bad, got)
		}
	}
	for _, want := range []string{`level=ERROR msg="snapshot not written"`, `level=ERROR msg="profile not written"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %s:\n%s", want, got)
		}
	}

	buf.Reset()
	out, prof := filepath.Join(dir, "s.json"), filepath.Join(dir, "p.pb.gz")
	if err := writeOutputs(s, RunOptions{Output: out, Profile: prof}, log); err != nil {
		t.Fatal(err)
	}
	got = buf.String()
	if !strings.Contains(got, `msg="snapshot written" path=`+out) || !strings.Contains(got, `msg="profile written" path=`+prof) ||
		strings.Contains(got, "level=ERROR") {
		t.Errorf("log after good writes:\n%s", got)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.MarshalIndent(s, "", "  ")
	if string(b) != string(want)+"\n" {
		t.Errorf("snapshot file\n%s\nwant MarshalIndent's output and a newline", b)
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p, err := profile.Parse(f); err != nil || len(p.Sample) != 1 {
		t.Errorf("profile: %v, %v", p, err)
	}
	for _, p := range []string{out, prof} {
		if st, err := os.Stat(p); err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != outputPerm {
			t.Errorf("%s: mode %v, want %v", p, st.Mode(), os.FileMode(outputPerm))
		}
	}
}

// Run refuses a non-loopback --listen before loading anything, and with
// AllowRemote serves there with a warning in the log.
func TestRunListenExposure(t *testing.T) {
	cfg := Config{Match: regexp.MustCompile("^no such process$"), NVMLPeriod: 0}
	err := Run(context.Background(), cfg, RunOptions{Listen: "0.0.0.0:0", Once: true, Duration: time.Millisecond}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "--listen 0.0.0.0:0") || !strings.Contains(err.Error(), "--allow-remote") {
		t.Fatalf("Run with --listen 0.0.0.0:0: %v", err)
	}
	// --allow-remote alone is not enough: a remote API needs a token.
	err = Run(context.Background(), cfg, RunOptions{Listen: "0.0.0.0:0", AllowRemote: true, Once: true, Duration: time.Millisecond}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Fatalf("--allow-remote without a token: %v", err)
	}
	bpftest.Require(t)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	err = Run(context.Background(), cfg, RunOptions{Listen: "0.0.0.0:0", AllowRemote: true, TokenFile: tok, Once: true, Duration: 100 * time.Millisecond,
		Output: filepath.Join(t.TempDir(), "s.json")}, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`level=WARN msg="serving on a non-loopback address \(--allow-remote\), bearer token required.*" addr=\S+:\d+`).MatchString(buf.String()) {
		t.Errorf("no warning for a remote listener:\n%s", buf.String())
	}
}

// --out and --profile may name a file that is not regular: a device such
// as /dev/null (a node of the same device here, made when root), or a FIFO
// whose reader is there. It is written as it is, both when the outputs
// are opened before the privilege drop and when they are written at the
// end: never truncated, chmodded or renamed over (which replaced the
// device with a regular file). Regular files keep their atomic write
// (TestWriteOutputsLogsTruthfully).
func TestOutputsToDevicesAndFIFOs(t *testing.T) {
	s := &Snapshot{SchemaVersion: SchemaVersion, Clock: "CLOCK_MONOTONIC", TakenWall: time.Unix(1, 0).UTC(),
		Threads: []Thread{{PID: 1, TID: 1, Comm: "x", Syscalls: map[string]*SyscallStats{"read": {Count: 2, TotalNS: 10}}}}}
	want, _ := json.MarshalIndent(s, "", "  ")
	for _, early := range []bool{false, true} {
		t.Run(map[bool]string{false: "written-at-end", true: "opened-before-drop"}[early], func(t *testing.T) {
			dir := t.TempDir()
			fifo, null := filepath.Join(dir, "fifo"), filepath.Join(dir, "null")
			if err := unix.Mkfifo(fifo, 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chmod(fifo, 0o644)
			// The reader opens first (without blocking), as a reader of
			// `hone daemon --out FIFO` must; it reads once the writer is done.
			r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			opts := RunOptions{Once: true, Output: fifo}
			device := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) == nil // /dev/null's numbers
			if device {
				os.Chmod(null, 0o666)
				opts.Profile = null
			} else {
				t.Log("no device node made (not root): --profile to a device not checked")
			}
			var files *outputFiles
			if early {
				if files, err = openOutputs(opts); err != nil {
					t.Fatalf("openOutputs: %v", err)
				}
			}
			err = writeOutputsTo(s, opts, files, slog.New(slog.NewTextHandler(io.Discard, nil)))
			files.close()
			if err != nil {
				t.Fatalf("write to a FIFO and a device: %v", err)
			}
			r.SetReadDeadline(time.Now().Add(10 * time.Second)) // the write is done: the data is in the pipe, or never comes
			got, err := io.ReadAll(r)
			if err != nil || string(got) != string(want)+"\n" {
				t.Errorf("the FIFO's reader got %q (%v), want the snapshot", got, err)
			}
			check := func(path string, typ os.FileMode, perm os.FileMode) {
				st, err := os.Lstat(path)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Type() != typ || st.Mode().Perm() != perm {
					t.Errorf("%s is now %v, want it untouched: type %v, mode %v", path, st.Mode(), typ, perm)
				}
			}
			check(fifo, os.ModeNamedPipe, 0o644)
			if device {
				check(null, os.ModeDevice|os.ModeCharDevice, 0o666)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 2 {
				t.Errorf("the directory holds %d entries, want the FIFO and the device only", len(ents))
			}
		})
	}
	// No reader: the open fails at once and says why, rather than block.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openOutputs(RunOptions{Output: fifo}); err == nil || !strings.Contains(err.Error(), "--out "+fifo) || !strings.Contains(err.Error(), "start the reader first") {
		t.Errorf("a FIFO without a reader: %v", err)
	}
}

// writeOutputs is writeOutputsTo with no file opened earlier.
func writeOutputs(s *Snapshot, opts RunOptions, log *slog.Logger) error {
	return writeOutputsTo(s, opts, nil, log)
}
