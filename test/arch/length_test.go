package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openshell/openshell-operator/test/framework"
)

// maxReconcileLines bounds every function under controllers/: a reconciler
// reads top to bottom as observe → validate → render → apply → report, and
// a longer function is a step that wants a name of its own.
const maxReconcileLines = 60

func TestReconcileFunctionsAreShort(t *testing.T) {
	root := filepath.Join(framework.RepoRoot(), "controllers")
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			seen++
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxReconcileLines {
				rel, _ := filepath.Rel(framework.RepoRoot(), p)
				t.Errorf("%s: %s is %d lines (at most %d): split it into named steps", rel, fd.Name.Name, n, maxReconcileLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("found only %d functions under controllers/", seen)
	}
}
