package preflight

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
)

// Serving describes the serving stack found on the host.
type Serving struct {
	Python string `json:"python,omitempty"`
	VLLM   string `json:"vllm_version,omitempty"`
	Freeze string `json:"freeze_file,omitempty"`
	// VLLMFeatures says, per hone capability of the engine's vLLM
	// version table, whether the installed vLLM (vllm --version) has it.
	VLLMFeatures map[string]bool   `json:"vllm_features,omitempty"`
	ModelDir     string            `json:"model_dir,omitempty"`
	ModelFiles   map[string]string `json:"model_files_sha256,omitempty"`
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
			add(engine.VLLM, Pass, "vllm "+v+" importable with "+py, "")
		} else {
			add(engine.VLLM, Fail, fmt.Sprintf("vllm not importable with %s: %v", py, err),
				"python3.12 -m venv .venv && . .venv/bin/activate && pip install vllm; then pass --python .venv/bin/python")
		}
		cs = append(cs, vllmVersionChecks(ctx, o.vllm(), sv)...)
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
		files, err := deploy.HashModelDir(o.ModelDir)
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

// vllmVersionChecks reads the installed vLLM's version the way hone deploy
// does (engine.Adapter InstalledVersion: `vllm --version`) and reports,
// per hone capability of the engine's version table
// (engine/vllm_versions.go), whether that version has it: pass, or warn
// with what hone deploy will omit or refuse. When the executable cannot
// be run, the version the import check found stands in.
func vllmVersionChecks(ctx context.Context, vllm string, sv *Serving) []Check {
	var cs []Check
	add := func(name string, st Status, detail, fix string) {
		cs = append(cs, Check{Section: "serving", Name: name, Status: st, Detail: detail, Fix: fix})
	}
	e, _ := engine.Lookup(engine.VLLM)
	a := e.(engine.Adapter)
	raw, err := a.InstalledVersion(ctx, vllm)
	from := vllm + " --version"
	if err != nil && sv.VLLM != "" {
		raw, from = sv.VLLM, fmt.Sprintf("import vllm (%v)", err)
	}
	if err != nil && sv.VLLM == "" {
		add("vllm-version", Warn, fmt.Sprintf("%v: hone deploy renders for the newest vLLM, unchecked", err),
			"install vLLM and pass --python of its environment (its vllm executable is looked for beside it)")
		return cs
	}
	v, perr := a.ParseVersion(raw)
	if perr != nil {
		add("vllm-version", Warn, fmt.Sprintf("%v (from %s): hone deploy renders for the newest vLLM, unchecked", perr, from), "")
		return cs
	}
	add("vllm-version", Pass, fmt.Sprintf("vLLM %s (from %s)", v, from), "")
	sv.VLLMFeatures = map[string]bool{}
	for _, c := range a.Capabilities(v) {
		sv.VLLMFeatures[c.ID] = c.OK
		if c.OK {
			add("vllm-"+c.ID, Pass, c.Detail, "")
		} else {
			add("vllm-"+c.ID, Warn, c.Detail, "a newer vLLM: pip install -U vllm")
		}
	}
	return cs
}
