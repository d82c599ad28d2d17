// Package docs checks that what the documentation names exists in the
// code: the operator's flags, its environment variables, the make targets
// and the condition reasons a reader is told to look for. A rename in the
// code that leaves the docs behind fails here, not in a reader's terminal.
package docs

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/openshell/openshell-operator/internal/operatorenv"
)

// root is the repository (this package is test/docs).
const root = "../.."

// documents are the files a user reads.
func documents(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		out[rel] = string(b)
	}
	return out
}

// lineOf is the 1-based line of byte offset i in s.
func lineOf(s string, i int) int { return strings.Count(s[:i], "\n") + 1 }

// found reports, with its place, every match of re's first group in the
// documents that known refuses, and returns how many it checked.
func found(t *testing.T, re *regexp.Regexp, what string, known func(string) bool) int {
	t.Helper()
	n := 0
	for file, text := range documents(t) {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			n++
			name := text[m[2]:m[3]]
			if !known(name) {
				t.Errorf("%s:%d names %s %q, which the code does not have", file, lineOf(text, m[0]), what, name)
			}
		}
	}
	return n
}

// atLeast fails a check that found fewer names than the docs are known to
// hold: a pattern gone stale would otherwise check nothing.
func atLeast(t *testing.T, what string, n, min int) {
	t.Helper()
	if n < min {
		t.Errorf("checked %d %s, expected at least %d: is the pattern stale?", n, what, min)
	}
}

// TestDocumentedFlagsExist: every operator flag the docs name in inline
// code (`--force-release-after`) is defined by one of the manager's
// commands in cmd/ (the operator, manager relay, gather).
func TestDocumentedFlagsExist(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "cmd", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?:flag|fs)\.\w+\([^"]*"([a-z0-9-]+)"`).FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
	}
	if !defined["force-release-after"] || !defined["drain-timeout"] {
		t.Fatalf("the operator's and the relay's flags not found in cmd/ (found %v): the pattern is stale", defined)
	}
	atLeast(t, "flags", found(t, regexp.MustCompile("`--([a-z0-9-]+)"), "the operator flag", func(n string) bool { return defined[n] }), 10)
}

// TestDocumentedMakeTargetsExist: every `make <target>` the docs name is a
// target of the Makefile.
func TestDocumentedMakeTargetsExist(t *testing.T) {
	f, err := os.Open(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	targets := map[string]bool{}
	target := regexp.MustCompile(`^([a-z][a-z0-9-]*):`)
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if m := target.FindStringSubmatch(sc.Text()); m != nil {
			targets[m[1]] = true
		}
	}
	if !targets["test"] || !targets["demo"] {
		t.Fatalf("no test or demo target found: the pattern is stale")
	}
	atLeast(t, "make targets", found(t, regexp.MustCompile("`make ([a-z][a-z0-9-]*)"), "the make target", func(n string) bool { return targets[n] }), 10)
}

// TestDocumentedEnvironmentExists: every OPENSHELL_* and RELATED_IMAGE_*
// variable the docs name is one the operator reads, or a Makefile
// variable (the pinned wheel's version).
func TestDocumentedEnvironmentExists(t *testing.T) {
	read := map[string]bool{}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Z0-9_]*)\s*[:?]?=`).FindAllStringSubmatch(string(mk), -1) {
		read[m[1]] = true
	}
	for _, kv := range (operatorenv.Releases{}).Env() {
		name, _, _ := strings.Cut(kv, "=")
		read[name] = true
	}
	for _, c := range stringConstants(t, "internal/operatorenv", "cmd") {
		read[c] = true
	}
	atLeast(t, "environment variables", found(t, regexp.MustCompile("`((?:OPENSHELL|RELATED_IMAGE)_[A-Z0-9_]+)`"), "the environment variable", func(n string) bool { return read[n] }), 5)
}

// TestDocumentedReasonsExist: every condition reason the docs tell a
// reader to look for (a table's Reason column, or "reason `X`") is one the
// code sets.
func TestDocumentedReasonsExist(t *testing.T) {
	known := map[string]bool{}
	for _, c := range stringConstants(t, "api", "internal", "controllers") {
		known[c] = true
	}
	isReason := func(n string) bool { return known[n] }
	n := found(t, regexp.MustCompile("(?i)\\breasons? `([A-Z][A-Za-z]+)`"), "the reason", isReason)
	for file, text := range documents(t) {
		for _, r := range reasonCells(text) {
			n++
			if !isReason(r.name) {
				t.Errorf("%s:%d lists reason %q, which the code does not have", file, r.line, r.name)
			}
		}
	}
	atLeast(t, "reasons", n, 30)
}

type cell struct {
	name string
	line int
}

// reasonCells are the inline-code names in the column headed "Reason" of
// every Markdown table (a condition written `Type=False` counts as Type).
func reasonCells(text string) []cell {
	var out []cell
	col := -1
	code := regexp.MustCompile("`([A-Z][A-Za-z]+)(?:=[A-Za-z]+)?`")
	for i, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			col = -1
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if col < 0 {
			col = slices.IndexFunc(cells, func(c string) bool { return strings.EqualFold(strings.TrimSpace(c), "reason") })
			if col < 0 {
				col = -2 // a table without a Reason column: skip it
			}
			continue
		}
		if col < 0 || col >= len(cells) || strings.HasPrefix(strings.TrimSpace(cells[col]), "---") {
			continue
		}
		for _, m := range code.FindAllStringSubmatch(cells[col], -1) {
			out = append(out, cell{m[1], i + 1})
		}
	}
	return out
}

// stringConstants are the values of every string constant declared in the
// non-test Go files under dirs.
func stringConstants(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				g, ok := n.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					return true
				}
				for _, s := range g.Specs {
					for _, v := range s.(*ast.ValueSpec).Values {
						if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if s, err := strconv.Unquote(lit.Value); err == nil {
								out = append(out, s)
							}
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
