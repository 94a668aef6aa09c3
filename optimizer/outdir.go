package optimizer

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/internal/dirlock"
	"github.com/hone-llm/hone/internal/usage"
)

// lockOutDir takes an exclusive lock on the --out directory for this run,
// so that no other hone optimize writes there, or stops this run's
// deployments as an earlier run's leftovers. The kernel drops the lock when
// this process dies, however it dies. Where the file system has no locks,
// it warns and goes on.
func lockOutDir(out string, errw io.Writer) (unlock func(), err error) {
	unlock, err = dirlock.Lock(out, true)
	var open *fs.PathError // --out could not be opened at all
	switch {
	case errors.Is(err, dirlock.ErrBusy):
		return nil, usage.Errorf("--out %s is in use by another hone optimize: wait for it to end, or give another --out", out)
	case errors.As(err, &open):
		return nil, err
	case err != nil:
		fmt.Fprintf(errw, "optimize: warning: cannot lock --out %s (%v): nothing keeps another hone optimize out of it\n", out, err)
		return func() {}, nil
	}
	return unlock, nil
}

// The files and directories of a run in --out, in the order they are kept.
var runFiles = []string{"log.json", "records", "traces", "state"}

// claimOutDir makes --out this run's: it refuses a directory that holds an
// earlier run's log unless force, stops the deployments an earlier run left
// running under state/, then moves whatever that run left (its log,
// records, traces and state) aside as NAME.<time>.bak, so that nothing of
// it is reused or overwritten.
func claimOutDir(out string, force bool, errw io.Writer) error {
	logPath := filepath.Join(out, "log.json")
	stateDir := filepath.Join(out, "state")
	if _, err := os.Stat(logPath); err == nil && !force {
		what := logPath
		if lg, err := ReadLog(logPath); err == nil {
			what = fmt.Sprintf("%s: %d trials, started %s", logPath, len(lg.Trials), lg.Started.Format(time.RFC3339))
		}
		msg := fmt.Sprintf("--out %s already holds an earlier run's log (%s): give a new --out directory, or --force to start over there (keeping the earlier run's log as log.json.<time>.bak, and its records, traces and state likewise)", out, what)
		if left, _ := deploy.Leftovers(stateDir); len(left) > 0 {
			var names []string
			for _, l := range left {
				names = append(names, fmt.Sprintf("%s (pids %s)", l.State.Name, joinInts(deploy.GroupPIDs(l.Live))))
			}
			msg += fmt.Sprintf("; that run left deployments running under %s: %s, which hone optimize --force stops, as does hone deploy down NAME --state-dir %s",
				stateDir, strings.Join(names, ", "), stateDir)
		}
		return usage.Errorf("%s", msg)
	}
	if err := stopLeftovers(stateDir, errw); err != nil {
		return err
	}
	// Temporary files a killed run left mid-write (this run holds the lock).
	for _, d := range []string{out, filepath.Join(out, "records")} {
		removed, err := atomicfile.RemoveStale(d)
		if err != nil {
			return fmt.Errorf("optimize: stale temporary files in %s: %w", d, err)
		}
		if len(removed) > 0 {
			fmt.Fprintf(errw, "optimize: removed %d temporary file(s) a killed run left in %s: %s\n", len(removed), d, strings.Join(removed, ", "))
		}
	}
	return keepEarlierRun(out, errw)
}

// stopLeftovers stops every deployment under stateDir that is still
// running — left by an earlier run that was killed — and reports each on
// errw. An error (exit 1) names the processes that could not be stopped.
func stopLeftovers(stateDir string, errw io.Writer) error {
	left, err := deploy.Leftovers(stateDir)
	if err != nil {
		fmt.Fprintf(errw, "optimize: warning: %v\n", err)
	}
	var stuck []string
	for _, l := range left {
		var names []string
		for _, p := range l.Live {
			names = append(names, p.Name)
		}
		fmt.Fprintf(errw, "optimize: deployment %s was left running by an earlier run (%s: pids %s): stopping it\n",
			l.State.Name, strings.Join(names, ", "), joinInts(deploy.GroupPIDs(l.Live)))
		if err := deploy.Down(l.StatePath, 5*time.Second); err != nil {
			pids := "unknown"
			if st, rerr := deploy.ReadState(l.StatePath); rerr == nil {
				pids = joinInts(deploy.GroupPIDs(st.Alive()))
			}
			stuck = append(stuck, fmt.Sprintf("%s (pids %s: %v)", l.State.Name, pids, err))
			continue
		}
		fmt.Fprintf(errw, "optimize: stopped deployment %s\n", l.State.Name)
	}
	if len(stuck) > 0 {
		return fmt.Errorf("optimize: deployments an earlier run left under %s could not be stopped: %s; stop them before using this --out",
			stateDir, strings.Join(stuck, "; "))
	}
	return nil
}

// keepEarlierRun moves an earlier run's files in out (runFiles; empty
// directories do not count) aside as NAME.<time>.bak, all with one time,
// and says so on errw.
func keepEarlierRun(out string, errw io.Writer) error {
	var found []string
	for _, name := range runFiles {
		path := filepath.Join(out, name)
		fi, err := os.Stat(path)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			if ents, err := os.ReadDir(path); err == nil && len(ents) == 0 {
				continue
			}
		}
		found = append(found, name)
	}
	if len(found) == 0 {
		return nil
	}
	base := time.Now().UTC().Format("20060102T150405Z")
	stamp := base
	for i := 2; ; i++ {
		free := true
		for _, name := range found {
			if _, err := os.Lstat(filepath.Join(out, name+"."+stamp+".bak")); err == nil {
				free = false
			}
		}
		if free {
			break
		}
		stamp = fmt.Sprintf("%s-%d", base, i)
	}
	var kept []string
	for _, name := range found {
		to := name + "." + stamp + ".bak"
		if err := os.Rename(filepath.Join(out, name), filepath.Join(out, to)); err != nil {
			return fmt.Errorf("optimize: keep the earlier run's %s: %w", name, err)
		}
		kept = append(kept, name+" as "+to)
	}
	fmt.Fprintf(errw, "optimize: --out %s held an earlier run; kept its %s\n", out, strings.Join(kept, ", "))
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, " ")
}
