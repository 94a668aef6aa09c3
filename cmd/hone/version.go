package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set by the Makefile through -ldflags "-X main.version=... -X main.commit=...".
var (
	version = ""
	commit  = ""
)

func init() { subcommands = append(subcommands, newVersionCmd) }

// buildVersion returns hone's version and git commit, from ldflags when the
// Makefile built the binary, else from the module's build info.
func buildVersion() (ver, rev string) {
	ver, rev = version, commit
	if info, ok := debug.ReadBuildInfo(); ok {
		if ver == "" && info.Main.Version != "" {
			ver = info.Main.Version
		}
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev = s.Value
				}
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && rev != "" && commit == "" {
			rev += "-dirty"
		}
	}
	if ver == "" {
		ver = "(devel)"
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev
}

// versionString is what `hone version` and `hone --version` print after
// "hone ": the version and the commit.
func versionString() string {
	v, r := buildVersion()
	return fmt.Sprintf("%s (commit %s)", v, r)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print hone's version and git commit",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintf(c.OutOrStdout(), "hone %s\n", versionString())
			return nil
		},
	}
}
