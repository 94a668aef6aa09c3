package emulator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hone-llm/hone/internal/atomicfile"
)

// profileFile is a profile file's top level: the profile's own keys, and
// base, the built-in profile that fills every key the file leaves out.
type profileFile struct {
	Base    string `yaml:"base,omitempty"`
	Profile `yaml:",inline"`
}

// isProfileFile says whether a --profile value names a file rather than a
// built-in profile.
func isProfileFile(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// LoadProfileFile reads a profile from a YAML file (format: PROFILES.md).
// Keys are Profile's yaml names; an unknown key is an error. The optional
// key base names a built-in profile that fills every key the file omits;
// name, when omitted, is the file's name without its extension. The
// profile is validated (Validate); TP is 0, as from LookupProfile.
func LoadProfileFile(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile file %s: %w", path, err)
	}
	return parseProfileFile(b, path)
}

// parseProfileFile is LoadProfileFile on the file's bytes.
func parseProfileFile(b []byte, path string) (*Profile, error) {
	// The first pass finds base; the second decodes over a copy of it, so
	// that what the file omits keeps the base's value.
	var f profileFile
	if err := decodeProfileFile(b, &f); err != nil {
		return nil, fmt.Errorf("profile file %s: %w", path, err)
	}
	if f.Base != "" {
		base, ok := profiles[f.Base]
		if !ok {
			return nil, fmt.Errorf("profile file %s: base: unknown built-in profile %q: want one of %s",
				path, f.Base, strings.Join(ProfileNames(), ", "))
		}
		f = profileFile{Profile: *base.clone()}
		f.Name = ""
		if err := decodeProfileFile(b, &f); err != nil {
			return nil, fmt.Errorf("profile file %s: %w", path, err)
		}
	}
	p := f.Profile
	if p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	p.TP = 0
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("profile file %s: %w", path, err)
	}
	return &p, nil
}

// decodeProfileFile decodes exactly one YAML document strictly into f.
func decodeProfileFile(b []byte, f *profileFile) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty: want a YAML mapping of profile keys (sim/emulator/PROFILES.md)")
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document: want one profile")
	}
	return nil
}

// WriteProfileFile writes p as a profile file that LoadProfileFile reads
// back identical (TP aside: it is the deployment's, not the file's). The
// file is complete, with no base. p must be valid.
func WriteProfileFile(path string, p *Profile) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("write profile %s: %w", path, err)
	}
	c := p.clone()
	c.TP = 0
	var buf bytes.Buffer
	buf.WriteString("# hone emulator cost profile (hone sim serve --profile FILE.yaml);\n# format and derivations: sim/emulator/PROFILES.md\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(profileFile{Profile: *c}); err != nil {
		return fmt.Errorf("write profile %s: %w", path, err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("write profile %s: %w", path, err)
	}
	return atomicfile.Write(path, buf.Bytes())
}

