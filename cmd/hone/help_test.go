package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/docs/cli"
)

// TestHelpPages: every page in docs/cli is some command's help, and no
// command's help is left with a {{placeholder}} unfilled.
func TestHelpPages(t *testing.T) {
	root := newRootCmd()
	byPage := map[string]*cobra.Command{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if ph := cli.Placeholders(c.Long + c.Example); len(ph) > 0 {
			t.Errorf("%s: help with unfilled placeholders %q", c.CommandPath(), ph)
		}
		byPage[strings.ReplaceAll(commandName(c), " ", "-")] = c
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, name := range cli.Names() {
		c := byPage[name]
		if c == nil {
			t.Errorf("docs/cli/%s.md: no command hone %s", name, strings.ReplaceAll(name, "-", " "))
			continue
		}
		p, err := cli.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Long == "" || c.Long == "" {
			t.Errorf("docs/cli/%s.md: no description (a ```text block under ## Description)", name)
		}
	}
}

// TestHelpExamples runs the examples of docs/cli, as x/perf's benchstat
// runs its doc's: every hone command of a plain ```sh block, in order, in
// one directory per page that sees the repository's files (so that an
// example may read examples/ or testdata/ and a later one read what an
// earlier one wrote); each must succeed, and a following ```output block
// is what the block's last command prints; so are the blocks of a page's
// "Checked examples" (on the repository's own files, where --help's
// examples name the reader's). Blocks tagged "sh skip: WHY"
// (a GPU, root, a live endpoint, files of the reader's own) are listed,
// not run.
func TestHelpExamples(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range cli.Names() {
		p, err := cli.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			linkRepo(t, repo, dir)
			t.Chdir(dir)
			var last string
			for _, b := range append(p.Examples, p.Checked...) {
				switch {
				case b.Info == "output":
					if got, want := trimLines(last), trimLines(b.Text); got != want {
						t.Errorf("docs/cli/%s.md:%d: output\n%s\nwant\n%s", name, b.Line, got, want)
					}
				case b.Skip() != "":
					t.Logf("docs/cli/%s.md:%d: not run: %s", name, b.Line, b.Skip())
				case b.Info == "sh":
					for _, args := range exampleCommands(t, name, b) {
						last = runExample(t, name, b, args)
					}
				default:
					t.Errorf("docs/cli/%s.md:%d: example block %q: want sh, \"sh skip: WHY\" or output", name, b.Line, b.Info)
				}
			}
		})
	}
}

// linkRepo links each top-level entry of the repository into dir.
func linkRepo(t *testing.T, repo, dir string) {
	ents, err := os.ReadDir(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Symlink(filepath.Join(repo, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// exampleCommands splits an sh block into its commands' arguments after
// "hone": one command a line, "\" continuing it, # comments and blank
// lines skipped. A runnable block holds hone commands only, without shell
// syntax (pipes, redirection, substitution): tag it skip otherwise.
func exampleCommands(t *testing.T, page string, b cli.Block) [][]string {
	var cmds [][]string
	var cur string
	for _, line := range strings.Split(b.Text, "\n") {
		line = strings.TrimSpace(line)
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if more, ok := strings.CutSuffix(line, `\`); ok {
			cur += more + " "
			continue
		}
		cur += line
		if strings.ContainsAny(cur, "|<>$`'\"&;") {
			t.Fatalf("docs/cli/%s.md:%d: %q: shell syntax in a runnable example (tag its block \"sh skip: WHY\")", page, b.Line, cur)
		}
		f := strings.Fields(cur)
		if f[0] != "hone" {
			t.Fatalf("docs/cli/%s.md:%d: %q: not a hone command (tag its block \"sh skip: WHY\")", page, b.Line, cur)
		}
		cmds = append(cmds, f[1:])
		cur = ""
	}
	return cmds
}

// runExample runs hone with args in-process and returns what it printed.
func runExample(t *testing.T, page string, b cli.Block, args []string) string {
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Errorf("docs/cli/%s.md:%d: hone %s: %v (exit %d)\n%s", page, b.Line, strings.Join(args, " "), err, exitCode(err), errOut.String())
	}
	return out.String()
}

// trimLines drops each line's trailing blanks (a table's padding) and the
// trailing newlines.
func trimLines(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n")
}
