package main

import (
	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/report"
)

func init() { subcommands = append(subcommands, newReportCmd) }

func newReportCmd() *cobra.Command {
	var o report.CommandOptions
	c := withHelp(&cobra.Command{
		Use:   "report --log DIR/log.json --out DIR/report.md",
		Short: "Render an optimization log as a Markdown report with plots",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.Note = c.ErrOrStderr()
			return report.Command(o)
		},
	}, "report", nil)
	c.Flags().StringVar(&o.Log, "log", "", "experiment log (hone optimize --out DIR writes DIR/log.json)")
	c.Flags().StringVar(&o.Out, "out", "", "Markdown file to write; plots go beside it")
	c.Flags().StringVar(&o.Command, "command", "", "the command that produced the log, quoted in the report")
	c.Flags().StringVar(&o.Title, "title", "", "report title")
	return c
}
