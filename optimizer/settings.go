package optimizer

import (
	"encoding/json"
	"sort"
	"strings"
)

// Path addresses a setting inside a configuration's JSON object, outermost
// key first.
type Path []string

func (p Path) String() string { return strings.Join(p, ".") }

// Walk calls fn for every setting of m: every value that is not itself an
// object, nested objects searched, keys in sorted order at each depth.
func Walk(m map[string]any, fn func(Path, any)) { walk(m, nil, fn) }

func walk(m map[string]any, prefix Path, fn func(Path, any)) {
	for _, k := range sortedKeys(m) {
		p := append(append(Path(nil), prefix...), k)
		if sub, ok := m[k].(map[string]any); ok {
			walk(sub, p, fn)
			continue
		}
		fn(p, m[k])
	}
}

// Get returns the value at p in m, if any.
func Get(m map[string]any, p Path) (any, bool) {
	var cur any = m
	for _, k := range p {
		o, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = o[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Distance counts the settings in which c differs from base, compared as
// JSON: the tie-break toward the baseline. It is one rule in both selection
// rules, the CPU exercise's (over its opaque configs) and the live loop's
// (over the JSON form of deployment specs), so it has one home here.
func Distance(base, c map[string]any) int {
	n := 0
	seen := map[string]bool{}
	Walk(base, func(p Path, v any) {
		seen[p.String()] = true
		if w, ok := Get(c, p); !ok || !jsonEqual(v, w) {
			n++
		}
	})
	Walk(c, func(p Path, _ any) {
		if !seen[p.String()] {
			n++
		}
	})
	return n
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
