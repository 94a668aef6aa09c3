package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/jsonout"
	"github.com/hone-llm/hone/internal/usage"
)

// loadSpecArg loads the spec a command's argument names; an error is a
// usage.Error.
func loadSpecArg(path string) (*Spec, error) {
	s, err := LoadSpec(path)
	if err != nil {
		return nil, usage.Wrap(err)
	}
	return s, nil
}

// NameArg is the deployment a NAME or SPEC argument names: a .yaml or
// .yml path is a spec, whose name it is (an unreadable or invalid spec is a
// usage.Error); anything else is the name itself.
func NameArg(arg string) (string, error) {
	if !strings.HasSuffix(arg, ".yaml") && !strings.HasSuffix(arg, ".yml") {
		return arg, nil
	}
	s, err := loadSpecArg(arg)
	if err != nil {
		return "", err
	}
	return s.Name, nil
}

// RenderCmdOptions is what hone deploy render (--target local) takes: the
// flags, by name.
type RenderCmdOptions struct {
	Spec   string // SPEC: the deployment spec file
	Format string // -o: sh or json (checked by the caller)
	VLLM   string // --vllm: the vllm executable to name
	// VLLMVersion (--vllm-version) is the installed vLLM's version, "auto"
	// to run VLLM --version, or empty for unknown.
	VLLMVersion string
	Daemonset   bool // --daemonset: refused, it needs --target kubernetes
	// Out gets the script or the JSON, Log the notes on the side.
	Out, Log io.Writer
}

// RenderCommand is hone deploy render for local processes: it renders the
// spec (Render) and writes the plan as a shell script (Plan.Script) or as
// JSON with the proxy's configuration. Bad input is a usage.Error.
func RenderCommand(ctx context.Context, o RenderCmdOptions) error {
	if o.Daemonset {
		return usage.Errorf("--daemonset needs --target kubernetes")
	}
	s, err := loadSpecArg(o.Spec)
	if err != nil {
		return err
	}
	hone := "hone"
	if engine.Emulated(s.Engine) {
		if exe, err := os.Executable(); err == nil {
			hone = exe
		}
	}
	if o.VLLMVersion == "auto" {
		if !engine.FactsOf(s.Engine).Versioned {
			o.VLLMVersion = ""
		} else if o.VLLMVersion, err = engine.InstalledVersion(ctx, s.Engine, o.VLLM); err != nil {
			fmt.Fprintf(o.Log, "hone deploy render: %v; rendering for an unknown vLLM version\n", err)
		}
	}
	plan, err := Render(s, RenderOptions{VLLM: o.VLLM, Hone: hone, VLLMVersion: o.VLLMVersion})
	if err != nil {
		return usage.Wrap(err)
	}
	switch o.Format {
	case "sh":
		fmt.Fprint(o.Out, plan.Script([]string{hone, "proxy", "--spec", o.Spec}))
	case "json":
		return jsonout.Write(o.Out, map[string]any{"plan": plan, "proxy": ProxyConfig(plan)})
	}
	return nil
}

// UpCmdOptions is what hone deploy up (--target local) takes.
type UpCmdOptions struct {
	Spec string // SPEC: the deployment spec file
	// Up are --state-dir, --vllm, --health-timeout and --grace; Progress
	// is set by UpCommand.
	Up UpOptions
	// StateDirGiven says whether --state-dir was given: the stop command
	// printed then names it.
	StateDirGiven bool
	// Out gets where the deployment is and how to stop it, Log the
	// progress.
	Out, Log io.Writer
}

// UpCommand is hone deploy up for local processes: it starts the spec's
// workers and proxy (Up), showing the health checks' progress on o.Log
// (one line rewritten in place on a terminal), and prints the proxy's URL,
// the state file and the command that stops the deployment. SIGINT and
// SIGTERM stop the wait. Bad input is a usage.Error.
func UpCommand(ctx context.Context, o UpCmdOptions) error {
	s, err := loadSpecArg(o.Spec)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errw := o.Log
	tty := isTerminal(errw)
	o.Up.Progress = func(p Progress) {
		line := fmt.Sprintf("deploy %s: %d/%d healthy after %s", s.Name, p.Healthy, p.Total, p.Elapsed.Round(time.Second))
		if len(p.Waiting) > 0 {
			line += "; waiting for " + strings.Join(p.Waiting, ", ")
		}
		if tty {
			fmt.Fprintf(errw, "\r\033[K%s", line)
			if p.Done {
				fmt.Fprintln(errw)
			}
		} else {
			fmt.Fprintln(errw, line)
		}
	}
	d, err := Up(ctx, s, o.Up)
	if tty {
		fmt.Fprintln(errw)
	}
	if err != nil {
		if errors.Is(err, ErrAlreadyUp) || strings.Contains(err.Error(), "is not free") || errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "executable file not found") {
			return usage.Wrap(err)
		}
		return err
	}
	fmt.Fprintf(o.Out, "proxy %s\nstate %s\nstop with: %s\n", d.ProxyURL(), d.StatePath, downCommand(s.Name, o.Up.StateDir, o.StateDirGiven))
	return nil
}

// DownCmdOptions is what hone deploy down (--target local) takes.
type DownCmdOptions struct {
	// Args are the command's arguments: none (the one deployment under
	// StateDir) or NAME or SPEC (NameArg).
	Args     []string
	StateDir string        // --state-dir
	Grace    time.Duration // --grace: SIGTERM to SIGKILL
	// Out gets what was stopped.
	Out io.Writer
}

// DownCommand is hone deploy down for local processes: it stops the
// deployment o names (Down) and says so, naming the proxy's timelines file
// when one is left. No such deployment is a usage.Error.
func DownCommand(o DownCmdOptions) error {
	name, err := o.name()
	if err != nil {
		return err
	}
	path := StatePath(o.StateDir, name)
	st, _ := ReadState(path)
	if err := Down(path, o.Grace); err != nil {
		if errors.Is(err, ErrNotUp) {
			return usage.Wrap(err)
		}
		return err
	}
	fmt.Fprintf(o.Out, "deployment %s stopped\n", name)
	if st != nil && st.Timelines != "" {
		if _, err := os.Stat(st.Timelines); err == nil {
			fmt.Fprintf(o.Out, "proxy timelines %s\n", st.Timelines)
		}
	}
	return nil
}

// name is the deployment o names: o.Args', or without one the only
// deployment under o.StateDir.
func (o DownCmdOptions) name() (string, error) {
	if len(o.Args) > 0 {
		return NameArg(o.Args[0])
	}
	states, _ := List(o.StateDir)
	if len(states) != 1 {
		var names []string
		for _, s := range states {
			names = append(names, filepath.Base(filepath.Dir(s)))
		}
		if len(names) == 0 {
			return "", usage.Errorf("no deployment under %s", o.StateDir)
		}
		return "", usage.Errorf("several deployments under %s (%s): name one", o.StateDir, strings.Join(names, ", "))
	}
	return filepath.Base(filepath.Dir(states[0])), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) && os.Getenv("CI") == ""
}

// downCommand is the command that stops deployment name: it names the state
// directory when up was given one (down would not find the state otherwise).
func downCommand(name, stateDir string, explicit bool) string {
	down := "hone deploy down " + ShellQuote(name)
	if explicit {
		down += " --state-dir " + ShellQuote(stateDir)
	}
	return down
}
