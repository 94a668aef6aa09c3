package daemon

import (
	"fmt"
	"net"
	"os/user"
	"strconv"
	"strings"
	"time"
)

// RunOptions say how `hone daemon` runs around a Daemon.
type RunOptions struct {
	Listen      string        // HTTP address for /metrics and /v1 (""/"off": none)
	AllowRemote bool          // serve Listen even when it is not a loopback address
	Once        bool          // measure for Duration, write the snapshot, exit
	Duration    time.Duration // with Once
	Output      string        // snapshot JSON file ("" or "-": stdout with Once; none otherwise)
	Profile     string        // pprof file of traced time (syscalls view) written at the end
	// DropCaps drops privileges after attaching: capabilities down to
	// KeptCapabilities, user and group to User, no_new_privs, seccomp.
	DropCaps bool
	User     string        // "" means "nobody"; see ParseUser
	Ready    func(*Daemon) // called once attached and privileges dropped (tests)
}

// DefaultUser is the account the daemon becomes after attaching, as root.
const DefaultUser = "nobody"

// ParseUser resolves a --user value: an account name, or UID[:GID]. "root"
// or "0" keeps uid 0 (capabilities are still dropped). A missing "nobody"
// account is taken as 65534:65534, its usual ids.
func ParseUser(s string) (uid, gid int, err error) {
	if s == "" {
		s = DefaultUser
	}
	if u, g, ok := strings.Cut(s, ":"); ok {
		uid, err1 := strconv.Atoi(u)
		gid, err2 := strconv.Atoi(g)
		if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
			return 0, 0, fmt.Errorf("want a user name or UID[:GID], got %q", s)
		}
		return uid, gid, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 {
			return 0, 0, fmt.Errorf("want a user name or UID[:GID], got %q", s)
		}
		if u, err := user.LookupId(s); err == nil {
			if g, err := strconv.Atoi(u.Gid); err == nil {
				return n, g, nil
			}
		}
		return n, n, nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		if s == DefaultUser {
			return 65534, 65534, nil
		}
		return 0, 0, fmt.Errorf("no user %q: %w", s, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("user %q has non-numeric ids %s:%s", s, u.Uid, u.Gid)
	}
	return uid, gid, nil
}

// CheckListen refuses a --listen address that is not loopback unless
// allowRemote: the API has no authentication and serves the traced
// processes' command lines. It reports whether the address is remote.
// "off" and "" are fine. Host names other than "localhost" count as
// remote: what they resolve to can change.
func CheckListen(addr string, allowRemote bool) (remote bool, err error) {
	if addr == "" || addr == "off" {
		return false, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--listen %s: %v", addr, err)
	}
	remote = true
	if host == "localhost" {
		remote = false
	} else if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil && ip.IsLoopback() {
		remote = false
	}
	if remote && !allowRemote {
		where := host
		if where == "" {
			where = "every interface"
		}
		return true, fmt.Errorf("--listen %s: refusing to serve on %s, not a loopback address: the API has no "+
			"authentication and shows the traced processes' command lines and measurements to anyone who can "+
			"connect; bind 127.0.0.1 (or ::1) and tunnel, or pass --allow-remote to accept the exposure", addr, where)
	}
	return remote, nil
}
