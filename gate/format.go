package gate

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Formats are the output formats of Write.
var Formats = []string{"table", "md", "junit", "github", "json"}

// Write renders a report in one of Formats.
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case "table":
		return r.writeTable(w)
	case "md":
		return r.writeMarkdown(w)
	case "junit":
		return r.writeJUnit(w)
	case "github":
		return r.writeGitHub(w)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return fmt.Errorf("format %q: want one of %s", format, strings.Join(Formats, ", "))
}

func (r *Report) header() string {
	return fmt.Sprintf("gate: %s vs baseline %q (%s; %d baseline runs, %d candidate runs)",
		strings.ToUpper(string(r.Verdict)), r.Baseline, r.Kind, r.BaseRuns, r.CandRuns)
}

func (res Result) where() string {
	if res.Series.OfferedQPS == 0 {
		return res.Series.Scenario
	}
	return fmt.Sprintf("%s @ %s req/s", res.Series.Scenario, fmtQPS(res.Series.OfferedQPS))
}

func (r *Report) writeTable(w io.Writer) error {
	fmt.Fprintln(w, r.header())
	for _, s := range r.Incomparable {
		fmt.Fprintln(w, "  incomparable:", s)
	}
	for _, s := range r.InvalidLevels {
		fmt.Fprintln(w, "  invalid:", s)
	}
	if len(r.Results) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "VERDICT\tSCENARIO\tMETRIC\tBASELINE\tCANDIDATE\tCHANGE\tTEST\tREASON")
		for _, res := range r.Results {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.4g\t%.4g\t%+.1f%%\t%s\t%s\n", res.Verdict, res.where(), res.Series.Metric,
				res.BaseCenter, res.CandCenter, 100*res.Change, res.Test, res.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

func (r *Report) writeMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "### %s\n\n", r.header())
	for _, s := range r.Incomparable {
		fmt.Fprintf(w, "- **incomparable**: %s\n", s)
	}
	for _, s := range r.InvalidLevels {
		fmt.Fprintf(w, "- **invalid**: %s\n", s)
	}
	if len(r.Incomparable)+len(r.InvalidLevels) > 0 {
		fmt.Fprintln(w)
	}
	if len(r.Results) > 0 {
		fmt.Fprintln(w, "| verdict | scenario | metric | baseline | candidate | change | test | reason |")
		fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---|---|")
		for _, res := range r.Results {
			fmt.Fprintf(w, "| %s | %s | %s | %.4g | %.4g | %+.1f%% | %s | %s |\n", res.Verdict, res.where(), res.Series.Metric,
				res.BaseCenter, res.CandCenter, 100*res.Change, res.Test, strings.ReplaceAll(res.Reason, "|", "\\|"))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\n_%s_\n", n)
	}
	return nil
}

type junitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

// One testcase per scenario × level × metric: fail and suspect are
// failures (a suspect one's message starts "suspect:"), invalid is skipped;
// an incomparable check is one errored testcase per reason, an unusable one
// a single errored testcase.
func (r *Report) writeJUnit(w io.Writer) error {
	s := junitSuite{Name: "hone gate: " + r.Baseline}
	for _, why := range r.Incomparable {
		s.Cases = append(s.Cases, junitCase{Name: "fingerprint", Classname: "hone.gate", Error: &junitMessage{Message: "incomparable", Body: why}})
		s.Errors++
	}
	if r.Verdict == Unusable {
		s.Cases = append(s.Cases, junitCase{Name: "valid levels", Classname: "hone.gate",
			Error: &junitMessage{Message: "unusable: no level is valid on both sides", Body: strings.Join(r.InvalidLevels, "\n")}})
		s.Errors++
	}
	for _, res := range r.Results {
		c := junitCase{Name: res.Series.Metric, Classname: "hone.gate." + res.where(),
			SystemOut: fmt.Sprintf("%s: %s (%s)", res.Verdict, res.Reason, res.Test)}
		switch res.Verdict {
		case Fail:
			c.Failure = &junitMessage{Message: res.Reason, Body: fmt.Sprintf("baseline %v candidate %v", res.Series.Values, res.Candidate)}
			s.Failures++
		case Suspect:
			c.Failure = &junitMessage{Message: "suspect: " + res.Reason, Body: fmt.Sprintf("baseline %v candidate %v", res.Series.Values, res.Candidate)}
			s.Failures++
		case Invalid:
			c.Skipped = &junitMessage{Message: res.Reason}
			s.Skipped++
		}
		s.Cases = append(s.Cases, c)
	}
	s.Tests = len(s.Cases)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// GitHub workflow commands: ::error for incomparable reasons, an unusable
// check, failures and suspect metrics; ::warning for each invalid level
// (once per level, not per metric) and for warns; at most 10 annotations
// in all (GitHub shows only the first few per step), then a summary line.
func (r *Report) writeGitHub(w io.Writer) error {
	n := 0
	emit := func(level, title, msg string) {
		if n >= 10 {
			return
		}
		n++
		fmt.Fprintf(w, "::%s title=%s::%s\n", level, escapeGHProperty(title), escapeGHData(msg))
	}
	for _, why := range r.Incomparable {
		emit("error", "hone gate: incomparable", why)
	}
	if r.Verdict == Unusable {
		emit("error", "hone gate: unusable", "no level is valid in both the baseline and the candidate: "+strings.Join(r.InvalidLevels, " | "))
	}
	for _, res := range r.Results {
		switch res.Verdict {
		case Fail:
			emit("error", "hone gate: "+res.Series.Metric+" regressed", res.where()+": "+res.Reason)
		case Suspect:
			emit("error", "hone gate: "+res.Series.Metric+" suspect", res.where()+": "+res.Reason)
		}
	}
	if r.Verdict != Unusable {
		for _, l := range r.InvalidLevels {
			emit("warning", "hone gate: invalid level", l)
		}
	}
	for _, res := range r.Results {
		if res.Verdict == Warn {
			emit("warning", "hone gate: "+res.Series.Metric, res.where()+": "+res.Reason)
		}
	}
	fmt.Fprintln(w, r.header())
	return nil
}

// Workflow-command escaping: data escapes %, CR and LF; a property value
// also escapes : and ,.
func escapeGHData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func escapeGHProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}
