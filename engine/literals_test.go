package engine_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hone-llm/hone/engine"
)

// TestNoEngineNameLiterals fails when an engine's name (engine.VLLM,
// engine.Emulator) is a Go string literal outside package engine in
// non-test code: the name is the registry's key, and code that spells it
// branches on an engine instead of asking the registry. Struct tags are
// not literals here, nor a spec field path (badField's first argument:
// the spec's "emulator" section is named like the engine). Prose that
// mentions vLLM is fine: only exact names count.
func TestNoEngineNameLiterals(t *testing.T) {
	names := []string{engine.VLLM, engine.Emulator}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "engine" || rel == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, hit := range nameLiterals(t, path, names) {
			found = append(found, filepath.ToSlash(rel)+": "+hit)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: an engine name as a string literal; use package engine (its constants, Lookup, Facts)", f)
	}
}

// nameLiterals are the string literals in file path whose value is one of
// names, quoted, struct tags and badField's first
// argument aside.
func nameLiterals(t *testing.T, path string, names []string) []string {
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	skip := map[*ast.BasicLit]bool{}
	var hits []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if n.Tag != nil {
				skip[n.Tag] = true
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "badField" && len(n.Args) > 0 {
				if lit, ok := n.Args[0].(*ast.BasicLit); ok {
					skip[lit] = true
				}
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING || skip[n] {
				return true
			}
			if v, err := strconv.Unquote(n.Value); err == nil && slices.Contains(names, v) {
				hits = append(hits, strconv.Quote(v))
			}
		}
		return true
	})
	return hits
}
