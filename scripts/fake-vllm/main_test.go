//go:build linux

package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/hone-llm/hone/engine"
)

// TestEmulatorArgs: a checked vllm serve becomes hone sim serve with the
// same settings, as deploy's renderEmulator spells a spec for both
// engines; kv_both takes its role from FAKE_VLLM_ROLE.
func TestEmulatorArgs(t *testing.T) {
	t.Setenv("FAKE_VLLM_TIME_SCALE", "0.25")
	t.Setenv("FAKE_VLLM_PROFILE", "")
	t.Setenv("FAKE_VLLM_ROLE", "decode")
	args := strings.Fields(`Qwen/Q --revision abc --served-model-name q --host 127.0.0.1 --port 18410 --tensor-parallel-size 2 ` +
		`--dtype bfloat16 --no-enable-prefix-caching --enable-prompt-tokens-details --enable-per-request-metrics --max-model-len 8192 ` +
		`--compilation-config {"cudagraph_mode":"NONE"} --kv-transfer-config {"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"recompute"}`)
	sa, err := engine.CheckVLLMServeArgs(engine.MustVersion("0.26.0"), args)
	if err != nil {
		t.Fatal(err)
	}
	got, err := emulatorArgs(sa)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(`sim serve --model Qwen/Q --host 127.0.0.1 --port 18410 --served-model-name q --time-scale 0.25 ` +
		`--tensor-parallel-size 2 --max-model-len 8192 --no-enable-prefix-caching --enable-prompt-tokens-details ` +
		`--enable-per-request-metrics --enforce-eager --role decode --kv-load-failure-policy recompute`)
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	t.Setenv("FAKE_VLLM_ROLE", "")
	sa.Flags["--kv-transfer-config"] = `{"kv_connector":"P2pNcclConnector","kv_role":"kv_producer"}`
	if _, err := emulatorArgs(sa); err == nil || !strings.Contains(err.Error(), "NixlConnector only") {
		t.Errorf("P2pNcclConnector: %v", err)
	}
}
