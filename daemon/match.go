//go:build linux

package daemon

// matchProcess says whether process pid is one the daemon traces by its
// command line: --match-cmdline, by default DefaultMatch (the serving
// engines' API server, engine core and worker processes). It is the
// daemon's one engine-specific process match: at scan (every process) and
// at exec (a process that is not a target yet).
func (d *Daemon) matchProcess(pid int) bool {
	if d.cfg.Match == nil {
		return false
	}
	cl := procCmdline(pid)
	return cl != "" && d.cfg.Match.MatchString(cl)
}
