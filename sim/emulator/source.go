package emulator

// How a profile was made: ProfileSource.Kind. Every record, prediction and
// report names the profile and this kind beside its figures.
const (
	SourceFittedSteps  = "fitted to measured steps"
	SourceDerivedTable = "derived from per-operation tables"
	SourceDerivedRoof  = "derived from roofline"
	SourceCalibrated   = "calibrated from records"
	SourceHandMade     = "hand-made"
)

// ProfileSource is a profile's provenance: how it was made, from which
// data, and how well it fits that data.
type ProfileSource struct {
	Kind string    `yaml:"kind"`
	Data []DataRef `yaml:"data,omitempty"`
	// Method says how the figures were obtained (the fit's loss, its
	// robustness to mis-booked steps, how standard errors were computed).
	Method string `yaml:"method,omitempty"`
	// StdErr is each fitted coefficient's standard error, by its key.
	StdErr map[string]float64 `yaml:"std_err,omitempty"`
	// Residuals are the fit's errors on its own data, per data set and
	// phase; Checks are predictions of data not used to make the profile.
	Residuals []PhaseError `yaml:"residuals,omitempty"`
	Checks    []PhaseError `yaml:"checks,omitempty"`
	Note      string       `yaml:"note,omitempty"`
}

// DataRef names one piece of data a profile was made from.
type DataRef struct {
	Repository string `yaml:"repository,omitempty"`
	Commit     string `yaml:"commit,omitempty"`
	Path       string `yaml:"path"`
	License    string `yaml:"license,omitempty"`
	What       string `yaml:"what,omitempty"`
}

// PhaseError is the absolute percentage error of predicted step latencies
// against measured ones, for the steps of one phase of one data set.
type PhaseError struct {
	Data      string  `yaml:"data"`
	TP        int     `yaml:"tp"`
	Phase     string  `yaml:"phase"` // context, decode, mixed or all
	Steps     int     `yaml:"steps"`
	MedianAPE float64 `yaml:"median_ape"` // percent
	P90APE    float64 `yaml:"p90_ape"`    // percent
}

// SourceKind is the profile's source kind, SourceHandMade when unstated.
func (p *Profile) SourceKind() string {
	if p.Source == nil || p.Source.Kind == "" {
		return SourceHandMade
	}
	return p.Source.Kind
}

func (s *ProfileSource) clone() *ProfileSource {
	c := *s
	c.Data = append([]DataRef(nil), s.Data...)
	c.Residuals = append([]PhaseError(nil), s.Residuals...)
	c.Checks = append([]PhaseError(nil), s.Checks...)
	if s.StdErr != nil {
		c.StdErr = make(map[string]float64, len(s.StdErr))
		for k, v := range s.StdErr {
			c.StdErr[k] = v
		}
	}
	return &c
}
