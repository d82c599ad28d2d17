package arch

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openshell/openshell-operator/test/framework"
)

// TestKwokBuildsOnTheDemosDependencies: `make demo` builds the demo, then
// kwok, on two cores from empty caches (issue #30). Go compiles a package
// once for both only when its module is at the same version in both builds
// (and so is everything it imports), so hack/tools/kwok pins the main
// module's versions of what the two share. A bump of go.mod that leaves it
// behind would silently make the first run slower.
func TestKwokBuildsOnTheDemosDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("lists two module graphs")
	}
	root := framework.RepoRoot()
	demo := depModules(t, root, "./test/demo")
	kwok := depModules(t, filepath.Join(root, "hack", "tools", "kwok"), "sigs.k8s.io/kwok/cmd/kwok")
	for pkg, want := range demo {
		if got, ok := kwok[pkg]; ok && got != want {
			t.Errorf("%s: the demo builds it from %s, kwok from %s: require %s in hack/tools/kwok/go.mod (go get %s there, then go mod tidy)",
				pkg, want, got, want, want)
		}
	}
}

// depModules maps each non-standard package main imports, directly or
// not, to its module@version, as built from dir.
func depModules(t *testing.T, dir, main string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}@{{.Version}}{{end}}", main)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", dir, err, stderr.String())
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		pkg, mod, _ := strings.Cut(sc.Text(), " ")
		if mod != "" && !strings.HasSuffix(mod, "@") { // a main module has no version
			m[pkg] = mod
		}
	}
	return m
}
