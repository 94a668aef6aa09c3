package preflight

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/preflight/proof"
)

// CommandOptions is what hone preflight takes once the command has
// checked the flags that need cobra.
type CommandOptions struct {
	Target   Target // --target, parsed
	Out      string // --out: the JSON report (or with Prove the verdict) to write
	ModelDir string // --model-dir
	Freeze   string // --freeze
	Python   string // --python
	Ports    []int  // --port
	// Prove (--prove) runs the GPU proof instead of the checks, keeping
	// the GPU busy for ProveBusy (--prove-busy). OtherChecks says a flag
	// of the checks (--model-dir, --freeze, --port, --python) was given,
	// which the proof does not run.
	Prove       bool
	ProveBusy   time.Duration
	OtherChecks bool
	// HoneVersion and HoneCommit are the binary's, for the report.
	HoneVersion, HoneCommit string
	// Stdout gets the report or verdict, Log where the file went.
	Stdout, Log io.Writer
}

// Command is hone preflight: it runs the target's checks (Run), or with
// o.Prove the GPU proof (proof.Prove), prints the result and writes it to
// o.Out. Bad input is a usage.Error; a failed check or proof is a
// usage.Failed.
func Command(ctx context.Context, o CommandOptions) error {
	if o.Prove {
		return o.prove(ctx)
	}
	for _, p := range o.Ports {
		if p < 1 || p > 65535 {
			return usage.Errorf("--port: %d: want 1-65535", p)
		}
	}
	r := Run(ctx, Options{Target: o.Target, HoneVersion: o.HoneVersion, HoneCommit: o.HoneCommit,
		ModelDir: o.ModelDir, Freeze: o.Freeze, Ports: o.Ports, Python: o.Python})
	if err := r.WriteTable(o.Stdout); err != nil {
		return err
	}
	if o.Out != "" {
		if err := r.WriteJSON(o.Out); err != nil {
			return fmt.Errorf("write report %s: %w", o.Out, err)
		}
		fmt.Fprintln(o.Log, "report written to", o.Out)
	}
	if !r.Passed {
		return usage.Failed{Msg: "preflight failed: " + strings.Join(r.Failed(), ", ")}
	}
	return nil
}

// prove is `hone preflight --target gpu --prove`.
func (o CommandOptions) prove(ctx context.Context) error {
	if o.Target != TargetGPU {
		return usage.Errorf("--prove: only with --target gpu (got --target %s)", o.Target)
	}
	if o.OtherChecks {
		return usage.Errorf("--prove runs the GPU proof alone: run --python, --freeze, --model-dir and --port without it")
	}
	if o.ProveBusy < time.Second || o.ProveBusy > time.Minute {
		return usage.Errorf("--prove-busy: want 1s to 60s, got %v", o.ProveBusy)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := proof.Prove(ctx, proof.Options{Busy: o.ProveBusy})
	if err := r.WriteText(o.Stdout); err != nil {
		return err
	}
	if o.Out != "" {
		if err := r.WriteJSON(o.Out); err != nil {
			return fmt.Errorf("write verdict %s: %w", o.Out, err)
		}
		fmt.Fprintln(o.Log, "verdict written to", o.Out)
	}
	if r.ExitCode() != 0 {
		return usage.Failed{Msg: fmt.Sprintf("GPU proof failed: %s", r.Status)}
	}
	return nil
}
