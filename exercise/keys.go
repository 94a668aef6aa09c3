package exercise

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hone-llm/hone/optimizer"
)

// Config is a configuration exactly as the caller's driver shapes it: a JSON
// object whose key names hone does not assume.
type Config = map[string]any

// Path addresses a value inside a Config, outermost key first. It is the
// optimizer's: optimizer.Distance, the tie-break toward the baseline that
// both selection rules share, is stated in it.
type Path = optimizer.Path

// Mode values recognised in a baseline config.
const (
	modeColocated     = "colocated"
	modeDisaggregated = "disaggregated"
)

// Knobs are the two settings the exercise policy varies, located in the
// caller's config by value rather than by name.
type Knobs struct {
	Mode  Path // holds "colocated" or "disaggregated"
	Cache Path // holds the boolean prefix-cache flag
}

// FindKnobs locates the deployment-mode and prefix-cache settings of
// baseline: the one string value equal to "colocated" or "disaggregated"
// (case-insensitive), and the one boolean (preferring a key whose name holds
// "cach", as in cache or caching, when there are several). Nested objects
// are searched too. It
// fails, naming what it saw, when either is missing or ambiguous.
func FindKnobs(baseline Config) (Knobs, error) {
	var modes, bools []Path
	optimizer.Walk(baseline, func(p Path, v any) {
		switch x := v.(type) {
		case string:
			if s := strings.ToLower(x); s == modeColocated || s == modeDisaggregated {
				modes = append(modes, p)
			}
		case bool:
			bools = append(bools, p)
		}
	})
	var k Knobs
	switch len(modes) {
	case 0:
		return k, fmt.Errorf("baseline config has no deployment-mode value: want one key whose value is %q or %q; keys seen: %s",
			modeColocated, modeDisaggregated, keyList(baseline))
	case 1:
		k.Mode = modes[0]
	default:
		return k, fmt.Errorf("baseline config has several deployment-mode values (%s): cannot tell which one to change", pathList(modes))
	}
	cache := bools
	if len(bools) > 1 {
		cache = nil
		for _, p := range bools {
			if strings.Contains(strings.ToLower(p[len(p)-1]), "cach") {
				cache = append(cache, p)
			}
		}
	}
	switch len(cache) {
	case 0:
		if len(bools) == 0 {
			return k, fmt.Errorf("baseline config has no boolean prefix-cache flag; keys seen: %s", keyList(baseline))
		}
		return k, fmt.Errorf("baseline config has several booleans (%s) and none names a cache: cannot tell which one is the prefix-cache flag", pathList(bools))
	case 1:
		k.Cache = cache[0]
	default:
		return k, fmt.Errorf("baseline config has several cache-like booleans (%s): cannot tell which one is the prefix-cache flag", pathList(cache))
	}
	return k, nil
}

func keyList(m map[string]any) string {
	var ps []Path
	optimizer.Walk(m, func(p Path, _ any) { ps = append(ps, p) })
	if len(ps) == 0 {
		return "(none)"
	}
	return pathList(ps)
}

func pathList(ps []Path) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// With returns a deep copy of c with the value at p replaced by v. Every
// other key, known or not, is kept as it was.
func With(c Config, p Path, v any) Config {
	out := clone(c)
	m := out
	for _, k := range p[:len(p)-1] {
		m = m[k].(map[string]any)
	}
	m[p[len(p)-1]] = v
	return out
}

func clone(c Config) Config {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("exercise: config is not JSON: %v", err))
	}
	return mustDecode(b)
}

// mustDecode decodes a JSON object keeping numbers as json.Number, so
// integers of any size pass through a config unchanged.
func mustDecode(b []byte) Config {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var out Config
	if err := d.Decode(&out); err != nil {
		panic(fmt.Sprintf("exercise: decode config: %v", err))
	}
	return out
}
