package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/replay"
)

func init() { subcommands = append(subcommands, newDiagnoseCmd) }

func newDiagnoseCmd() *cobra.Command {
	c := &cobra.Command{Use: "diagnose", Short: "Attribute each request's latency and name the bottleneck"}
	var record, timelines, proxyURL, truth, pprofOut, snapshot, head, evidence string
	var tokenBudget, maxNumSeqs int
	var stepPIDs []string
	var format outputFormat
	report := withHelp(&cobra.Command{
		Use:   "report --record run.json",
		Short: "Split TTFT into client, queueing, prefill, transfer and decode-queue time; name the bottleneck",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if record == "" {
				return badInput("--record: required (a hone replay record)")
			}
			if head != "auto" && head != "separate" && head != "with-first-token" {
				return badInput("--http-head: want auto, separate or with-first-token, got %q", head)
			}
			switch evidence {
			case diagnose.EvidenceAuto, diagnose.EvidenceEngine:
			case diagnose.EvidenceKernel:
				if snapshot == "" {
					return badInput("--evidence kernel: needs --daemon (a hone daemon snapshot covering the run)")
				}
			default:
				return badInput("--evidence: want auto, engine or kernel, got %q", evidence)
			}
			if maxNumSeqs < 0 {
				return badInput("--max-num-seqs: want >= 0 (0: the record's config, else unknown), got %d", maxNumSeqs)
			}
			if tokenBudget < 0 {
				return badInput("--max-num-batched-tokens: want >= 0 (0: the record's config, else unknown), got %d", tokenBudget)
			}
			if len(stepPIDs) > 0 && snapshot == "" {
				return badInput("--step-pid: needs --daemon (a hone daemon snapshot covering the run)")
			}
			override, err := parseStepPIDs(stepPIDs)
			if err != nil {
				return err
			}
			if err := format.check(); err != nil {
				return err
			}
			rec, err := replay.ReadRecord(record)
			if err != nil {
				return usageError{err}
			}
			var ev diagnose.Evidence
			switch {
			case timelines != "" && proxyURL != "":
				return badInput("--timelines and --proxy: give one")
			case timelines != "":
				if ev.Timelines, err = diagnose.ReadTimelines(timelines); err != nil {
					return usageError{err}
				}
			case proxyURL != "":
				if ev.Timelines, err = diagnose.FetchTimelines(c.Context(), proxyURL); err != nil {
					return err
				}
			}
			if snapshot != "" {
				if ev.KV, err = diagnose.ReadKVConns(snapshot); err != nil {
					return usageError{fmt.Errorf("--daemon: %w", err)}
				}
				k, err := diagnose.ReadKernelEvidence(snapshot)
				if err != nil {
					return usageError{fmt.Errorf("--daemon: %w", err)}
				}
				ev.Exchanges, ev.Steps, ev.Processes, ev.StepPIDs, ev.Daemon = k.Exchanges, k.Steps, k.Processes, override, true
				owners, err := diagnose.StepOwners(k.Exchanges, k.Steps, k.Processes, override)
				if err != nil {
					return badInput("%v", err)
				}
				for _, a := range slices.Sorted(maps.Keys(owners)) {
					if o := owners[a]; o.StepPID != a {
						fmt.Fprintf(c.ErrOrStderr(), "kernel evidence: %s\n", o)
					}
				}
			}
			// What the record says of itself (as hone replay judged it),
			// then what the flags add.
			own := diagnose.RecordEvidence(rec)
			ev.Source, ev.TokenBudget, ev.MaxNumSeqs, ev.Head = evidence, own.TokenBudget, own.MaxNumSeqs, own.Head
			if tokenBudget > 0 {
				ev.TokenBudget = tokenBudget
			}
			knobs := diagnose.RecordKnobs(rec)
			if maxNumSeqs > 0 {
				knobs.MaxNumSeqs, ev.MaxNumSeqs = maxNumSeqs, maxNumSeqs
			}
			switch head {
			case "with-first-token":
				ev.Head = diagnose.HeadWithFirstToken
			case "separate":
				ev.Head = diagnose.HeadSeparate
			}
			atts, err := diagnose.Attribute(rec, ev)
			if err != nil {
				return usageError{fmt.Errorf("record %s: %w", record, err)}
			}
			all := len(atts)
			var unjoined []diagnose.UnjoinedLevel
			if atts, unjoined = diagnose.Joined(atts, evidence == diagnose.EvidenceKernel); len(atts) == 0 {
				return usageError{fmt.Errorf("--evidence %s: none of the %d measured requests joined its kernel evidence "+
					"(the snapshot's exchanges, steps and, disaggregated, KV connections; was the daemon tracing the engines "+
					"with their API ports in --http-ports and libcuda probed, on this host, during the run?)", evidence, all)}
			}
			marked := diagnose.MarkClientBound(rec, atts)
			tpot := map[float64]float64{} // p99 TPOT of the valid levels: an invalid one decides nothing
			for _, run := range rec.Runs {
				for _, l := range run.Levels {
					if l.Verdict.Valid {
						tpot[l.OfferedQPS] = max(tpot[l.OfferedQPS], l.P99TPOTMs)
					}
				}
			}
			d := diagnose.SummarizeKnobs(rec.Kind, atts, rec.SLO, tpot, knobs)
			out := c.OutOrStdout()
			var errs []diagnose.PartError
			if truth != "" {
				f, err := os.Open(truth)
				if err != nil {
					return usageError{fmt.Errorf("--truth: %w", err)}
				}
				tr, err := diagnose.ReadTrace(f)
				f.Close()
				if err != nil {
					return usageError{fmt.Errorf("--truth %s: %w", truth, err)}
				}
				if errs, err = diagnose.Compare(atts, tr); err != nil {
					return usageError{err}
				}
			}
			switch format.value {
			case "json":
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(map[string]any{"diagnosis": d, "client_bound": marked, "invalid_levels": rec.InvalidLevels(),
					"truth_error": errs, "requests": atts, "unjoined": unjoined}); err != nil {
					return err
				}
			default:
				for _, m := range marked {
					fmt.Fprintln(out, "client/proxy residual check:", m)
				}
				for _, l := range unjoined {
					fmt.Fprintf(out, "kernel evidence: run %d, %g req/s: %d of %d measured requests not split, left out:", l.Run, l.OfferedQPS, l.Unjoined, l.Requests)
					for _, r := range l.ReasonsByCount() {
						fmt.Fprintf(out, " %d %s;", l.Reasons[r], r)
					}
					fmt.Fprintln(out)
				}
				if err := d.WriteTable(out, format.value == "md"); err != nil {
					return err
				}
				if len(errs) > 0 {
					fmt.Fprintln(out, "\nagainst the emulator's ground truth (model ms):")
					for _, e := range errs {
						fmt.Fprintf(out, "  %-13s truth %9.2f  attributed %9.2f  |err| median %7.2f  p90 %7.2f  (n=%d)\n",
							e.Part, e.MeanTruth, e.MeanAttrib, e.MedianErr, e.P90AbsErr, e.Requests)
					}
				}
				if len(ev.Timelines) == 0 {
					fmt.Fprintln(out, "note: no proxy timelines: disaggregated legs cannot be split (give --proxy or --timelines)")
				}
			}
			if pprofOut != "" {
				p, err := diagnose.Profile(atts)
				if err != nil {
					return err
				}
				f, err := os.Create(pprofOut)
				if err != nil {
					return err
				}
				if err := p.Write(f); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				fmt.Fprintln(c.ErrOrStderr(), "pprof profile written to", pprofOut, "(go tool pprof -top", pprofOut+")")
			}
			return nil
		},
	}, "diagnose-report", diagnoseHelp())
	f := report.Flags()
	f.StringVar(&record, "record", "", "replay record (hone replay -o)")
	f.StringVar(&timelines, "timelines", "", "proxy timelines file (GET /hone/timeline output)")
	f.StringVar(&proxyURL, "proxy", "", "fetch timelines from this running hone proxy")
	f.StringVar(&truth, "truth", "", "emulator --trace-file to compare against")
	format.register(f, "table", "format", "table", "md", "json")
	f.StringVar(&pprofOut, "pprof", "", "write a pprof profile of attributed time here")
	f.StringVar(&snapshot, "daemon", "", "hone daemon snapshot: join each request to its HTTP exchange and the engine's steps, and each disaggregated request to its KV pull, as the kernel saw them")
	f.StringVar(&evidence, "evidence", "auto", "what splits each request: auto (the engines' per-request metrics where they reported them, else the kernel split where the request has one, else client timing) | engine (never the kernel split; shown beside) | kernel (the kernel split alone; needs --daemon; requests without one are left out)")
	f.IntVar(&tokenBudget, "max-num-batched-tokens", 0, "the engines' token budget per step (vLLM's --max-num-batched-tokens): the kernel split infers each prefill's steps by the scheduler's rules; 0: the record's config (knobs.max_num_batched_tokens) when it states one, else inferred from the kernel evidence (the budget, of powers of two from 16 to 65536 or none, under which the scheduler's rules best fit the steps)")
	f.IntVar(&maxNumSeqs, "max-num-seqs", 0, "the engines' max-num-seqs (vLLM's --max-num-seqs), which the proposals follow and the kernel split's scheduler rules admit by; 0: the record's config (knobs.max_num_seqs) when it states one, else unknown to the proposals and inferred by the kernel split")
	f.StringArrayVar(&stepPIDs, "step-pid", nil, "API_PID=STEP_PID: split the exchanges of API server process API_PID by the CUDA steps of process STEP_PID (default: the nearest stepping process in the traced tree); repeatable")
	f.StringVar(&head, "http-head", "auto", "which send of a streamed response carries the first token: separate (vLLM: the head is sent first) | with-first-token (hone sim serve) | auto (by the record's kind)")
	c.AddCommand(report)
	return c
}

// parseStepPIDs parses --step-pid's API_PID=STEP_PID pairs.
func parseStepPIDs(pairs []string) (map[int]int, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[int]int{}
	for _, p := range pairs {
		a, s, ok := strings.Cut(p, "=")
		api, err1 := strconv.Atoi(strings.TrimSpace(a))
		step, err2 := strconv.Atoi(strings.TrimSpace(s))
		if !ok || err1 != nil || err2 != nil || api <= 0 || step <= 0 {
			return nil, badInput("--step-pid: want API_PID=STEP_PID with positive process ids, got %q", p)
		}
		if prev, dup := m[api]; dup && prev != step {
			return nil, badInput("--step-pid: API server pid %d given twice (%d and %d)", api, prev, step)
		}
		m[api] = step
	}
	return m, nil
}
