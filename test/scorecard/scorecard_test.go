// Package scorecard runs the bundle's scorecard tests for real: each test
// the bundle's scorecard config lists, with operator-sdk's scorecard-test
// binary (built from its module into bin/), as the scorecard's test pod
// runs it — the bundle at /bundle, here in a folder it is chrooted into.
package scorecard

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/test/framework"
)

// config is the part of the scorecard Configuration the tests need.
type config struct {
	Stages []struct {
		Tests []struct {
			Entrypoint []string          `json:"entrypoint"`
			Labels     map[string]string `json:"labels"`
		} `json:"tests"`
	} `json:"stages"`
}

// result is scorecard-test's output (v1alpha3 TestStatus).
type result struct {
	Results []struct {
		Name        string   `json:"name"`
		State       string   `json:"state"`
		Errors      []string `json:"errors"`
		Suggestions []string `json:"suggestions"`
	} `json:"results"`
}

func TestBundleScorecard(t *testing.T) {
	if testing.Short() {
		t.Skip("needs bin/scorecard-test (make tools)")
	}
	bin, err := framework.Binary("scorecard-test")
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(framework.RepoRoot(), "bundle")
	raw, err := os.ReadFile(filepath.Join(bundle, "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg config
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	root := chrootWithBundle(t, bin, bundle)
	n := 0
	for _, stage := range cfg.Stages {
		for _, test := range stage.Tests {
			if len(test.Entrypoint) != 2 || test.Entrypoint[0] != "scorecard-test" {
				t.Fatalf("test %v: not a built-in scorecard test", test.Entrypoint)
			}
			n++
			name := test.Entrypoint[1]
			t.Run(name, func(t *testing.T) {
				// A private mount and user namespace, as the test pod's own.
				cmd := exec.Command("unshare", "--map-root-user", "--mount", "--root="+root, "/scorecard-test", name)
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("scorecard-test %s: %v\n%s", name, err, out)
				}
				var r result
				if err := json.Unmarshal(out, &r); err != nil {
					t.Fatalf("scorecard-test %s output: %v\n%s", name, err, out)
				}
				if len(r.Results) == 0 {
					t.Fatalf("scorecard-test %s reported nothing", name)
				}
				for _, res := range r.Results {
					if res.State != "pass" {
						t.Errorf("%s: %s\nerrors:\n  %s\nsuggestions:\n  %s", res.Name, res.State,
							strings.Join(res.Errors, "\n  "), strings.Join(res.Suggestions, "\n  "))
					}
				}
			})
		}
	}
	if n < 6 {
		t.Fatalf("the scorecard config lists %d tests, want the basic and olm suites (6)", n)
	}
}

// chrootWithBundle lays out a root folder holding the static scorecard-test
// binary and a copy of the bundle at /bundle.
func chrootWithBundle(t *testing.T, bin, bundle string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(root, "bundle"), os.DirFS(bundle)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "scorecard-test"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}
