// Package atomicfile writes files so that readers see either the old
// content or the new, never a part: a temporary file in the same directory,
// fsynced, renamed over the target, then the directory fsynced. Every record,
// baseline, log and report hone writes goes through it.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data (mode 0644). The directory must exist:
// callers decide whether a missing one is an error or something to create.
func Write(path string, data []byte) error {
	return WriteFunc(path, 0o644, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc replaces path with what fill writes, for content produced by a
// writer (an encoder, a profile) rather than held as bytes, with mode perm
// exactly (the umask does not apply). If fill fails, path is left untouched
// and no temporary file remains.
func WriteFunc(path string, perm os.FileMode, fill func(io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if err := fill(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: fsync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // best effort: some filesystems refuse a directory fsync
		d.Close()
	}
	return nil
}

// RemoveStale deletes the temporary files a killed writer left in dir
// (.NAME.tmp-*: Write and WriteFunc remove their own unless the process
// dies between creating and renaming one) and returns their names. Call
// it only where no other writer is at work in dir.
func RemoveStale(dir string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, m := range matches {
		if st, err := os.Lstat(m); err != nil || !st.Mode().IsRegular() {
			continue
		}
		if err := os.Remove(m); err != nil {
			return removed, err
		}
		removed = append(removed, filepath.Base(m))
	}
	return removed, nil
}

// CheckWritable reports, before any work is done, whether Write can later
// replace path: its directory exists and takes a new file (one is created
// and removed), and path is not a directory. A command that measures for
// minutes calls it first, so a missing or read-only destination is an
// error at the start, not a lost run at the end.
func CheckWritable(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory: want a file path", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("directory %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("cannot create a file in %s: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}
