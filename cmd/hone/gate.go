package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/gate"
)

func init() { subcommands = append(subcommands, newGateCmd) }

func readRuns(paths []string) ([]gate.Run, error) {
	if len(paths) == 0 {
		return nil, badInput("no run records given: pass one or more RECORD files")
	}
	var all []gate.Run
	for _, p := range paths {
		runs, err := gate.ReadRuns(p)
		if err != nil {
			return nil, usageError{err}
		}
		all = append(all, runs...)
	}
	return all, nil
}

func newGateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "gate",
		Short: "Block regressions in CI against stored baselines",
		Long: `hone gate keeps baselines of run records (raw per-run values for every
scenario × load level × metric) and checks candidates against them.

Exit codes: 0 pass, warn or improved; 1 a regression or a suspect
measurement; 2 bad input, an incomparable baseline (different environment
fingerprint, cache procedure or time scale; missing metrics) or unusable
data (no level valid on both sides).`,
	}
	c.AddCommand(newGateBaselineCmd(), newGateCheckCmd())
	return c
}

func newGateBaselineCmd() *cobra.Command {
	c := &cobra.Command{Use: "baseline", Short: "Create or update a baseline from run records"}
	var out, name string
	create := &cobra.Command{
		Use:   "create RECORD... --out baselines/NAME.json",
		Short: "Build a baseline from run records (hone replay, hone sim --output json, or capacity results)",
		Example: `  hone gate baseline create run1.json run2.json run3.json --out baselines/disagg.json
  hone gate baseline create cap1.json cap2.json cap3.json --out baselines/capacity.json   # hone replay --capacity --out capN.json`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if out == "" {
				return badInput("--out: required (where to write the baseline)")
			}
			runs, err := readRuns(args)
			if err != nil {
				return err
			}
			n := name
			if n == "" {
				n = strings.TrimSuffix(filepath.Base(out), filepath.Ext(out))
			}
			bl, err := gate.NewBaseline(n, runs, gate.DefaultCompared)
			if err != nil {
				return usageError{err}
			}
			if err := bl.Write(out); err != nil {
				return fmt.Errorf("write baseline %s: %w", out, err)
			}
			fmt.Fprintf(c.ErrOrStderr(), "baseline %q: %d runs, %d series (%s) → %s\n", bl.Name, bl.Runs, len(bl.Series), bl.Kind, out)
			return nil
		},
	}
	create.Flags().StringVar(&out, "out", "", "baseline file to write")
	create.Flags().StringVar(&name, "name", "", "baseline name (default: the file name)")

	var path string
	var keep int
	update := &cobra.Command{
		Use:     "update --baseline B RECORD...",
		Short:   "Add runs to a baseline, keeping the newest --keep runs",
		Example: `  hone gate baseline update --baseline baselines/disagg.json run4.json`,
		Args:    cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if path == "" {
				return badInput("--baseline: required")
			}
			if keep < 1 {
				return badInput("--keep: %d: want at least 1", keep)
			}
			bl, err := gate.ReadBaseline(path)
			if err != nil {
				return usageError{err}
			}
			runs, err := readRuns(args)
			if err != nil {
				return err
			}
			if err := bl.Update(runs, gate.DefaultCompared, keep); err != nil {
				return usageError{err}
			}
			if err := bl.Write(path); err != nil {
				return fmt.Errorf("write baseline %s: %w", path, err)
			}
			fmt.Fprintf(c.ErrOrStderr(), "baseline %q: now %d runs → %s\n", bl.Name, bl.Runs, path)
			return nil
		},
	}
	update.Flags().StringVar(&path, "baseline", "", "baseline file to update in place (atomically)")
	update.Flags().IntVar(&keep, "keep", 10, "runs to keep per series (the newest)")
	c.AddCommand(create, update)
	return c
}

