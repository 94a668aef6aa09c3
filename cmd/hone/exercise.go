package main

import (
	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/exercise"
)

func init() { subcommands = append(subcommands, newExerciseCmd) }

func newExerciseCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "exercise",
		Short: "The brief's CPU exercise: the optimization policy behind exercise/submission.py",
	}
	c.AddCommand(&cobra.Command{
		Use:   "bridge",
		Short: "Speak the exercise bridge protocol (JSON lines) on stdin/stdout",
		Long: `hone exercise bridge is started by exercise/submission.py. It reads the
baseline config, asks for at most the budget's evaluations (baseline,
disaggregated, a prefix-cache ablation, a verification re-run), diagnoses each
result, and answers with the selected config. Protocol, one JSON object a line:

  python -> hone  {"type":"start","baseline":{...},"budget":4}
  hone -> python  {"type":"evaluate","call":1,"config":{...}}
  python -> hone  {"type":"result","call":1,"result":{...}}   or
                  {"type":"error","call":1,"error":"..."}
  hone -> python  {"type":"decision","call":K,"config":{...},"verified":true,
                   "diagnosis":[...],"selection_rule":"...","regression_rule":"..."}
               or {"type":"fatal","error":"..."}

The diagnosis and progress go to stderr. See exercise/README.md.

Exit codes: 0 a decision was sent; 2 a protocol error or an unusable baseline.`,
		Example: `  printf '{"type":"start","baseline":{"mode":"colocated","prefix_cache":true}}\n' | hone exercise bridge`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := exercise.ServeBridge(c.Context(), c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr()); err != nil {
				return usageError{err}
			}
			return nil
		},
	})
	return c
}
