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

// paragraphs splits each document into paragraphs (blank-line separated;
// each table row is a paragraph of its own, after its table's header row),
// with the line each starts on.
func paragraphs(t *testing.T) []cell {
	t.Helper()
	var out []cell
	for file, text := range documents(t) {
		var cur []string
		start, header := 0, ""
		flush := func() {
			if len(cur) > 0 {
				out = append(out, cell{name: file + "\x00" + strings.Join(cur, "\n"), line: start})
			}
			cur = nil
		}
		for i, line := range strings.Split(text, "\n") {
			switch {
			case strings.TrimSpace(line) == "":
				flush()
				header = ""
			case strings.HasPrefix(strings.TrimSpace(line), "|"):
				// A row is read with its table's header, which may name
				// what the column is about.
				flush()
				if header == "" {
					header = line
				}
				out = append(out, cell{name: file + "\x00" + header + "\n" + line, line: i + 1})
			default:
				header = ""
				if len(cur) == 0 {
					start = i + 1
				}
				cur = append(cur, line)
			}
		}
		flush()
	}
	return out
}

// TestImagePinningClaimsHold: the docs may call the bundle's relatedImages
// digest-pinned only while every one of them is.
func TestImagePinningClaimsHold(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "config", "manifests", "images.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?m)^\s*(?:operator|RELATED_IMAGE_[A-Z0-9_]+):\s*(\S+)`).FindAllStringSubmatch(string(b), -1)
	if len(refs) < 5 {
		t.Fatalf("found %d images in config/manifests/images.yaml: the pattern is stale", len(refs))
	}
	var tags []string
	for _, r := range refs {
		if !strings.Contains(r[1], "@sha256:") {
			tags = append(tags, r[1])
		}
	}
	if len(tags) == 0 {
		return
	}
	claim := regexp.MustCompile("(?i)digest[- ]pinned[`\\s]*relatedImages|relatedImages`?,? (?:all )?(?:pinned )?by digest")
	for _, p := range paragraphs(t) {
		file, text, _ := strings.Cut(p.name, "\x00")
		if claim.MatchString(text) {
			t.Errorf("%s:%d says the relatedImages are digest-pinned, but %d of %d are tags (%s)", file, p.line, len(tags), len(refs), strings.Join(tags, ", "))
		}
	}
}

// TestSCCClaimsNameTheirLine: the custom SCC concerns only gateways pinned
// to 0.0.111 (the default 0.1 line runs under restricted-v2), so every
// paragraph that tells a reader about it says which line it is for.
func TestSCCClaimsNameTheirLine(t *testing.T) {
	scc := regexp.MustCompile("openshell-sandbox-sidecar|apply -k config/scc|from `config/scc`|SCCMissing|SCCModified|sandbox SCC|narrow SCC|sidecar SCC")
	line := regexp.MustCompile(`0\.0\.111|0\.0\.x|0\.0 line|pinned|sidecar (?:supervisor|topology)|sidecar-topology`)
	n := 0
	for _, p := range paragraphs(t) {
		file, text, _ := strings.Cut(p.name, "\x00")
		if file == "docs/conditions.md" || !scc.MatchString(text) {
			continue // conditions.md is generated from the reasons' own doc comments
		}
		n++
		if !line.MatchString(text) {
			t.Errorf("%s:%d tells about the custom SCC without saying it is only for gateways pinned to 0.0.111 (the default line needs none):\n%s", file, p.line, text)
		}
	}
	atLeast(t, "SCC paragraphs", n, 5)
}

