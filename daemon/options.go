package daemon

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/hone-llm/hone/internal/guard"
)

// RunOptions say how `hone daemon` runs around a Daemon.
type RunOptions struct {
	Listen      string // HTTP address for /metrics and /v1 (""/"off": none)
	AllowRemote bool   // serve Listen even when it is not a loopback address
	// TokenFile holds the bearer token every API request must carry
	// (Authorization: Bearer <token>); required with a remote Listen.
	TokenFile string
	Once      bool          // measure for Duration, write the snapshot, exit
	Duration  time.Duration // with Once
	Output    string        // snapshot JSON file ("" or "-": stdout with Once; none otherwise)
	Profile   string        // pprof file of traced time (syscalls view) written at the end
	// API are the limits on the API's clients; zero fields take
	// APILimits' defaults.
	API guard.Limits
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

// MinTokenLength is the shortest bearer token accepted: 16 bytes of
// randomness as hex would be 32 characters; below 16 a token is guessable.
const MinTokenLength = 16

// ReadToken reads a bearer token file: one line, at least MinTokenLength
// characters, readable by its owner only (as ssh insists of keys: a token
// others can read authenticates nobody in particular).
func ReadToken(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("--token-file %s: mode %04o: readable by others; chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < MinTokenLength || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("--token-file %s: want one token of at least %d characters and no spaces", path, MinTokenLength)
	}
	return tok, nil
}

// RequireToken serves h only to requests that carry token as a bearer
// token; anything else gets 401 and nothing of the API. The scheme is
// matched without regard to case, as RFC 7235 (2.1) has it: "bearer" and
// "BEARER" are "Bearer".
func RequireToken(h http.Handler, token string) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		cred = strings.TrimLeft(cred, " ") // 1*SP between scheme and credentials
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(cred), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="hone daemon"`)
			http.Error(w, "a bearer token is required (Authorization: Bearer <the daemon's --token-file>)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// CheckListen refuses a --listen address that is not loopback unless
// allowRemote: the API has no authentication and serves the traced
// processes' command lines. It reports whether the address is remote.
// "off" and "" are fine. Host names other than "localhost" count as
// remote: what they resolve to can change.
func CheckListen(addr string, allowRemote bool, tokenFile string) (remote bool, err error) {
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
			"connect; bind 127.0.0.1 (or ::1) and tunnel, or pass --allow-remote with --token-file to require a bearer token", addr, where)
	}
	if remote && tokenFile == "" {
		return true, fmt.Errorf("--allow-remote: --listen %s is not loopback, so the API requires a bearer token: "+
			"pass --token-file FILE (one token of at least %d characters, mode 600)", addr, MinTokenLength)
	}
	return remote, nil
}