// Validate checks that p is a usable cost model; an error names the field
// by its profile-file key (gpu.memory_bytes) and says what was expected.
// Every profile needs the model fields the server and the KV transfer use.
// Exercise needs its rates; Linear non-negative coefficients and the
// memory figures of the KV-cache capacity; the roofline, besides those,
// the GPU's peaks and the efficiencies. Exercise and Linear exclude each
// other.
func (p *Profile) Validate() error {
	var v validator
	v.nonEmpty("name", p.Name)
	m := p.Model
	v.nonEmpty("model.name", m.Name)
	v.posInt("model.layers", m.Layers)
	v.posInt("model.kv_heads", m.KVHeads)
	v.posInt("model.head_dim", m.HeadDim)
	v.posInt("model.bytes_per_elem", m.BytesPerElem)
	for _, f := range []struct {
		name string
		n    int
	}{{"model.weight_bytes_per_elem", m.WeightBytesPerElem}, {"model.kv_bytes_per_elem", m.KVBytesPerElem}} {
		if f.n < 0 || f.n > 8 {
			v.fail(f.name, "want 0 (model.bytes_per_elem) or 1..8 bytes, got %d", f.n)
		}
	}
	v.posInt("model.vocab", m.Vocab)
	if m.MaxModelLen < 2 {
		v.fail("model.max_model_len", "want >= 2, got %d", m.MaxModelLen)
	}
	v.posInt("max_num_seqs", p.MaxNumSeqs)
	v.posInt("max_num_batched_tokens", p.MaxNumBatchedTokens)
	switch {
	case p.Exercise != nil && p.Linear != nil:
		v.fail("linear", "a profile is exercise or linear, not both (with base, write exercise: null or linear: null)")
	case p.Steps != nil && (p.Exercise != nil || p.Linear != nil):
		v.fail("steps", "a profile is steps, linear or exercise, only one (with base, write exercise: null or linear: null)")
	case p.Exercise != nil:
		e := p.Exercise
		if !(e.PrefillTokensPerSec > 0) {
			v.fail("exercise.prefill_tokens_per_sec", "want > 0, got %v", e.PrefillTokensPerSec)
		}
		v.nonNeg("exercise.decode_ms_per_token", e.DecodeMsPerToken)
		v.nonNeg("exercise.transfer_ms", e.TransferMs)
	default:
		// The roofline and Linear: KV-cache capacity and the KV link.
		v.pos("model.params", m.Params)
		v.pos("gpu.memory_bytes", p.GPU.MemoryBytes)
		v.nonNeg("gpu.link_bytes_sec", p.GPU.LinkBytesSec)
		v.nonNeg("activation_reserve_bytes", p.ActivationReserveBytes)
		v.nonNeg("transfer_fixed_ms", p.TransferFixedMs)
		v.nonNeg("frontend_ms", p.FrontendMs)
		if c := p.Steps; c != nil {
			for i, x := range c.Coefficients() {
				if i == SignedTerm {
					if math.IsNaN(x) || math.IsInf(x, 0) {
						v.fail("steps."+StepCostTerms[i], "want a finite number, got %v", x)
					}
					continue
				}
				v.nonNeg("steps."+StepCostTerms[i], x)
			}
			v.nonNeg("steps.eager_step_ms", c.EagerStepMs)
			v.nonNeg("steps.decode_kv_ms_per_ktoken_fp8", c.DecodeKVMsPerKFP8)
			v.nonNeg("steps.prefill_attn_ms_per_mpair_fp8", c.PrefillAttnMsPerMFP8)
			if c.AllReduces < 0 {
				v.fail("steps.all_reduces", "want >= 0, got %d", c.AllReduces)
			}
			c.AllReduce.validate(&v, "steps.all_reduce")
			v.posInt("model.hidden", m.Hidden)
			break
		}
		if l := p.Linear; l != nil {
			v.nonNeg("linear.step_base_ms", l.StepBaseMs)
			v.nonNeg("linear.decode_per_seq_ms", l.DecodePerSeqMs)
			v.nonNeg("linear.prefill_per_token_ms", l.PrefillPerTokenMs)
			v.nonNeg("linear.prefill_per_context_ms", l.PrefillPerContextMs)
			v.nonNeg("linear.eager_step_ms", l.EagerStepMs)
			break
		}
		v.posInt("model.hidden", m.Hidden)
		v.posInt("model.heads", m.Heads)
		if !(m.EmbedParams >= 0 && m.EmbedParams < m.Params) {
			v.fail("model.embed_params", "want >= 0 and < model.params (%v), got %v", m.Params, m.EmbedParams)
		}
		v.pos("gpu.peak_flops", p.GPU.PeakFLOPS)
		v.pos("gpu.mem_bandwidth", p.GPU.MemBandwidth)
		v.nonNeg("gpu.interconnect_bytes_sec", p.GPU.InterconnectBytesSec)
		v.nonNeg("gpu.interconnect_latency_us", p.GPU.InterconnectLatencyUs)
		if !(p.MFU > 0 && p.MFU <= 1) {
			v.fail("mfu", "want a fraction in (0, 1], got %v", p.MFU)
		}
		if !(p.MBU > 0 && p.MBU <= 1) {
			v.fail("mbu", "want a fraction in (0, 1], got %v", p.MBU)
		}
		v.nonNeg("step_overhead_ms", p.StepOverheadMs)
		v.nonNeg("launch_us", p.LaunchUs)
		if p.KernelsPerLayer < 0 {
			v.fail("kernels_per_layer", "want >= 0, got %d", p.KernelsPerLayer)
		}
		v.nonNeg("graph_launch_ms", p.GraphLaunchMs)
	}
	return v.err
}

// validator keeps the first failure.
type validator struct{ err error }

func (v *validator) fail(field, format string, args ...any) {
	if v.err == nil {
		v.err = fmt.Errorf("%s: "+format, append([]any{field}, args...)...)
	}
}

func (v *validator) nonEmpty(field, s string) {
	if s == "" {
		v.fail(field, "want a non-empty string")
	}
}

func (v *validator) posInt(field string, n int) {
	if n <= 0 {
		v.fail(field, "want > 0, got %d", n)
	}
}

// pos and nonNeg also refuse NaN and +Inf.
func (v *validator) pos(field string, x float64) {
	if !(x > 0) || math.IsInf(x, 1) {
		v.fail(field, "want > 0, got %v", x)
	}
}

func (v *validator) nonNeg(field string, x float64) {
	if !(x >= 0) || math.IsInf(x, 1) {
		v.fail(field, "want >= 0, got %v", x)
	}
}
