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
	c := &cobra.Command{
		Use:   "report --log DIR/log.json --out DIR/report.md",
		Short: "Render an optimization log as a Markdown report with plots",
		Long: `hone report turns hone optimize's experiment log into a report: before and
after (objective, per-run values, GPU-seconds per request, hit rate), every
level's p99 TTFT/TPOT, every trial with why it ran and whether it was
eligible, the ablations, the topology × prefix-caching interaction, the
latency attribution of the baseline and the selection, the decisions, and how
to reproduce. Plots (PNG: objective per trial, p99 TTFT and TPOT and
effective QPS per level) are written beside the report; every plot shows each
run and the min-max over valid runs, marks the baseline and the selection,
and draws invalid runs hollow and grey, outside the medians; value axes fit
the data, with the SLO a labelled line on them or, far above the data, a
label at the top edge. Every figure and table carries the log's kind
(emulated, device, or unverified, which is never shown as a device number);
invalid levels are listed with their reasons, and "p99 of N requests is
their largest" is stated where N < 100.
A log the loop did not finish (hone optimize interrupted, or still running)
says so on the report's first line, and nothing in it reads as a selection.

A log measured by capacity (hone optimize --measure capacity, the default
with --backend live) leads with the answer: the goal (spec.objective) in
words, the selected config's capacity — the largest load meeting the SLO at
steady state — as the median and every run's value with the search's
precision, its GPUs and GPU-seconds per request at capacity and at the
target rate, beside the baseline's and the change. Its plots are capacity
vs GPUs with the Pareto front of measured and predicted configs
(pareto.png), capacity per trial (capacity.png), and the baseline's and the
selection's probes against the SLO (capacity_probes_tpot.png,
capacity_probes_ttft.png); every run's probes are tabled with the limit
that bound. Ablations state their effect on capacity, and on latency at the
reference load where it lies below both capacities.

Exit codes: 0 success; 2 bad input.`,
		Example: `  hone report --log results/demo/log.json --out results/demo/report.md`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if logPath == "" || out == "" {
				return badInput("--log and --out are required (the experiment log, and the Markdown file to write)")
			}
			lg, err := optimizer.ReadLog(logPath)
			if err != nil {
				return usageError{err}
			}
			var buf bytes.Buffer
			if err := report.Write(&buf, lg, report.Options{Command: command, PlotDir: filepath.Dir(out), Title: title}); err != nil {
				return usageError{err}
			}
			if err := atomicfile.Write(out, buf.Bytes()); err != nil {
				return err
			}
			fmt.Fprintln(c.ErrOrStderr(), "report written to", out)
			return nil
		},
	}
	c.Flags().StringVar(&logPath, "log", "", "experiment log (hone optimize --out DIR writes DIR/log.json)")
	c.Flags().StringVar(&out, "out", "", "Markdown file to write; plots go beside it")
	c.Flags().StringVar(&command, "command", "", "the command that produced the log, quoted in the report")
	c.Flags().StringVar(&title, "title", "", "report title")
	return c
}
