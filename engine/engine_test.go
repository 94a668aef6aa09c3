package engine_test

import (
	"slices"
	"testing"

	"github.com/hone-llm/hone/daemon"
	"github.com/hone-llm/hone/engine"
)

// The daemon's defaults come from the registry (daemon.DefaultMatch and
// daemon.DefaultKVPorts), and the built-in engines give exactly what the
// daemon traced when they were constants: moving them into the engines
// changed nothing the daemon traces.
func TestDaemonDefaultsFromRegistry(t *testing.T) {
	const match = `vllm serve|vllm\.entrypoints|VLLM::|EngineCore|VllmWorker|hone sim serve`
	const kvPorts = "5600-5663,14579-14580,5700-5763"
	if got := engine.ProcessPattern(); got != match || daemon.DefaultMatch != match {
		t.Errorf("ProcessPattern() = %q, daemon.DefaultMatch = %q, want %q", got, daemon.DefaultMatch, match)
	}
	if got := engine.KVPorts(); got != kvPorts || daemon.DefaultKVPorts != kvPorts {
		t.Errorf("KVPorts() = %q, daemon.DefaultKVPorts = %q, want %q", got, daemon.DefaultKVPorts, kvPorts)
	}
}

func TestBuiltinEngines(t *testing.T) {
	if got := engine.Names(); !slices.Equal(got, []string{engine.VLLM, engine.Emulator}) {
		t.Errorf("Names() = %q, want real engines first: vllm, emulator", got)
	}
	for _, tc := range []struct {
		version, want string // want "": none recognises it
	}{
		{"0.11.1", engine.VLLM}, {"v0.17.0rc1", engine.VLLM}, {"0.16.1.dev42+g1a2b3c4", engine.VLLM},
		{"hone-emulator", engine.Emulator}, {"hone-emulator 1.2", engine.Emulator},
		{"", ""}, {"sglang 0.5", ""}, {"unknown", ""},
	} {
		got := ""
		if e, ok := engine.Recognise(tc.version); ok {
			got = e.Name()
		}
		if got != tc.want {
			t.Errorf("Recognise(%q) = %q, want %q", tc.version, got, tc.want)
		}
	}
	for _, tc := range []struct {
		cmdline []string
		want    string
	}{
		{[]string{"/venv/bin/python", "/venv/bin/vllm", "serve", "org/m"}, engine.VLLM},
		{[]string{"vllm", "serve", "org/m"}, engine.VLLM},
		{[]string{"python", "-m", "vllm.entrypoints.openai.api_server"}, engine.VLLM},
		{[]string{"VLLM::EngineCore"}, engine.VLLM},
		{[]string{"hone", "sim", "serve", "--role", "decode"}, engine.Emulator},
		{[]string{"bash"}, ""},
	} {
		e, ok := engine.MatchProcess("", tc.cmdline)
		switch {
		case ok && e.Name() != tc.want, !ok && tc.want != "":
			t.Errorf("MatchProcess(%q) = %v, %v; want %q", tc.cmdline, e, ok, tc.want)
		}
	}
	if !engine.Emulated(engine.Emulator) || engine.Emulated(engine.VLLM) || engine.Emulated("nosuch") {
		t.Error("Emulated: want the emulator only")
	}
	v := engine.FactsOf(engine.VLLM)
	if v.Cache.ResetRoute != "POST /reset_prefix_cache" || v.Cache.ResetEnv != engine.EnvServerDevMode+"=1" {
		t.Errorf("vLLM cache reset = %+v", v.Cache)
	}
}
