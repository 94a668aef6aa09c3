package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/docs/cli"
	"github.com/hone-llm/hone/gate"
	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// withHelp gives c the description and examples of its page in docs/cli
// (Long and Example), the page's {{placeholders}} filled from vars: the
// help lives in docs/, where it can be read and its examples run
// (help_test.go), while the rules it quotes stay in their packages.
func withHelp(c *cobra.Command, page string, vars map[string]string) *cobra.Command {
	p, err := cli.Lookup(page)
	if err != nil {
		panic(err) // a page the binary embeds: help_test.go reads every one
	}
	if c.Long, err = cli.Fill(p.Long, vars); err != nil {
		panic(fmt.Sprintf("docs/cli/%s.md: %v", page, err))
	}
	if c.Example, err = cli.Fill(p.Example(), vars); err != nil {
		panic(fmt.Sprintf("docs/cli/%s.md: %v", page, err))
	}
	return c
}

// g formats a help text's number as %g does.
func g(x float64) string { return fmt.Sprintf("%g", x) }

// The values each page's placeholders name, by page: the rule texts and
// thresholds its help quotes.

func diagnoseHelp() map[string]string {
	return map[string]string{
		"100 * schema.ClientBoundSLOFraction":  g(100 * schema.ClientBoundSLOFraction),
		"100 * schema.ClientBoundTTFTFraction": g(100 * schema.ClientBoundTTFTFraction),
		"diagnose.StallTPOTs":                  g(float64(diagnose.StallTPOTs)),
		"100 * diagnose.TailFraction":          g(100 * diagnose.TailFraction),
		"100 * diagnose.Confidence":            g(100 * diagnose.Confidence),
		"100 * diagnose.GrowthFraction":        g(100 * diagnose.GrowthFraction),
		"100 * diagnose.MaterialFraction":      g(100 * diagnose.MaterialFraction),
		"100 * diagnose.DominantShare":         g(100 * diagnose.DominantShare),
	}
}

func gateCheckHelp() map[string]string {
	return map[string]string{
		"gate.TailConfidence":         g(gate.TailConfidence),
		"gate.TailMinRequests":        fmt.Sprintf("%d", gate.TailMinRequests),
		"100 * gate.LooseTailChange":  g(100 * gate.LooseTailChange),
		"gate.CapacityRule":           gate.CapacityRule,
		"gate.DefaultTPOTFloorMs":     g(gate.DefaultTPOTFloorMs),
		"100 * gate.OfferedTolerance": g(100 * gate.OfferedTolerance),
		"gate.ObjectiveFactor":        g(gate.ObjectiveFactor),
	}
}

func optimizeHelp() map[string]string {
	return map[string]string{
		"optimizer.CapacityRule":       optimizer.CapacityRule,
		"optimizer.LiveSelectionRule":  optimizer.LiveSelectionRule,
		"optimizer.LiveRegressionRule": optimizer.LiveRegressionRule,
		"optimizer.FloorRule":          optimizer.FloorRule,
		"optimizer.FloorScalerRule":    optimizer.FloorScalerRule,
		"optimizer.RescaleRule":        optimizer.RescaleRule,
		"optimizer.TimeBudgetRule":     optimizer.TimeBudgetRule,
		"optimizer.PredictRule":        optimizer.PredictRule,
	}
}

func predictHelp() map[string]string {
	return map[string]string{"capacity.Rule": capacity.Rule, "traceHelp": traceHelp}
}

func replayHelp() map[string]string {
	return map[string]string{"capacity.Rule": capacity.Rule, "traceHelp": traceHelp}
}

func simServeHelp() map[string]string {
	return map[string]string{
		"emulator.ProfileNames": strings.Join(emulator.ProfileNames(), ", "),
		"emulator.FaultHelp":    emulator.FaultHelp,
		"emulator.TraceHelp":    emulator.TraceHelp,
	}
}