// TestOperatorConditionClaimsHold: a condition the docs say is on the
// operator's OperatorCondition is one controllers/operatorcondition writes.
func TestOperatorConditionClaimsHold(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, "controllers", "operatorcondition", "controller.go"))
	if err != nil {
		t.Fatal(err)
	}
	written := map[string]bool{}
	for _, m := range regexp.MustCompile(`Type:\s*operatorsv2\.(\w+)`).FindAllStringSubmatch(string(src), -1) {
		written[m[1]] = true
	}
	if !written["Upgradeable"] {
		t.Fatalf("no condition type found in the OperatorCondition controller (%v): the pattern is stale", written)
	}
	types := map[string]bool{}
	for _, c := range stringConstants(t, "api") {
		if regexp.MustCompile(`^[A-Z][a-z]+(?:[A-Z][a-z0-9]+)+$|^Ready$|^Degraded$`).MatchString(c) {
			types[c] = true
		}
	}
	code := regexp.MustCompile("`([A-Z][A-Za-z]+)(?:=[A-Za-z]+)?`")
	for _, p := range paragraphs(t) {
		file, text, _ := strings.Cut(p.name, "\x00")
		for _, sentence := range strings.Split(text, ". ") {
			if !strings.Contains(sentence, "OperatorCondition") {
				continue
			}
			on := regexp.MustCompile(`\(on (?:the operator's )?OperatorCondition[^)]*\)|on the operator's OperatorCondition`).FindStringIndex(sentence)
			if on == nil {
				continue
			}
			for _, m := range code.FindAllStringSubmatch(sentence[:on[0]], -1) {
				if types[m[1]] && !written[m[1]] {
					t.Errorf("%s:%d says %s is on the operator's OperatorCondition, which carries only %v", file, p.line, m[1], slices.Sorted(mapsKeys(written)))
				}
			}
		}
	}
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestNamedVersionsArePinned: the versions the docs name for the tools and
// releases the project pins are the pinned ones: the scorecard test image,
// the Agent Sandbox release, and the OpenShell release a gateway runs by
// default.
func TestNamedVersionsArePinned(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	pin := func(path, pattern string) string {
		m := regexp.MustCompile(pattern).FindStringSubmatch(read(path))
		if m == nil {
			t.Fatalf("no pin matching %s in %s: the pattern is stale", pattern, path)
		}
		return m[1]
	}
	line := read("internal/gatewayline/line.go")
	wire := regexp.MustCompile(`V01WireRelease\s*=\s*"([^"]+)"`).FindStringSubmatch(line)
	if wire == nil || !strings.Contains(line, "DefaultManaged = V01WireRelease") {
		t.Fatal("the default Managed release is not found in internal/gatewayline: the pattern is stale")
	}
	checks := []struct {
		what, pinned string
		named        *regexp.Regexp
	}{
		{"the scorecard test image", pin("hack/tools/scorecard/go.mod", `operator-sdk (v[0-9.]+)`), regexp.MustCompile(`scorecard-test:(v[0-9.]+)`)},
		{"the Agent Sandbox release", pin("hack/tools/agentsandbox/go.mod", `sigs.k8s.io/agent-sandbox (v[0-9.]+)`), regexp.MustCompile(`agent-sandbox/releases/download/(v[0-9.]+)/`)},
		{"the default OpenShell release", wire[1], regexp.MustCompile(`(?i)runs OpenShell ([0-9]+\.[0-9]+\.[0-9]+) (?:by default|unless)|default (?:line|release)[^.]{0,40}?OpenShell ([0-9]+\.[0-9]+\.[0-9]+)`)},
	}
	scorecard := read("config/scorecard/patches/basic.config.yaml")
	for _, c := range checks {
		n := 0
		files := documents(t)
		files["config/scorecard/patches/basic.config.yaml"] = scorecard
		for file, text := range files {
			for _, m := range c.named.FindAllStringSubmatchIndex(text, -1) {
				v := ""
				for g := 2; g+1 < len(m); g += 2 {
					if m[g] >= 0 {
						v = text[m[g]:m[g+1]]
					}
				}
				n++
				if v != c.pinned {
					t.Errorf("%s:%d names %s %s; the pinned one is %s", file, lineOf(text, m[0]), c.what, v, c.pinned)
				}
			}
		}
		atLeast(t, c.what+" mentions", n, 1)
	}
}

// TestUninstallNamesEveryKind: the quick start's uninstall deletes the
// objects of every kind the operator defines, before the operator goes
// (their finalizers need it), and then every CRD: a kind added later and
// left out there would leave finalizers and a CRD behind.
func TestUninstallNamesEveryKind(t *testing.T) {
	crds, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "openshell.ai_*.yaml"))
	if err != nil || len(crds) < 6 {
		t.Fatalf("found %d CRDs (%v): the pattern is stale", len(crds), err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	loc := regexp.MustCompile(`(?m)^## \d+\. Uninstall`).FindStringIndex(text)
	if loc == nil {
		t.Fatal("docs/quickstart.md has no uninstall section: the pattern is stale")
	}
	section := strings.ReplaceAll(text[loc[0]:], "\\\n", " ")
	deleted := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^oc delete ([a-z,]+) --all -A`).FindAllStringSubmatch(section, -1) {
		for _, plural := range strings.Split(m[1], ",") {
			deleted[plural] = true
		}
	}
	crdLine := regexp.MustCompile(`(?m)^oc delete crd (.*)$`).FindStringSubmatch(section)
	if crdLine == nil {
		t.Fatal("the uninstall section deletes no CRDs: the pattern is stale")
	}
	for _, f := range crds {
		plural := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "openshell.ai_"), ".yaml")
		if !deleted[plural] {
			t.Errorf("docs/quickstart.md's uninstall does not delete the %s before the operator", plural)
		}
		if !slices.Contains(strings.Fields(crdLine[1]), plural+".openshell.ai") {
			t.Errorf("docs/quickstart.md's uninstall leaves CRD %s.openshell.ai behind", plural)
		}
	}
}
