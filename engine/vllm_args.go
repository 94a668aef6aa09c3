package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// This file reads a `vllm serve` command line as a given vLLM's argument
// parser would, as far as vLLM's release table (vllm_versions.go) knows
// it: hone's fake vllm (scripts/fake-vllm) answers with it, and the tests
// check every command Render spells with it.

// VLLMServeFlags are the `vllm serve` flags Render spells whatever the
// version (vllm.go Render), each with whether it takes a value. vLLM has
// had every one of them since the table's floor; the flags that came or
// went later are rows of the table (kind flag, all of them switches).
// TestRenderedFlagsAreKnown keeps Render to these two lists.
var VLLMServeFlags = map[string]bool{
	"--revision":                     true,
	"--served-model-name":            true,
	"--host":                         true,
	"--port":                         true,
	"--tensor-parallel-size":         true,
	"--dtype":                        true,
	"--kv-cache-dtype":               true,
	"--enable-prefix-caching":        false,
	"--no-enable-prefix-caching":     false,
	"--enable-prompt-tokens-details": false,
	"--max-num-seqs":                 true,
	"--max-num-batched-tokens":       true,
	"--gpu-memory-utilization":       true,
	"--block-size":                   true,
	"--max-model-len":                true,
	"--enforce-eager":                false,
	"--compilation-config":           true,
	"--speculative-config":           true,
	"--kv-transfer-config":           true,
}

// vllmIntFlags take an integer, vllmJSONFlags a JSON object.
var (
	vllmIntFlags  = []string{"--port", "--tensor-parallel-size", "--max-num-seqs", "--max-num-batched-tokens", "--block-size", "--max-model-len"}
	vllmJSONFlags = []string{"--compilation-config", "--speculative-config", "--kv-transfer-config"}
	// vllmDTypes are --dtype's choices (vllm/config/model.py ModelDType).
	vllmDTypes = []string{"auto", "half", "float16", "bfloat16", "float", "float32"}
	// kvTransferFields are the --kv-transfer-config fields Render writes;
	// kv_load_failure_policy is version-gated (a row of the table).
	kvTransferFields = []string{"kv_connector", "kv_role", "kv_ip", "kv_port", "kv_buffer_size", "kv_connector_extra_config", "kv_load_failure_policy"}
)

// ServeArgs is a `vllm serve` command line as CheckVLLMServeArgs read it:
// the model and every flag hone knows with its value ("" for a switch).
type ServeArgs struct {
	Model string
	Flags map[string]string
}

// CheckVLLMServeArgs reads the arguments after `vllm serve` as vLLM v's
// argument parser would, as far as hone's version table knows it (the
// flags of VLLMServeFlags and the table's rows, the --kv-cache-dtype
// values and --kv-transfer-config fields the table gates), and returns the
// first one vLLM v would refuse. A flag hone does not know is refused too:
// the table cannot say whether that version has it. Versions older than
// the table's floor are taken to have VLLMServeFlags, unchecked.
//
// hone's fake vllm (scripts/fake-vllm) answers with it, so that the
// runbook test fails on what a real vLLM of that version would reject.
func CheckVLLMServeArgs(v Version, args []string) (ServeArgs, error) {
	sa := ServeArgs{Flags: map[string]string{}}
	fail := func(format string, a ...any) (ServeArgs, error) {
		return sa, fmt.Errorf("vllm serve (vLLM %s): %s", v, fmt.Sprintf(format, a...))
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			if sa.Model != "" {
				return fail("unrecognized arguments: %s", a)
			}
			sa.Model = a
			continue
		}
		name, value, inline := strings.Cut(a, "=")
		takes, base := VLLMServeFlags[name]
		if !base {
			f, ok := flagFeature(name)
			if !ok {
				return fail("unrecognized arguments: %s (not a flag hone's version table knows)", name)
			}
			if !f.In(v) {
				return fail("unrecognized arguments: %s (%s; %s)", name, vllmVersions.Span(f.ID), f.Source)
			}
		}
		if takes && !inline {
			if i+1 >= len(args) {
				return fail("argument %s: expected one argument", name)
			}
			i++
			value = args[i]
		} else if !takes && inline {
			return fail("argument %s: ignored explicit argument %q", name, value)
		}
		if _, dup := sa.Flags[name]; dup && takes {
			// argparse keeps the last; hone never renders a flag twice.
			return fail("argument %s given twice", name)
		}
		sa.Flags[name] = value
		if err := checkServeValue(v, name, value); err != nil {
			return fail("argument %s: %v", name, err)
		}
	}
	if sa.Model == "" {
		return fail("the following arguments are required: model_tag")
	}
	return sa, nil
}

// flagFeature is the table's row for a flag, if it has one.
func flagFeature(name string) (Feature, bool) {
	for _, f := range vllmVersions.Features {
		if f.Kind == KindFlag && f.Name == name {
			return f, true
		}
	}
	return Feature{}, false
}

// checkServeValue checks one flag's value as vLLM v's parser would.
func checkServeValue(v Version, name, value string) error {
	switch {
	case slices.Contains(vllmIntFlags, name):
		if _, err := strconv.Atoi(value); err != nil {
			return fmt.Errorf("invalid int value: %q", value)
		}
	case name == "--gpu-memory-utilization":
		if _, err := strconv.ParseFloat(value, 64); err != nil {
			return fmt.Errorf("invalid float value: %q", value)
		}
	case name == "--dtype":
		if !slices.Contains(vllmDTypes, value) {
			return fmt.Errorf("invalid choice: %q (choose from %s)", value, strings.Join(vllmDTypes, ", "))
		}
	case name == "--kv-cache-dtype":
		if !slices.Contains(vllmVersions.KVCacheDTypes, value) || !vllmVersions.AcceptsKVCacheDType(v, value) {
			return fmt.Errorf("invalid choice: %q (%s)", value, VLLMSourceCache)
		}
	case slices.Contains(vllmJSONFlags, name):
		var obj map[string]any
		if err := json.Unmarshal([]byte(value), &obj); err != nil {
			return fmt.Errorf("not a JSON object: %v", err)
		}
		if name == "--kv-transfer-config" {
			return checkKVTransferConfig(v, obj)
		}
	}
	return nil
}

func checkKVTransferConfig(v Version, obj map[string]any) error {
	var keys []string
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(kvTransferFields, k) {
			return fmt.Errorf("KVTransferConfig has no field %q (%s)", k, VLLMSourceKVTransfer)
		}
		if k == "kv_load_failure_policy" && !vllmVersions.Has(v, FeatureKVLoadFailurePolicy) {
			return fmt.Errorf("KVTransferConfig has no field %q (%s; %s)", k, vllmVersions.Span(FeatureKVLoadFailurePolicy), VLLMSourceKVTransfer)
		}
	}
	return nil
}
