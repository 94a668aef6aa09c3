package engine

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Version is an engine release as the engine prints it, read the way PEP
// 440 orders releases: 0.11.1, 0.10.1.1, 0.8.5.post1, 0.17.0rc1,
// 0.16.1.dev42+g1a2b3c4 or 0.11.0+cu128. Versioned engines' release
// tables (VersionTable) are written in it.
type Version struct {
	Major, Minor, Patch, Micro int
	// Pre marks a pre-release or development build (rc, a, b, dev). It
	// sorts below the release of the same number, as in PEP 440, so a
	// development build of the next release is never assumed to have that
	// release's features.
	Pre bool
	// Post marks a post-release (.post1): above the release it follows.
	Post bool
	Raw  string
}

// versionRE is a release: the numbers, a PEP 440 suffix and a local part
// (+...); group 1 is what may precede them.
var versionRE = regexp.MustCompile(`^(v|[a-z][a-z0-9_-]*\s+)?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?([0-9A-Za-z.\-_]*)(\+[0-9A-Za-z.\-_]*)?$`)

// suffixRE reads what follows the release numbers (the local +... part
// aside) as PEP 440 segments: a pre-release, a post-release, a dev build.
var suffixRE = regexp.MustCompile(`^(?i)([.\-_]?(?:a|alpha|b|beta|c|rc|pre|preview)\d*)?([.\-_]?post\d*)?([.\-_]?dev\d*)?$`)

// ParseVersion reads one version string, optionally after a "v".
func ParseVersion(s string) (Version, error) { return parseVersion(s, "", "") }

// parseVersion reads one version string as engine program prints it: the
// numbers, after "v" or, when program is set, after program and white
// space ("vllm 0.12.0"). title names the engine in the error.
func parseVersion(s, program, title string) (Version, error) {
	s = strings.TrimSpace(s)
	m := versionRE.FindStringSubmatch(s)
	if m != nil && m[1] != "" && m[1] != "v" && (program == "" || strings.TrimSpace(m[1]) != program) {
		m = nil
	}
	if m == nil {
		if title == "" {
			return Version{}, fmt.Errorf("%q is not a version", s)
		}
		return Version{}, fmt.Errorf("%q is not a %s version", s, title)
	}
	n := func(x string) int {
		v, _ := strconv.Atoi(x)
		return v
	}
	raw := s
	if program != "" {
		raw = strings.TrimPrefix(raw, program+" ")
	}
	v := Version{Major: n(m[2]), Minor: n(m[3]), Patch: n(m[4]), Micro: n(m[5]), Raw: strings.TrimPrefix(raw, "v")}
	seg := suffixRE.FindStringSubmatch(m[6])
	if seg == nil {
		return Version{}, fmt.Errorf("%q: unknown version suffix %q", s, m[6])
	}
	v.Pre = seg[1] != "" || seg[3] != ""
	v.Post = !v.Pre && seg[2] != ""
	return v, nil
}

// MustVersion parses a version a table itself spells; it panics on a typo.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

func (v Version) String() string { return v.Raw }

// Compare is -1, 0 or +1 as v is an earlier, the same or a later release
// than w.
func (v Version) Compare(w Version) int {
	for _, d := range [][2]int{{v.Major, w.Major}, {v.Minor, w.Minor}, {v.Patch, w.Patch}, {v.Micro, w.Micro}} {
		if d[0] != d[1] {
			if d[0] < d[1] {
				return -1
			}
			return 1
		}
	}
	rank := func(x Version) int {
		switch {
		case x.Pre:
			return -1
		case x.Post:
			return 1
		}
		return 0
	}
	return rank(v) - rank(w)
}

// AtLeast reports whether v is release w or later.
func (v Version) AtLeast(w Version) bool { return v.Compare(w) >= 0 }

// Has reports whether release v has the table's feature id: it is Since
// or later, and older than Removed when that is set. It panics on an id
// the table lacks.
func (t *VersionTable) Has(v Version, id string) bool {
	f, ok := t.Feature(id)
	if !ok {
		panic("engine: no feature " + id + " in the version table")
	}
	return f.In(v)
}

// In reports whether release v has f.
func (f Feature) In(v Version) bool {
	return v.AtLeast(MustVersion(f.Since)) && (f.Removed == "" || !v.AtLeast(MustVersion(f.Removed)))
}

// Since is the first release with feature id.
func (t *VersionTable) Since(id string) string {
	f, _ := t.Feature(id)
	return f.Since
}

// Span says which releases have feature id: "first in 0.17.0", or
// "first in 0.17.0, removed in 0.30.0".
func (t *VersionTable) Span(id string) string {
	f, _ := t.Feature(id)
	s := "first in " + f.Since
	if f.Removed != "" {
		s += ", removed in " + f.Removed
	}
	return s
}

// AcceptsKVCacheDType reports whether release v takes KV cache data type
// d: those with a row (FeatureKVCacheDTypePrefix+d) from its Since on,
// the others always.
func (t *VersionTable) AcceptsKVCacheDType(v Version, d string) bool {
	if _, gated := t.Feature(FeatureKVCacheDTypePrefix + d); gated {
		return t.Has(v, FeatureKVCacheDTypePrefix+d)
	}
	return true
}

// Newest is the newest release the table names: its Floor or a row's
// Since.
func (t *VersionTable) Newest() Version {
	best := MustVersion(t.Floor)
	for _, f := range t.Features {
		if v := MustVersion(f.Since); v.AtLeast(best) {
			best = v
		}
	}
	return best
}
