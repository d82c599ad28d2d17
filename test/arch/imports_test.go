// Package arch checks the shape of the code base that the compiler does not:
// dependencies point down (cmd → operator → controllers → internal), so
// that a reconciler can be read, tested and changed without its siblings.
package arch

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/openshell/openshell-operator/test/framework"
)

const module = "github.com/openshell/openshell-operator/"

type pkg struct {
	Name       string
	ImportPath string
	Imports    []string
}

// packages lists the module's packages (not tests) with their imports.
func packages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=Name,ImportPath,Imports", "./...")
	cmd.Dir = framework.RepoRoot()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	return pkgs
}

// controllerOf returns the controller package an import path belongs to
// ("controllers/sandbox"), or "" when it is not one (shared helpers under
// controllers/internal are not controllers).
func controllerOf(path string) string {
	rest, ok := strings.CutPrefix(path, module+"controllers/")
	if !ok || strings.HasPrefix(rest, "internal/") {
		return ""
	}
	return "controllers/" + strings.SplitN(rest, "/", 2)[0]
}

func TestDependenciesPointDown(t *testing.T) {
	pkgs := packages(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.ImportPath, module)
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			irel := strings.TrimPrefix(imp, module)
			switch {
			case strings.HasPrefix(rel, "internal/") && (strings.HasPrefix(irel, "controllers") || irel == "operator"):
				t.Errorf("%s imports %s: internal/ packages serve the controllers and the root, never the reverse", rel, irel)
			case strings.HasPrefix(rel, "controllers/") && irel == "operator":
				t.Errorf("%s imports the composition root %s", rel, irel)
			case controllerOf(p.ImportPath) != "" && controllerOf(imp) != "" && controllerOf(p.ImportPath) != controllerOf(imp):
				t.Errorf("%s imports its sibling %s: share through internal/ instead", rel, irel)
			case !strings.HasPrefix(rel, "test/") && strings.HasPrefix(irel, "test/"):
				t.Errorf("%s imports test support %s", rel, irel)
			}
		}
	}
}

// TestInternalPackageNamesAreUnique: a name used twice under internal/
// forces an alias at every call site that imports both.
func TestInternalPackageNamesAreUnique(t *testing.T) {
	seen := map[string]string{}
	for _, p := range packages(t) {
		if !strings.HasPrefix(p.ImportPath, module+"internal/") || strings.Contains(p.ImportPath, "/pb/") {
			continue
		}
		if other, ok := seen[p.Name]; ok {
			t.Errorf("package name %s is used by %s and %s", p.Name, other, p.ImportPath)
		}
		seen[p.Name] = p.ImportPath
	}
}

// TestCheckSeesViolations keeps the check honest: it flags the edges it is
// meant to flag.
func TestCheckSeesViolations(t *testing.T) {
	if controllerOf(module+"controllers/sandbox") != "controllers/sandbox" || controllerOf(module+"controllers/internal/enqueue") != "" ||
		controllerOf(module+"internal/index") != "" {
		t.Fatal("controllerOf misclassifies packages")
	}
}
