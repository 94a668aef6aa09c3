package schema

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A verdict code or a kind is stated once, here: no production file
// outside package schema spells one as a string literal (it names the
// constant instead), so a renamed code or kind cannot leave a stale copy.
func TestNoCodeOrKindLiterals(t *testing.T) {
	values := map[string]string{}
	for _, c := range Codes() {
		values[string(c)] = "verdict code"
	}
	for _, k := range Kinds() {
		values[string(k)] = "kind"
	}
	// Words that only look like a value: the prompt generator's
	// vocabulary (changing it would change every prompt).
	exempt := map[string]bool{"replay/tokens.go device": true}
	root := ".."
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules", "vendor":
				return filepath.SkipDir
			}
			if rel, _ := filepath.Rel(root, path); rel == "schema" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			rel, _ := filepath.Rel(root, path)
			if what, ok := values[s]; ok && !exempt[filepath.ToSlash(rel)+" "+s] {
				t.Errorf("%s: the %s %q as a literal: use package schema's constant", fset.Position(lit.Pos()), what, s)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
