package optimizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/diagnose"
)

// Candidate is a spec the optimizer may try, and why.
type Candidate struct {
	Spec *deploy.Spec
	Why  string
}

// CloneSpec deep-copies a spec.
func CloneSpec(s *deploy.Spec) *deploy.Spec {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("optimizer: spec is not JSON: %v", err))
	}
	var out deploy.Spec
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("optimizer: spec round trip: %v", err))
	}
	return &out
}

// SpecKey is a short canonical description of what the optimizer varies:
// two specs with one key are the same experiment.
func SpecKey(s *deploy.Spec) string {
	var b strings.Builder
	t := s.Topology
	if t.Kind == deploy.Disaggregated {
		fmt.Fprintf(&b, "disagg-%dp%dd", t.Prefill.Replicas, t.Decode.Replicas)
		if t.Prefill.TP > 1 || t.Decode.TP > 1 {
			fmt.Fprintf(&b, "-tp%d.%d", t.Prefill.TP, t.Decode.TP)
		}
	} else {
		fmt.Fprintf(&b, "coloc-r%d-tp%d", max(t.Replicas, 1), max(t.TP, 1))
	}
	if cachingOn(s) {
		b.WriteString("-cache")
	} else {
		b.WriteString("-nocache")
	}
	if s.Routing.Policy != "" {
		b.WriteString("-" + strings.ReplaceAll(s.Routing.Policy, "_", ""))
	}
	if s.Knobs.EnforceEager {
		b.WriteString("-eager")
	}
	if s.Knobs.MaxNumBatchedTokens > 0 {
		fmt.Fprintf(&b, "-mbt%d", s.Knobs.MaxNumBatchedTokens)
	}
	if s.Knobs.MaxNumSeqs > 0 {
		fmt.Fprintf(&b, "-seqs%d", s.Knobs.MaxNumSeqs)
	}
	if m := s.Knobs.GPUMemoryUtilization; m > 0 {
		fmt.Fprintf(&b, "-mem%g", m)
	}
	return b.String()
}

func cachingOn(s *deploy.Spec) bool { return s.Knobs.PrefixCaching == nil || *s.Knobs.PrefixCaching }

func boolp(b bool) *bool { return &b }

// workers counts a spec's engines (the routing policy matters only with two
// or more of a role).
func workers(s *deploy.Spec) (colocated, prefill, decode int) {
	t := s.Topology
	if t.Kind == deploy.Disaggregated {
		return 0, t.Prefill.Replicas, t.Decode.Replicas
	}
	return max(t.Replicas, 1), 0, 0
}

// Disaggregate splits a colocated spec's GPU budget into prefill and decode
// pools of single-GPU workers, at least one of each.
func Disaggregate(s *deploy.Spec) (*deploy.Spec, bool) {
	if s.Topology.Kind == deploy.Disaggregated || s.GPUs.Budget < 2 {
		return nil, false
	}
	out := CloneSpec(s)
	p := max(1, s.GPUs.Budget/2)
	out.Topology = deploy.Topology{Kind: deploy.Disaggregated, Prefill: &deploy.Pool{Replicas: p, TP: 1},
		Decode: &deploy.Pool{Replicas: s.GPUs.Budget - p, TP: 1}}
	if out.KV.Name == "" {
		out.KV.Name = "NixlConnector"
	}
	if out.KV.SideChannelPort == 0 {
		out.KV.SideChannelPort = deploy.DefaultSideChannelPort
	}
	return out, true
}

// Colocate turns a disaggregated spec into data-parallel colocated replicas
// on the same GPU budget.
func Colocate(s *deploy.Spec) (*deploy.Spec, bool) {
	if s.Topology.Kind != deploy.Disaggregated {
		return nil, false
	}
	out := CloneSpec(s)
	out.Topology = deploy.Topology{Kind: deploy.Colocated, Replicas: s.GPUs.Budget, TP: 1}
	out.KV = deploy.KVConnector{} // only a disaggregated topology transfers KV
	return out, true
}

