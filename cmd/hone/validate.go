package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/sim/emulator"
)

func init() { subcommands = append(subcommands, newValidateCmd) }

func newValidateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "validate",
		Short: "Judge hone's predictions against measurements of real vLLM that hone did not make",
		Long: `hone validate compares what hone predicts with public measurements of real
vLLM on real GPUs (docs/validation.md has the scoreboard and the sources).`,
	}
	c.AddCommand(newValidateSiliconCmd())
	return c
}

func newValidateSiliconCmd() *cobra.Command {
	var (
		profiles string
		perConn  int
		ratio    float64
		kvDtype  string
		output   outputFormat
	)
	c := withHelp(&cobra.Command{
		Use:   "silicon FILE.csv",
		Short: "Predict every measured deployment of a silicon file and report TTFT and TPOT errors",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return badInput("hone validate silicon: want one FILE.csv argument, got %d", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if err := output.check(); err != nil {
				return err
			}
			if perConn < 1 {
				return badInput("--requests-per-client: want at least 1, got %d", perConn)
			}
			if !(ratio >= 0 && ratio <= 1) {
				return badInput("--length-ratio: want a fraction in (0, 1], or 0 for fixed lengths, got %v", ratio)
			}
			if _, ok := emulator.KVCacheDTypes[kvDtype]; !ok {
				return badInput("--kv-cache-dtype %q: want auto, bfloat16, float16, fp8, fp8_e4m3 or fp8_e5m2", kvDtype)
			}
			rows, err := calibrate.ReadSilicon(args[0])
			if err != nil {
				return badInput("%v", err)
			}
			profs, err := validationProfiles(profiles)
			if err != nil {
				return err
			}
			res := calibrate.PredictSilicon(rows, calibrate.SiliconConfig{Profiles: profs, RequestsPerClient: perConn, LengthRatio: ratio, KVCacheDType: kvDtype})
			if output.value == "json" {
				return writeJSON(c.OutOrStdout(), res)
			}
			writeSiliconTable(c.OutOrStdout(), res)
			return nil
		},
	}, "validate-silicon", nil)
	f := c.Flags()
	f.StringVar(&profiles, "profiles", "", "a folder of profile .yaml files to choose from besides the built-ins")
	f.IntVar(&perConn, "requests-per-client", 10, "measured requests per client of each closed loop (vllm bench serve's num-prompts / max-concurrency)")
	f.StringVar(&kvDtype, "kv-cache-dtype", "", "predict every row with this KV cache dtype (vLLM's --kv-cache-dtype: fp8 halves its bytes); default: the model's")
	f.Float64Var(&ratio, "length-ratio", 0, "draw each request's ISL and OSL from [ratio × L, L]; 0: exactly ISL and OSL")
	output.register(f, "table", "", "table", "json")
	return c
}

// validationProfiles are the built-in profiles and those in dir.
func validationProfiles(dir string) ([]*emulator.Profile, error) {
	out := emulator.BuiltinProfiles()
	if dir == "" {
		return out, nil
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, badInput("--profiles %s: want a folder of profile .yaml files", dir)
	}
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, badInput("--profiles %s: no .yaml profile files in it", dir)
	}
	slices.Sort(files)
	for _, f := range files {
		p, err := emulator.LoadProfileFile(f)
		if err != nil {
			return nil, badInput("--profiles: %v", err)
		}
		out = append(out, p)
	}
	return out, nil
}

func writeSiliconTable(w io.Writer, res *calibrate.SiliconResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "line\tmodel\tprecision\ttp\tisl\tosl\tclients\tttft_meas\tttft_pred\tttft_ape%\ttpot_meas\ttpot_pred\ttpot_ape%\tprofile\t")
	for _, r := range res.Rows {
		tp := strconv.Itoa(r.TP)
		if r.Prefill != nil && r.Decode != nil {
			tp = fmt.Sprintf("P%d×%d D%d×%d", r.Prefill.Workers, r.Prefill.TP, r.Decode.Workers, r.Decode.TP)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.1f\t%s (%s)\t\n", r.Line, r.Model, orDash(r.Precision), tp, r.ISL, r.OSL,
			r.Concurrency, r.TTFT.Measured, r.TTFT.Predicted, r.TTFT.APE, r.TPOT.Measured, r.TPOT.Predicted, r.TPOT.APE, r.Profile, r.ProfileSource)
	}
	tw.Flush()
	reasons := map[string]int{}
	var order []string
	for _, s := range res.Skipped {
		if reasons[s.Reason] == 0 {
			order = append(order, s.Reason)
		}
		reasons[s.Reason]++
	}
	for _, r := range order {
		fmt.Fprintf(w, "skipped %d: %s\n", reasons[r], r)
	}
	s := res.Summary
	fmt.Fprintf(w, "predicted %d of %d rows; TTFT APE median %.1f%%, p90 %.1f%%; TPOT APE median %.1f%%, p90 %.1f%%\n",
		s.Predicted, s.Rows, s.TTFT.MedianAPE, s.TTFT.P90APE, s.TPOT.MedianAPE, s.TPOT.P90APE)
	fmt.Fprintln(w, "predicted: hone predict in virtual time on each row's profile; measured: the file's rows (real vLLM on GPUs)")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
