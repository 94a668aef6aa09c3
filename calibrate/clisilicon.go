package calibrate

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/hone-llm/hone/internal/jsonout"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/sim/emulator"
)

// SiliconOptions is what hone validate silicon takes: the flags, by name.
type SiliconOptions struct {
	File              string  // FILE.csv: the silicon measurements
	Profiles          string  // --profiles: a folder of profile .yaml files besides the built-ins
	RequestsPerClient int     // --requests-per-client
	LengthRatio       float64 // --length-ratio
	KVCacheDType      string  // --kv-cache-dtype
	By                string  // --by: comma-separated SiliconByKeys
	Format            string  // -o: table or json (checked by the caller)
	// Out gets the result.
	Out io.Writer
}

// ValidateSilicon is hone validate silicon: it predicts every measured
// deployment of o.File (PredictSilicon) on the built-in profiles and those
// of o.Profiles, and writes the errors in o.Format. Bad input is a
// usage.Error.
func ValidateSilicon(o SiliconOptions) error {
	if o.RequestsPerClient < 1 {
		return usage.Errorf("--requests-per-client: want at least 1, got %d", o.RequestsPerClient)
	}
	if !(o.LengthRatio >= 0 && o.LengthRatio <= 1) {
		return usage.Errorf("--length-ratio: want a fraction in (0, 1], or 0 for fixed lengths, got %v", o.LengthRatio)
	}
	if _, ok := emulator.KVCacheDTypes[o.KVCacheDType]; !ok {
		return usage.Errorf("--kv-cache-dtype %q: want auto, bfloat16, float16, fp8, fp8_e4m3 or fp8_e5m2", o.KVCacheDType)
	}
	by, err := ParseSiliconBy(o.By)
	if err != nil {
		return usage.Errorf("%v", err)
	}
	rows, err := ReadSilicon(o.File)
	if err != nil {
		return usage.Errorf("%v", err)
	}
	profs, err := validationProfiles(o.Profiles)
	if err != nil {
		return err
	}
	res := PredictSilicon(rows, SiliconConfig{Profiles: profs, RequestsPerClient: o.RequestsPerClient, LengthRatio: o.LengthRatio,
		KVCacheDType: o.KVCacheDType})
	if len(by) > 0 {
		res.Breakdown = GroupSilicon(res.Rows, by)
	}
	if o.Format == "json" {
		return jsonout.Write(o.Out, res)
	}
	writeSiliconTable(o.Out, res)
	if len(by) > 0 {
		writeSiliconGroups(o.Out, by, res.Breakdown)
	}
	return nil
}

// validationProfiles are the built-in profiles and those in dir.
func validationProfiles(dir string) ([]*emulator.Profile, error) {
	out := emulator.BuiltinProfiles()
	if dir == "" {
		return out, nil
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, usage.Errorf("--profiles %s: want a folder of profile .yaml files", dir)
	}
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, usage.Errorf("--profiles %s: no .yaml profile files in it", dir)
	}
	slices.Sort(files)
	for _, f := range files {
		p, err := emulator.LoadProfileFile(f)
		if err != nil {
			return nil, usage.Errorf("--profiles: %v", err)
		}
		out = append(out, p)
	}
	return out, nil
}

func writeSiliconTable(w io.Writer, res *SiliconResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "line\tmodel\tprecision\ttp\tisl\tosl\tclients\tttft_meas\tttft_pred\tttft_ape%\ttpot_meas\ttpot_pred\ttpot_ape%\tprofile\t")
	for _, r := range res.Rows {
		tp := siliconKey(r, "tp")
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.1f\t%s (%s)\t\n", r.Line, r.Model, orDash(r.Precision), tp, r.ISL, r.OSL,
			r.Concurrency, r.TTFT.Measured, r.TTFT.Predicted, r.TTFT.APE, r.TPOT.Measured, r.TPOT.Predicted, r.TPOT.APE, r.Profile, r.ProfileSource)
	}
	tw.Flush()
	reasons := map[string]int{}
	var order []string
	for _, s := range res.Skipped {
		if reasons[s.Reason] == 0 {
			order = append(order, s.Reason)
		}
		reasons[s.Reason]++
	}
	for _, r := range order {
		fmt.Fprintf(w, "skipped %d: %s\n", reasons[r], r)
	}
	s := res.Summary
	fmt.Fprintf(w, "predicted %d of %d rows; TTFT APE median %.1f%%, p90 %.1f%%; TPOT APE median %.1f%%, p90 %.1f%%\n",
		s.Predicted, s.Rows, s.TTFT.MedianAPE, s.TTFT.P90APE, s.TPOT.MedianAPE, s.TPOT.P90APE)
	fmt.Fprintln(w, "predicted: hone predict in virtual time on each row's profile; measured: the file's rows (real vLLM on GPUs)")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
