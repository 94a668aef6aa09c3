package main

import (
	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/replay"
)

// traceFlags are --trace and its options (hone replay, hone predict).
type traceFlags struct {
	path        string
	speed       float64
	blockSize   int
	engineBlock int
}

// traceHelp is what --help says of --trace, in both commands.
const traceHelp = `--trace FILE sends a trace's requests instead of the seed workload: a
Mooncake trace (JSON lines {"timestamp": ms, "input_length": n,
"output_length": m, "hash_ids": [...]}, one hash id per --trace-block-size
tokens, 512 in Mooncake's public traces, the last block possibly partial)
or a hone run record (recognized by its content; its requests become the
trace, every level after the previous one, each session's prefix shared
within its level). Each request goes at (timestamp - first) / --trace-speed
model ms, open loop, on a cold engine, with exactly output_length tokens
out. Prompts are token-exact: requests whose hash lists agree on their
first k full blocks share exactly k × block tokens and nothing more (the
tokens after the last full block are the request's own). The record's
workload (kind "trace") keeps the trace's sha256, request count, speed,
block sizes, the hit rate the trace's structure implies (an unbounded
cache, the first occurrence of a block a miss, whole --engine-block-size
blocks, at most input_length - 1 tokens) and the measured one. A trace
that cannot be replayed (unsorted timestamps, a length that is not a whole
number >= 1, more hash ids than the input has blocks, not JSON) is exit 2,
naming the line.`

func (t *traceFlags) register(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&t.path, "trace", "", "send a trace's requests instead of the workload: a Mooncake JSONL trace or a hone run record (see above)")
	f.Float64Var(&t.speed, "trace-speed", 1, "with --trace: replay the trace this many times faster (0.5: half as fast)")
	f.IntVar(&t.blockSize, "trace-block-size", replay.MooncakeBlockSize, "with --trace: tokens per hash id in the trace")
	f.IntVar(&t.engineBlock, "engine-block-size", 16, "with --trace: the engine's KV block size, for the hit rate the trace implies (vLLM's default: 16)")
}

// check refuses --trace's options without it, and with it the flags
// (named) that describe the seed workload or its levels.
func (t *traceFlags) check(c *cobra.Command, conflicts ...string) error {
	if t.path == "" {
		for _, n := range []string{"trace-speed", "trace-block-size", "engine-block-size"} {
			if c.Flags().Changed(n) {
				return badInput("--%s: only with --trace", n)
			}
		}
		return nil
	}
	for _, n := range conflicts {
		if c.Flags().Lookup(n) != nil && c.Flags().Changed(n) {
			return badInput("--%s: a trace states its own requests, lengths and times: give --trace or --%s, not both", n, n)
		}
	}
	if !(t.speed > 0) || t.speed > 1e6 {
		return badInput("--trace-speed: want a positive factor (2: twice as fast as the trace), got %v", t.speed)
	}
	if t.blockSize < 1 {
		return badInput("--trace-block-size: want at least 1 token, got %d", t.blockSize)
	}
	if t.engineBlock < 1 {
		return badInput("--engine-block-size: want at least 1 token, got %d", t.engineBlock)
	}
	return nil
}

// workloadFlagNames are the flags of the seed workload, which a trace
// replaces.
var workloadFlagNames = []string{"qps", "requests", "input-tokens", "uncached-tokens", "output-tokens", "length-ratio",
	"max-concurrency", "concurrency", "runs", "shard", "start-at", "level-gap", "capacity", "grid"}

// open checks the trace in one pass: exit 2 naming the line when it
// cannot be replayed.
func (t *traceFlags) open() (*replay.TraceFile, error) {
	tf, err := replay.OpenTrace(t.path, t.blockSize, t.engineBlock)
	if err != nil {
		return nil, badInput("--trace: %v", err)
	}
	return tf, nil
}
