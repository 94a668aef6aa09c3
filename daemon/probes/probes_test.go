package probes

import "testing"

// Every family has a unique name, a known kind, hooks and what it needs;
// exactly procs is required, and every other one says what is lost
// without it.
func TestFamilies(t *testing.T) {
	seen := map[string]bool{}
	var required []string
	for _, f := range All {
		if seen[f.Name] {
			t.Errorf("family %s listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.Kind != RawTracepoint && f.Kind != BTFTracepoint && f.Kind != Uprobe || len(f.Hooks) == 0 || f.Needs == "" || f.Lost == "" {
			t.Errorf("family %+v: want a kind, hooks, what it needs and what is lost without it", f)
		}
		if f.Required {
			required = append(required, f.Name)
		}
		if g, ok := Lookup(f.Name); !ok || g.Name != f.Name {
			t.Errorf("Lookup(%s) = %+v, %v", f.Name, g, ok)
		}
	}
	if len(required) != 1 || required[0] != Procs {
		t.Errorf("required families %v, want [procs]", required)
	}
	if len(All) != 5 {
		t.Errorf("%d families, want procs, syscalls, sched, sockets and cuda", len(All))
	}
	if _, ok := Lookup("nope"); ok {
		t.Error("Lookup(nope) found a family")
	}
}
