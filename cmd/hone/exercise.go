package main

import (
	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/exercise"
)

func init() { subcommands = append(subcommands, newExerciseCmd) }

func newExerciseCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "exercise",
		Short: "The CPU exercise: the optimization policy behind exercise/submission.py",
	}
	c.AddCommand(withHelp(&cobra.Command{
		Use:   "bridge",
		Short: "Speak the exercise bridge protocol (JSON lines) on stdin/stdout",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := exercise.ServeBridge(c.Context(), c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr()); err != nil {
				return usageError{Err: err}
			}
			return nil
		},
	}, "exercise-bridge", nil))
	return c
}
