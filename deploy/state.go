package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hone-llm/hone/internal/atomicfile"
)

// StateSchemaVersion is the version of the state file's layout.
const StateSchemaVersion = 1

// State is what `deploy up` leaves behind so `deploy down` — in another
// process, after a crash — can stop everything it started.
type State struct {
	SchemaVersion int       `json:"schema_version"`
	Name          string    `json:"name"`
	Dir           string    `json:"dir"`
	ProxyURL      string    `json:"proxy_url"`
	StartedAt     time.Time `json:"started_at"`
	Spec          *Spec     `json:"spec"`
	// ModelFiles maps each file of a local model directory to its SHA-256.
	ModelFiles map[string]string `json:"model_files,omitempty"`
	Processes  []Process         `json:"processes"`
	// Timelines is where the proxy writes its per-request timelines (JSON
	// lines) when it stops.
	Timelines string `json:"timelines,omitempty"`
}

// Process is one started process, the leader of its own process group.
type Process struct {
	Name string `json:"name"` // worker name, or "proxy"
	Role string `json:"role"`
	PID  int    `json:"pid"`
	PGID int    `json:"pgid"`
	// StartTicks is the start time from /proc/PID/stat, so a recycled PID is
	// never mistaken for ours; 0 where /proc is absent.
	StartTicks uint64   `json:"start_ticks,omitempty"`
	URL        string   `json:"url"`
	Argv       []string `json:"argv"`
	Env        []string `json:"env,omitempty"`
	Log        string   `json:"log"`
}

// StatePath is where the state of deployment name lives under dir.
func StatePath(dir, name string) string { return filepath.Join(dir, name, "state.json") }

// DefaultStateDir is $HONE_STATE_DIR, else ~/.local/state/hone/deploy.
func DefaultStateDir() string {
	if d := os.Getenv("HONE_STATE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "hone", "deploy")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "hone-deploy")
	}
	return filepath.Join(home, ".local", "state", "hone", "deploy")
}

// ReadState reads a state file.
func ReadState(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read deployment state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("deployment state %s: %w", path, err)
	}
	if s.SchemaVersion != StateSchemaVersion {
		return nil, fmt.Errorf("deployment state %s: schema_version %d, want %d", path, s.SchemaVersion, StateSchemaVersion)
	}
	return &s, nil
}

// Alive returns the recorded processes whose process group still has a
// live member (the leader may be gone), leaving out any whose PID now
// names another process.
func (s *State) Alive() []Process {
	var live []Process
	for _, p := range s.Processes {
		if p.ours() && groupAlive(p.PGID) {
			live = append(live, p)
		}
	}
	return live
}

// GroupPIDs lists the live processes of the groups of procs; nil where
// /proc cannot be read.
func GroupPIDs(procs []Process) []int {
	var pids []int
	for _, p := range procs {
		m, _ := groupMembers(p.PGID)
		pids = append(pids, m...)
	}
	return pids
}

// Leftover is a deployment under a state directory that is still running.
type Leftover struct {
	StatePath string
	State     *State
	Live      []Process // its process groups with a live member
}

// Leftovers returns the deployments under dir whose state file records a
// process group that is still alive: left behind by a process that could
// not stop them (it was killed), unless something else is running them.
// A state file that cannot be read is reported in err, after the others.
func Leftovers(dir string) ([]Leftover, error) {
	paths, err := List(dir)
	if err != nil {
		return nil, err
	}
	var out []Leftover
	var errs []error
	for _, path := range paths {
		s, err := ReadState(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if live := s.Alive(); len(live) > 0 {
			out = append(out, Leftover{StatePath: path, State: s, Live: live})
		}
	}
	return out, errors.Join(errs...)
}

func (s *State) write(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write deployment state: %w", err)
	}
	return nil
}

// HashModelDir returns the SHA-256 of every regular file under dir, keyed by
// its slash-separated path relative to dir.
func HashModelDir(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == ".cache" {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := os.Stat(path) // follows links: hub caches link blobs
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[filepath.ToSlash(rel)] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hash model directory %s: %w", dir, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("hash model directory %s: no files", dir)
	}
	return out, nil
}
