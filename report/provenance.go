package report

import (
	"fmt"
	"strings"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// profileProvenance names a cost profile and how it was made, as every
// emulated or predicted figure's provenance says it: "profile
// qwen2.5-coder-0.5b-l4, hand-made: checked against no measurement".
func profileProvenance(name string) string {
	p, err := emulator.LookupProfile(name)
	if err != nil {
		return "profile " + name + ", source unknown: " + err.Error()
	}
	kind := p.SourceKind()
	switch kind {
	case emulator.SourceHandMade:
		return fmt.Sprintf("profile %s, %s: checked against no measurement", name, kind)
	case emulator.SourceFittedSteps:
		return fmt.Sprintf("profile %s, %s of real vLLM (docs/validation.md); %s", name, kind, emulator.ValidationNote(name))
	}
	return fmt.Sprintf("profile %s, %s; %s", name, kind, emulator.ValidationNote(name))
}

// provenance says where a log's figures come from, in the words every
// table header, plot title and caption uses. Only a device log is called a
// measurement on GPUs: an unverified endpoint, or a kind hone does not
// know, reads as unverified.
type provenance struct {
	kind  string // as logged: "emulated"
	label string // "EMULATED"
	about string // what the figures are, one sentence for the report's top
	short string // the same in a few words, for plot titles
	clock string // "model time" where time is modelled; "" for wall time
}

func provenanceOf(kind schema.Kind) provenance {
	p := provenance{kind: string(kind), label: strings.ToUpper(string(kind))}
	switch kind {
	case schema.KindEmulated:
		p.about = "hone's engine emulator with GPU time from a cost model. They rank configurations; they are not GPU measurements"
		p.short = "engine emulator, model time; not GPU measurements"
		p.clock = "model time"
	case schema.KindSimulationOnly:
		p.about = "the CPU exercise's exact queueing model (fixed prefill, decode and KV-transfer rates). They rank configurations; they are not GPU measurements"
		p.short = "queueing model, model time; not GPU measurements"
		p.clock = "model time"
	case schema.KindDevice:
		p.about = "real vLLM on GPUs: the endpoint answered GET /version as vLLM does"
		p.short = "vLLM on GPUs"
	default:
		p.about = "from an endpoint that gave no evidence of what it serves (no GET /version answer like vLLM's or hone's emulator's). " +
			"They are not device measurements and say nothing certain about GPUs"
		p.short = "endpoint of unknown kind; not a device measurement"
		if kind != schema.KindUnverified {
			p.label = fmt.Sprintf("UNVERIFIED (kind %q is not one hone knows)", kind)
		}
	}
	return p
}

// tag is the kind as tables and section headings carry it.
func (p provenance) tag() string {
	if p.kind == "" {
		return string(schema.KindUnverified)
	}
	return p.kind
}

// ms is the unit of a time figure: "ms, model time" where time is modelled.
func (p provenance) ms() string {
	if p.clock == "" {
		return "ms"
	}
	return "ms, " + p.clock
}

// unit is m's unit with the kind's clock.
func (p provenance) unit(m metric) string {
	if m.unit == "ms" {
		return p.ms()
	}
	return m.unit
}

// title is a plot title: what it shows, then where the figures come from.
func (p provenance) title(what string) string {
	return fmt.Sprintf("%s\n%s: %s", what, strings.ToUpper(p.tag()), p.short)
}
