package contract_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the longest a product function may be (issue 24): past it a function no longer reads as
// its own outline, and it is split into named steps.
const maxFuncLines = 100

// longFuncAllowed lists functions known to be over the limit and being rewritten elsewhere; each entry
// says why. The list only shrinks.
var longFuncAllowed = map[string]string{}

// notProduct holds the top-level directories whose code is not product code: benchmarks, helper programs
// for the scripts, and the integration/e2e test trees.
var notProduct = []string{"bench", "scripts", "test"}

// TestNoLongProductFunctions: no function or method in the module's non-test Go files outside bench/,
// scripts/ and test/ spans more than maxFuncLines lines, counted from its func keyword to its closing brace.
func TestNoLongProductFunctions(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var offenders []string
	seenAllowed := map[string]bool{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || slices.Contains(notProduct, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if lines <= maxFuncLines {
				continue
			}
			key := rel + " " + funcName(fn)
			if _, ok := longFuncAllowed[key]; ok {
				seenAllowed[key] = true
				continue
			}
			offenders = append(offenders, fmt.Sprintf("%d lines: %s", lines, key))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(offenders) > 0 {
		slices.Sort(offenders)
		t.Errorf("product functions over %d lines (split them into named steps):\n\t%s", maxFuncLines, strings.Join(offenders, "\n\t"))
	}
	for key := range longFuncAllowed {
		if !seenAllowed[key] {
			t.Errorf("%s is no longer over %d lines: remove it from longFuncAllowed", key, maxFuncLines)
		}
	}
}

// funcName is a function's name, or Type.Method for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
