package schema

// Kind says what made a record's numbers. A record's kind is set when it
// is made and never changed: emulated and device numbers stay in separate
// columns everywhere.
type Kind string

// Kinds of records.
const (
	KindEmulated Kind = "emulated" // hone's engine emulator (hone sim serve)
	KindDevice   Kind = "device"   // real vLLM on GPUs: the endpoint answered GET /version as vLLM does
	// KindUnverified: the endpoint gave no evidence of what it is (no
	// GET /version, or an answer that is neither vLLM's nor the
	// emulator's). Reports never show such numbers as device numbers.
	KindUnverified Kind = "unverified"
	// KindPredicted: nothing was measured. The emulator's engine ran in
	// virtual time (package predict) with a cost profile: a prediction,
	// to be compared with measurements, never mixed with them.
	KindPredicted Kind = "predicted"
	// KindSimulationOnly: the seed workload's queueing model (hone sim):
	// deterministic figures, never a record's.
	KindSimulationOnly Kind = "simulation_only"
)

// Kinds lists every kind, in the order above.
func Kinds() []Kind {
	return []Kind{KindEmulated, KindDevice, KindUnverified, KindPredicted, KindSimulationOnly}
}

// RecordKinds lists the kinds a run record may have.
func RecordKinds() []Kind { return []Kind{KindEmulated, KindDevice, KindUnverified, KindPredicted} }
