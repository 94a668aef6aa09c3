package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hone-llm/hone/diagnose"
)

func init() { subcommands = append(subcommands, newDiagnoseCmd) }

func newDiagnoseCmd() *cobra.Command {
	c := &cobra.Command{Use: "diagnose", Short: "Attribute each request's latency and name the bottleneck"}
	var o diagnose.Options
	var format outputFormat
	report := withHelp(&cobra.Command{
		Use:   "report --record run.json",
		Short: "Split TTFT into client, queueing, prefill, transfer and decode-queue time; name the bottleneck",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.Format, o.Out, o.Log = format.value, c.OutOrStdout(), c.ErrOrStderr()
			return diagnose.Report(c.Context(), o)
		},
	}, "diagnose-report", diagnoseHelp())
	bindDiagnoseFlags(report.Flags(), &o, &format)
	c.AddCommand(report)
	return c
}

// bindDiagnoseFlags registers hone diagnose report's flags into o.
func bindDiagnoseFlags(f *pflag.FlagSet, o *diagnose.Options, format *outputFormat) {
	f.StringVar(&o.Record, "record", "", "replay record (hone replay -o)")
	f.StringVar(&o.Timelines, "timelines", "", "proxy timelines file (GET /hone/timeline output)")
	f.StringVar(&o.ProxyURL, "proxy", "", "fetch timelines from this running hone proxy")
	f.StringVar(&o.Truth, "truth", "", "emulator --trace-file to compare against")
	format.register(f, "table", "format", "table", "md", "json")
	f.StringVar(&o.Pprof, "pprof", "", "write a pprof profile of attributed time here")
	f.StringVar(&o.Daemon, "daemon", "", "hone daemon snapshot: join each request to its HTTP exchange and the engine's steps, and each disaggregated request to its KV pull, as the kernel saw them")
	f.StringVar(&o.Evidence, "evidence", "auto", "what splits each request: auto (the engines' per-request metrics where they reported them, else the kernel split where the request has one, else client timing) | engine (never the kernel split; shown beside) | kernel (the kernel split alone; needs --daemon; requests without one are left out)")
	f.IntVar(&o.TokenBudget, "max-num-batched-tokens", 0, "the engines' token budget per step (vLLM's --max-num-batched-tokens): the kernel split infers each prefill's steps by the scheduler's rules; 0: the record's config (knobs.max_num_batched_tokens) when it states one, else inferred from the kernel evidence (the budget, of powers of two from 16 to 65536 or none, under which the scheduler's rules best fit the steps)")
	f.IntVar(&o.MaxNumSeqs, "max-num-seqs", 0, "the engines' max-num-seqs (vLLM's --max-num-seqs), which the proposals follow and the kernel split's scheduler rules admit by; 0: the record's config (knobs.max_num_seqs) when it states one, else unknown to the proposals and inferred by the kernel split")
	f.StringArrayVar(&o.StepPIDs, "step-pid", nil, "API_PID=STEP_PID: split the exchanges of API server process API_PID by the CUDA steps of process STEP_PID (default: the nearest stepping process in the traced tree); repeatable")
	f.StringVar(&o.Head, "http-head", "auto", "which send of a streamed response carries the first token: separate (vLLM: the head is sent first) | with-first-token (hone sim serve) | auto (by the record's kind)")
}
