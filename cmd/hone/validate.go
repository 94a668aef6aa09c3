package main

import (
	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/calibrate"
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
		o      calibrate.SiliconOptions
		output outputFormat
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
			o.File, o.Format, o.Out = args[0], output.value, c.OutOrStdout()
			return calibrate.ValidateSilicon(o)
		},
	}, "validate-silicon", nil)
	f := c.Flags()
	f.StringVar(&o.Profiles, "profiles", "", "a folder of profile .yaml files to choose from besides the built-ins")
	f.IntVar(&o.RequestsPerClient, "requests-per-client", 10, "measured requests per client of each closed loop (vllm bench serve's num-prompts / max-concurrency)")
	f.StringVar(&o.KVCacheDType, "kv-cache-dtype", "", "predict every row with this KV cache dtype (vLLM's --kv-cache-dtype: fp8 halves its bytes; the decode KV read is the profile's measured fp8 one where it has one); default: the model's")
	f.StringVar(&o.By, "by", "", "also break the errors down by these row fields, comma-separated: model, precision, mode, tp, isl, osl, clients (e.g. model,tp)")
	f.Float64Var(&o.LengthRatio, "length-ratio", 0, "draw each request's ISL and OSL from [ratio × L, L]; 0: exactly ISL and OSL")
	output.register(f, "table", "", "table", "json")
	return c
}
