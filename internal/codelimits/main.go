// Command codelimits checks the size limits hone keeps on its production
// code (issue 45): no function body over 100 lines, and no cobra command
// builder in cmd/hone (a func named new…Cmd, with the func literals inside
// it) over 60 lines, so that flag parsing stays in cmd/hone and logic in the
// packages. Test files and generated files ("Code generated … DO NOT EDIT.")
// are exempt. Cyclomatic complexity is gocyclo's to check (make lint runs
// both).
//
// Usage: go run ./internal/codelimits [DIR]   (default: the current directory)
//
// It prints one line per function over its limit and exits 1 when there is
// any, 2 when a file cannot be read or parsed.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const (
	maxBodyLines    = 100 // any function or method
	maxBuilderLines = 60  // cmd/hone's command builders and their literals
)

// finding is one function over its limit.
type finding struct {
	pos   token.Position
	name  string
	lines int
	limit int
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	found, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codelimits:", err)
		os.Exit(2)
	}
	for _, f := range found {
		fmt.Printf("%s: %s: %d lines (limit %d)\n", f.pos, f.name, f.lines, f.limit)
	}
	if len(found) > 0 {
		os.Exit(1)
	}
}

// check walks root's non-test, non-generated Go files and returns every
// function over its limit, in file order.
func check(root string) ([]finding, error) {
	fset := token.NewFileSet()
	var found []finding
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		builders := filepath.ToSlash(filepath.Dir(rel)) == "cmd/hone"
		found = append(found, checkFile(fset, f, builders)...)
		return nil
	})
	sort.SliceStable(found, func(i, j int) bool {
		if found[i].pos.Filename != found[j].pos.Filename {
			return found[i].pos.Filename < found[j].pos.Filename
		}
		return found[i].pos.Line < found[j].pos.Line
	})
	return found, err
}

// checkFile returns f's functions over their limits; builders applies
// cmd/hone's builder limit.
func checkFile(fset *token.FileSet, f *ast.File, builders bool) []finding {
	var found []finding
	measure := func(name string, body *ast.BlockStmt, limit int) {
		if body == nil {
			return
		}
		lines := fset.Position(body.End()).Line - fset.Position(body.Pos()).Line
		if lines > limit {
			found = append(found, finding{fset.Position(body.Pos()), name, lines, limit})
		}
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		limit := maxBodyLines
		if builders && isBuilder(fn.Name.Name) {
			limit = maxBuilderLines
		}
		measure(funcName(fn), fn.Body, limit)
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if lit, ok := n.(*ast.FuncLit); ok {
				measure("func literal in "+funcName(fn), lit.Body, limit)
			}
			return true
		})
	}
	return found
}

// isBuilder reports whether name is a cobra command builder's (new…Cmd).
func isBuilder(name string) bool {
	return strings.HasPrefix(name, "new") && strings.HasSuffix(name, "Cmd")
}

// funcName is fn's name, with its receiver's type for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if idx, ok := t.(*ast.IndexExpr); ok {
		t = idx.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return "(" + id.Name + ")." + fn.Name.Name
	}
	return fn.Name.Name
}
