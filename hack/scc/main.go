// Command scc writes config/scc/ from internal/scc: the narrow SCC of the
// sidecar supervisor topology and the ClusterRole that grants `use` of it,
// as the operator applies them, so that admins who install without OLM (or
// want to review or pre-create the SCC) apply exactly what the operator
// would. make generate writes the files; make verify fails on a difference.
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/scc"
	"github.com/openshell/openshell-operator/internal/scheme"
)

func main() {
	dir := "config/scc"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	s := scheme.New()
	files := map[string]client.Object{"scc.yaml": scc.SidecarSCC(), "use_role.yaml": scc.UseRole()}
	for name, obj := range files {
		u, err := apply.ToUnstructured(s, obj)
		if err != nil {
			fail(err)
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			fail(err)
		}
		var out bytes.Buffer
		out.WriteString("# Generated from internal/scc by `go run ./hack/scc` (make generate); do not edit.\n")
		out.Write(b)
		if err := os.WriteFile(filepath.Join(dir, name), out.Bytes(), 0o644); err != nil {
			fail(err)
		}
	}
	kust := "# The narrow SCC for the sidecar supervisor topology and its `use` ClusterRole,\n" +
		"# generated from internal/scc. The operator creates the same objects on OpenShift;\n" +
		"# apply these to review or pre-create them.\nresources:\n- scc.yaml\n- use_role.yaml\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scc:", err)
	os.Exit(1)
}
