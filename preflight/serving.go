package preflight

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Serving describes the serving stack found on the host.
type Serving struct {
	Python     string            `json:"python,omitempty"`
	VLLM       string            `json:"vllm_version,omitempty"`
	Freeze     string            `json:"freeze_file,omitempty"`
	ModelDir   string            `json:"model_dir,omitempty"`
	ModelFiles map[string]string `json:"model_files_sha256,omitempty"`
}

func servingChecks(ctx context.Context, o Options) (*Serving, []Check) {
	sv := &Serving{}
	var cs []Check
	add := func(name string, st Status, detail, fix string) {
		cs = append(cs, Check{Section: "serving", Name: name, Status: st, Detail: detail, Fix: fix})
	}
	py := o.python()
	run := func(args ...string) (string, error) {
		c, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(c, py, args...).Output()
		return strings.TrimSpace(string(out)), err
	}
	if v, err := run("-c", "import sys; print(sys.version.split()[0])"); err == nil {
		sv.Python = v
	}
	if o.Target == TargetGPU {
		if v, err := run("-c", "import vllm; print(vllm.__version__)"); err == nil && v != "" {
			sv.VLLM = v
			add("vllm", Pass, "vllm "+v+" importable with "+py, "")
		} else {
			add("vllm", Fail, fmt.Sprintf("vllm not importable with %s: %v", py, err),
				"python3.12 -m venv .venv && . .venv/bin/activate && pip install vllm; then pass --python .venv/bin/python")
		}
	}
	if o.Freeze != "" {
		out, err := run("-m", "pip", "freeze")
		if err != nil {
			add("freeze", Fail, fmt.Sprintf("%s -m pip freeze: %v", py, err), "install pip for that interpreter")
		} else if err := os.WriteFile(o.Freeze, []byte(out+"\n"), 0o644); err != nil {
			add("freeze", Fail, err.Error(), "")
		} else {
			sv.Freeze = o.Freeze
			add("freeze", Pass, fmt.Sprintf("%d packages → %s", strings.Count(out, "\n")+1, o.Freeze), "")
		}
	}
	if o.ModelDir != "" {
		files, err := HashDir(o.ModelDir)
		if err != nil {
			add("model", Fail, err.Error(), "pass the model's local directory (with config.json and weights)")
		} else {
			sv.ModelDir, sv.ModelFiles = o.ModelDir, files
			add("model", Pass, fmt.Sprintf("%d files hashed (sha256) in %s", len(files), o.ModelDir), "")
		}
	}
	for _, p := range o.Ports {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			add(fmt.Sprintf("port-%d", p), Fail, fmt.Sprintf("127.0.0.1:%d is in use: %v", p, err), "stop what holds it or change the deployment spec's ports")
			continue
		}
		l.Close()
		add(fmt.Sprintf("port-%d", p), Pass, fmt.Sprintf("127.0.0.1:%d free", p), "")
	}
	return sv, cs
}

// HashDir returns the sha256 of every regular file under dir, by path
// relative to dir.
func HashDir(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hash model dir: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("hash model dir %s: no files", dir)
	}
	return out, nil
}

// sortedKeys is used by tests and the table.
func sortedKeys(m map[string]string) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
