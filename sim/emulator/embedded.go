package emulator

import (
	"embed"
	"fmt"
	"path"
	"strings"
)

// Profiles made from measurements (hone calibrate --steps) and derivations
// (hone profile derive) ship as profile files in profiles/, each holding
// its source; they are built in under their file name without .yaml.
// make validate regenerates and checks them.
//
//go:embed profiles/*.yaml
var profileFiles embed.FS

func init() {
	entries, err := profileFiles.ReadDir("profiles")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		b, err := profileFiles.ReadFile(path.Join("profiles", e.Name()))
		if err != nil {
			panic(err)
		}
		p, err := parseProfileFile(b, e.Name())
		if err != nil {
			panic(fmt.Sprintf("built-in profile %s: %v", e.Name(), err))
		}
		name := strings.TrimSuffix(e.Name(), ".yaml")
		if p.Name != name {
			panic(fmt.Sprintf("built-in profile %s: name %q, want the file's name %q", e.Name(), p.Name, name))
		}
		profiles[name] = p
	}
}