// Shift moves one single-GPU worker from one pool to the other (toPrefill:
// decode → prefill), keeping at least one in each.
func Shift(s *deploy.Spec, toPrefill bool) (*deploy.Spec, bool) {
	t := s.Topology
	if t.Kind != deploy.Disaggregated || t.Prefill.TP != 1 || t.Decode.TP != 1 {
		return nil, false
	}
	from, to := t.Decode.Replicas, t.Prefill.Replicas
	if !toPrefill {
		from, to = to, from
	}
	if from < 2 {
		return nil, false
	}
	out := CloneSpec(s)
	if toPrefill {
		out.Topology.Decode.Replicas, out.Topology.Prefill.Replicas = from-1, to+1
	} else {
		out.Topology.Prefill.Replicas, out.Topology.Decode.Replicas = from-1, to+1
	}
	return out, true
}

// Propose lists the changes worth trying for a diagnosed bottleneck, most
// promising first, every one on the same model, precision and GPU budget.
func Propose(s *deploy.Spec, bottleneck string) []Candidate {
	if bottleneck == diagnose.ClientBound {
		return nil // the measurement, not the deployment: no serving change fixes it
	}
	var out []Candidate
	add := func(c *deploy.Spec, ok bool, why string) {
		if ok {
			out = append(out, Candidate{Spec: c, Why: why})
		}
	}
	switch bottleneck {
	case diagnose.Queueing:
		c, ok := Disaggregate(s)
		add(c, ok, "queueing grows with load: separate prefill and decode queues")
		c, ok = Shift(s, true)
		add(c, ok, "the prefill queue saturates: move a GPU from decode to prefill")
	case diagnose.Prefill:
		if !cachingOn(s) {
			c := CloneSpec(s)
			c.Knobs.PrefixCaching = boolp(true)
			add(c, true, "prefill dominates and the prefix cache is off: turn it on")
		}
		if s.Routing.Policy == "round_robin" {
			c := CloneSpec(s)
			c.Routing.Policy = "session_affinity"
			add(c, true, "prefill dominates: route each session to one worker so its prefix stays cached")
		}
		c, ok := Shift(s, true)
		add(c, ok, "prefill dominates: move a GPU from decode to prefill")
		c, ok = Disaggregate(s)
		add(c, ok, "prefill competes with decode: disaggregate")
	case diagnose.Transfer:
		c, ok := Colocate(s)
		add(c, ok, "KV transfer costs more than the queueing it saves: colocate")
	case diagnose.DecodeQ, diagnose.Decode:
		c, ok := Shift(s, false)
		add(c, ok, "decode is the bottleneck: move a GPU from prefill to decode")
		if s.Knobs.EnforceEager {
			c := CloneSpec(s)
			c.Knobs.EnforceEager = false
			add(c, true, "decode steps are slow in eager mode: enable CUDA graphs")
		}
	}
	// With nothing engine-side to fix, the primary deployment is still worth
	// measuring against the baseline.
	if len(out) == 0 {
		c, ok := Disaggregate(s)
		add(c, ok, "no engine-side bottleneck yet: evaluate the disaggregated primary deployment against the colocated baseline")
	}
	return out
}

// Ablations are the single-factor reversals of a selected spec's
// optimizations, to isolate each one's contribution.
func Ablations(s *deploy.Spec) []Candidate {
	var out []Candidate
	if cachingOn(s) {
		c := CloneSpec(s)
		c.Knobs.PrefixCaching = boolp(false)
		out = append(out, Candidate{c, "ablation: prefix caching off"})
	}
	col, pre, dec := workers(s)
	if col > 1 || pre > 1 || dec > 1 {
		c := CloneSpec(s)
		if s.Routing.Policy == "round_robin" {
			c.Routing.Policy = "session_affinity"
			out = append(out, Candidate{c, "ablation: session-affinity routing in place of round robin"})
		} else {
			c.Routing.Policy = "round_robin"
			out = append(out, Candidate{c, "ablation: round-robin routing in place of session affinity"})
		}
	}
	if !s.Knobs.EnforceEager {
		c := CloneSpec(s)
		c.Knobs.EnforceEager = true
		out = append(out, Candidate{c, "ablation: CUDA graphs off (eager)"})
	}
	return out
}
