package surface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// limit is the most exported names the public packages may have together:
// the count they have now, so that it only goes down.
const limit = 220

// packages are the public packages whose names are counted, relative to the
// module root.
var packages = []string{".", "pglease", "pgguard", "claim", "lockless", "advisory", "payouts", "migrations"}

// TestSurface counts exported funcs, methods of exported types, types, vars
// and consts (not struct fields) in the packages' non-test files.
func TestSurface(t *testing.T) {
	total := 0
	for _, dir := range packages {
		names, err := exported(filepath.Join("..", "..", dir))
		if err != nil {
			t.Fatal(err)
		}
		total += len(names)
		t.Logf("%-10s %3d  %s", dir, len(names), strings.Join(names, " "))
	}
	t.Logf("total      %3d (limit %d)", total, limit)
	if total > limit {
		t.Errorf("the public packages export %d names, more than %d: fold the new name into an existing one, or raise the limit with a reason", total, limit)
	}
}

// exported lists the exported names declared in dir's non-test Go files.
func exported(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	fset := token.NewFileSet()
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		names = append(names, declared(f)...)
	}
	sort.Strings(names)
	return names, nil
}

// declared lists a file's exported top-level names, and the exported methods
// of its exported types as Type.Method.
func declared(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				names = append(names, d.Name.Name)
				continue
			}
			if recv := receiver(d.Recv.List[0].Type); ast.IsExported(recv) {
				names = append(names, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						names = append(names, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	return names
}

// receiver is the type name of a method's receiver: T, *T, T[P] or *T[P].
func receiver(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
