package diagnose

// KernelOnly keeps the attributions split from kernel evidence
// (SplitBy "kernel") and says how many it left out.
func KernelOnly(atts []Attribution) ([]Attribution, int) {
	var out []Attribution
	for _, a := range atts {
		if a.SplitBy == "kernel" {
			out = append(out, a)
		}
	}
	return out, len(atts) - len(out)
}