func newGateCheckCmd() *cobra.Command {
	var (
		baseline, config string
		format           outputFormat
	)
	var candidates []string
	c := &cobra.Command{
		Use:   "check --baseline B --candidate RECORD...",
		Short: "Compare candidate run records against a baseline and give a verdict per metric",
		Long: fmt.Sprintf(`hone gate check gives each metric a verdict: pass, improved, warn, fail,
suspect or invalid. A metric other than a tail fails only when its change is
significant (one-sided, α 0.05, Holm-adjusted over all tested metrics;
Mann–Whitney U with >= 4 runs a side, else Welch's t on logs) AND larger
than max(its threshold, the noise floor from the baseline's own spread).
Defaults: throughput −5%% fails, −3%% warns; latency +10%% fails; cost +5%%
fails. Hard failures: an SLO violation at a level the baseline passed, more
failed requests, the highest passing level dropping. simulation_only
records compare exactly.

Tails (p99 TTFT, p99 TPOT): a level's p99 over a few dozen requests is
their maximum, so tails are computed on the measured requests pooled over
the runs valid at the level, when both sides carry per-request values
(replay records and baselines made from them do). Each side's p99 gets a
distribution-free %g%% confidence interval from its order statistics. A tail
fails only when the candidate's interval lies wholly above the baseline's
(candidate's lower bound > baseline's upper bound) AND its p99 is worse by
more than the fail threshold; apart and beyond the warn threshold, it warns;
overlapping, it passes. With fewer than %d pooled requests on a side (no
upper bound for p99) both figures are the pooled maximum, "max of n", which
fails only when worse by more than max(the fail threshold, %g%%) and never
warns. A schema-2 baseline (no per-request values) has its tails compared
per run; recreate it to pool them. The check's notes state the rule.

Capacities (the --out files of hone replay --capacity and hone predict
--capacity, one run each): %s. A capacity is never compared with a
level scan (the fingerprint's load differs).

Valid levels only: a replay record marks each level valid or invalid (warm
start, client-bound, incomplete, ...; see the record's verdict_rule). A
metric is compared on the runs whose level is valid in both the baseline and
the candidate; a level with no valid run on a side is reported "invalid"
with the reasons, never pass or fail. The objective is compared only on runs
whose every level is valid. When no level is valid on both sides the check
is unusable (exit 2).

Suspect: a compared metric whose figures are physically implausible is
"suspect", never pass: a p50 or p99 TPOT below %g ms model time (the floor
of a real decode step; a record's config tpot_floor_ms overrides), an
effective QPS or objective above the offered rate of its level by more than
%g%% (beyond the schedule's edge N/(N−1) for N measured requests), or an
objective more than %g× the baseline's or less than 1/%g of it — more likely a
measurement change (warm cache, time scale) than a deployment change.
Suspect fails CI like a regression (exit 1), under its own label.

Records made with another cold-start procedure (cache: reset_prefix_cache
or fresh_prefixes) or time scale are refused (exit 2) whatever the config
says, as are records of another kind (an unverified endpoint is never
compared with a device baseline).

A --config file (YAML or JSON) overrides alpha, thresholds per metric and the
fingerprint fields compared:

  alpha: 0.05
  metrics:
    p99_ttft_ms: {fail: 0.15, warn: 0.08}
  compare_fingerprint: [kind, engine, model, revision, precision, gpu_model, gpu_count, workload, slo, time_scale, cache]

Exit codes: 0 pass, warn or improved; 1 regression (fail) or suspect; 2 bad
input, incomparable, or unusable (no level valid on both sides).`, gate.TailConfidence, gate.TailMinRequests, 100*gate.LooseTailChange,
			gate.CapacityRule, gate.DefaultTPOTFloorMs, 100*gate.OfferedTolerance, gate.ObjectiveFactor, gate.ObjectiveFactor),
		Example: `  hone gate check --baseline baselines/disagg.json --candidate run.json -o md >> "$GITHUB_STEP_SUMMARY"
  hone gate check --baseline baselines/disagg.json --candidate a.json --candidate b.json -o github`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if baseline == "" {
				return badInput("--baseline: required")
			}
			candidates = append(candidates, args...)
			if len(candidates) == 0 {
				return badInput("--candidate: required (one or more run records)")
			}
			if err := format.check(); err != nil {
				return err
			}
			var cfg gate.Config
			if config != "" {
				var err error
				if cfg, err = gate.ReadConfig(config); err != nil {
					return usageError{err}
				}
			}
			bl, err := gate.ReadBaseline(baseline)
			if err != nil {
				return usageError{err}
			}
			runs, err := readRuns(candidates)
			if err != nil {
				return err
			}
			rep := gate.Check(bl, runs, cfg)
			if err := rep.Write(c.OutOrStdout(), format.value); err != nil {
				return err
			}
			switch {
			case rep.Verdict == gate.Suspect:
				return checkFailed{fmt.Sprintf("gate: suspect measurement against baseline %q: implausible figures (see the suspect rows); check the records' cache procedure and time scale", bl.Name)}
			case rep.Verdict == gate.Unusable:
				return usageError{fmt.Errorf("gate: no level is valid in both the candidate and baseline %q (unusable data): %s", bl.Name, strings.Join(rep.InvalidLevels, "; "))}
			case rep.ExitCode() == 1:
				return checkFailed{fmt.Sprintf("gate: regression against baseline %q", bl.Name)}
			case rep.ExitCode() == 2:
				return usageError{fmt.Errorf("gate: candidate is not comparable with baseline %q: %s", bl.Name, strings.Join(rep.Incomparable, "; "))}
			}
			return nil
		},
	}
	c.Flags().StringVar(&baseline, "baseline", "", "baseline file")
	c.Flags().StringSliceVar(&candidates, "candidate", nil, "candidate run record (repeatable)")
	c.Flags().StringVar(&config, "config", "", "gate config file (YAML or JSON)")
	format.register(c.Flags(), "table", "format", gate.Formats...)
	return c
}
