// Command hone finds the cheapest LLM-serving configuration that still meets
// latency SLOs for coding-agent workloads, and keeps it from regressing.
//
// This package only wires cobra commands to hone's packages; logic lives in
// the packages, where tests can reach it.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/internal/usage"
)

// Exit codes shared by every command (documented in --help).
const (
	exitOK       = 0
	exitFailed   = 1 // the check failed: regression, SLO violation
	exitBadInput = 2 // bad input, unusable data, incomparable baseline
	// exitInterrupted: a long command (hone optimize) stopped by SIGINT or
	// SIGTERM before it finished; 128+2, the shell's code for an interrupt.
	// Apart from 1, so that a script that accepts "the check failed" (make
	// demo's `|| test $? -eq 1`) does not accept an interrupted run.
	exitInterrupted = 130
)

// usageError marks an error caused by the user's input: exit code 2. It is
// usage.Error, so that a package carrying out a command marks bad input
// the same way.
type usageError = usage.Error

// badInput wraps err (or a formatted message) as a usage error.
func badInput(format string, args ...any) error {
	return usageError{Err: fmt.Errorf(format, args...)}
}

// checkFailed marks a completed check whose verdict is negative: exit code 1.
type checkFailed = usage.Failed

// interrupted marks a command stopped by SIGINT or SIGTERM (its context
// cancelled) before it finished: exit code 130.
type interrupted = usage.Interrupted

func main() {
	root := newRootCmd()
	err := root.Execute()
	os.Exit(exitCode(err))
}

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(os.Stderr, errorLine(err))
	var ue usageError
	var cf checkFailed
	var in interrupted
	switch {
	case errors.As(err, &in):
		return exitInterrupted
	case errors.As(err, &cf):
		return exitFailed
	case errors.As(err, &ue):
		return exitBadInput
	default:
		return exitFailed
	}
}

// errorLine is the line hone prints for err: one "hone: ", then the
// message. A message that already starts with "hone: " (a package may
// name the program) does not get a second one; usage errors name the
// subcommand at fault without the root (see commandName).
func errorLine(err error) string {
	msg := err.Error()
	for strings.HasPrefix(msg, "hone: ") {
		msg = strings.TrimPrefix(msg, "hone: ")
	}
	return "hone: " + msg
}

// commandName names c in an error message: its path below the root
// ("gate check"), empty for the root itself, which errorLine's prefix
// already names.
func commandName(c *cobra.Command) string {
	return strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), c.Root().Name()), " ")
}

// usageAt marks err, a usage mistake made on command c, as bad input,
// naming c and pointing at its help.
func usageAt(c *cobra.Command, err error) error {
	if name := commandName(c); name != "" {
		err = fmt.Errorf("%s: %w", name, err)
	}
	return usageError{Err: fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "hone",
		Short: "Find the cheapest LLM-serving config that meets latency SLOs, and keep it there",
		Long: `hone replays a coding-agent workload against a serving deployment, attributes
each request's latency, picks the next configuration to try, and gates CI on
stored baselines.

Every number hone prints is labelled with where it came from:
  simulation_only  the CPU exercise's exact queueing model (hone sim)
  emulated         hone's vLLM-compatible engine emulator (hone sim serve)
  device           real vLLM on GPUs

Exit codes: 0 success; 1 the check failed (regression, SLO violation);
2 bad input, unusable data, or an incomparable baseline.`,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// --version prints what `hone version` prints.
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	// Flag parse errors are bad input: exit 2 with the flag named.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageAt(c, err)
	})
	for _, add := range subcommands {
		root.AddCommand(add())
	}
	strictUsage(root)
	return root
}

// strictUsage makes every usage mistake exit 2, as the exit codes promise:
// an argument count a command does not accept (cobra's Args validators
// return plain errors, which would exit 1), and an unknown or missing
// subcommand of a command group (cobra prints help and exits 0 for `hone gate
// chek`, and exits 1 for `hone simm`).
func strictUsage(c *cobra.Command) {
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usageAt(cmd, err)
			}
			return nil
		}
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, a []string) error {
			if len(a) == 0 {
				cmd.SetOut(cmd.ErrOrStderr())
				_ = cmd.Help()
				return usageAt(cmd, errors.New("a subcommand is required"))
			}
			msg := fmt.Sprintf("unknown command %q for %q", a[0], cmd.CommandPath())
			if cmd.SuggestionsMinimumDistance <= 0 {
				cmd.SuggestionsMinimumDistance = 2
			}
			if s := cmd.SuggestionsFor(a[0]); len(s) > 0 {
				msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
			}
			return usageError{Err: fmt.Errorf("%s; see '%s --help'", msg, cmd.CommandPath())}
		}
	}
	for _, sub := range c.Commands() {
		strictUsage(sub)
	}
}

// subcommands is filled by each command file's init, so files for separate
// nouns do not have to touch one shared list.
var subcommands []func() *cobra.Command
