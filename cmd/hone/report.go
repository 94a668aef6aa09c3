package main

import (
	"bytes"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/report"
)

func init() { subcommands = append(subcommands, newReportCmd) }

func newReportCmd() *cobra.Command {
	var logPath, out, command, title string
	c := withHelp(&cobra.Command{
		Use:   "report --log DIR/log.json --out DIR/report.md",
		Short: "Render an optimization log as a Markdown report with plots",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if logPath == "" || out == "" {
				return badInput("--log and --out are required (the experiment log, and the Markdown file to write)")
			}
			lg, err := optimizer.ReadLog(logPath)
			if err != nil {
				return usageError{Err: err}
			}
			var buf bytes.Buffer
			if err := report.Write(&buf, lg, report.Options{Command: command, PlotDir: filepath.Dir(out), Title: title}); err != nil {
				return usageError{Err: err}
			}
			if err := atomicfile.Write(out, buf.Bytes()); err != nil {
				return err
			}
			fmt.Fprintln(c.ErrOrStderr(), "report written to", out)
			return nil
		},
	}, "report", nil)
	c.Flags().StringVar(&logPath, "log", "", "experiment log (hone optimize --out DIR writes DIR/log.json)")
	c.Flags().StringVar(&out, "out", "", "Markdown file to write; plots go beside it")
	c.Flags().StringVar(&command, "command", "", "the command that produced the log, quoted in the report")
	c.Flags().StringVar(&title, "title", "", "report title")
	return c
}
