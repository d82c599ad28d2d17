package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestOpenShellPythonClient: the `openshell` Python SDK of the pinned
// release (make tools: bin/openshell-wheel, its runtime in bin/python-sdk),
// a real 0.1 client no one here wrote, reads as a workspace user what the
// operator created on a 0.1 gateway: both sandboxes are listed (one per
// page, so paging is exercised) and one is read, Ready, with the owner
// label the operator set; the workspace template the operator made from
// an OpenShellSandboxTemplate is listed, and the sandbox created from it
// says so.
func TestOpenShellPythonClient(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant, _ := startLineStack(ctx, t, g, "sdk")
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")

	g.Expect(c.Create(ctx, &openshellv1alpha1.OpenShellSandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "claude"},
		Spec: openshellv1alpha1.OpenShellSandboxTemplateSpec{Image: "mirror.corp/agents/claude:1"}})).To(Succeed())
	var sandboxes []*openshellv1alpha1.OpenShellSandbox
	for _, name := range []string{"first", "second"} {
		sb := sandboxOn(tenant, name, st.GatewayObj)
		if name == "second" {
			sb.Spec.TemplateRef = &openshellv1alpha1.LocalObjectReference{Name: "claude"}
		}
		g.Expect(c.Create(ctx, sb)).To(Succeed())
		sandboxes = append(sandboxes, sb)
	}
	for _, sb := range sandboxes {
		waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	}
	g.Expect(st.Gateway.LineCalls()).To(HaveKey("0.1 CreateSandbox"), "the sandboxes were not created over the 0.1 wire")
	ws := sandboxWorkspace(ctx, g, tenant)

	// Workspace-scoped calls need membership of the workspace (0.1): a
	// Tenant Admin gets it, with a token, through the relay's exchange
	// (a member added at the gateway directly is removed by the sweep).
	installOLMAggregatedRoles(ctx, t)
	bind(ctx, t, tenant, "alice", "openshell-tenant-admin")
	r, err := st.StartRelay(ctx, cluster.Config, st.GatewayObj.Namespace, zap.New(zap.WriteTo(io.Discard)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(r.Stop(context.Background(), c)).To(Succeed()) })
	var tok *accessv1alpha1.SandboxToken
	g.Eventually(func() (err error) {
		tok, err = exchangeAs(ctx, userConfig("alice"), tenant, "first")
		return err
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	out := runPythonClient(ctx, t, st, tok.Token, ws, sandboxspec.SandboxName(tenant, "first"))
	var seen struct {
		Listed      []string          `json:"listed"`
		Workspace   string            `json:"workspace"`
		Phase       int32             `json:"phase"`
		Labels      map[string]string `json:"labels"`
		Templates   map[string]string `json:"templates"`
		CreatedFrom map[string]string `json:"createdFrom"`
	}
	g.Expect(json.Unmarshal(out, &seen)).To(Succeed(), string(out))
	g.Expect(seen.Listed).To(ConsistOf(sandboxspec.SandboxName(tenant, "first"), sandboxspec.SandboxName(tenant, "second")))
	g.Expect(seen.Workspace).To(Equal(ws))
	g.Expect(seen.Phase).To(Equal(int32(openshellv1.SandboxPhase_SANDBOX_PHASE_READY)))
	first := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sandboxes[0]))
	g.Expect(seen.Labels).To(HaveKeyWithValue(sandboxspec.LabelOwnerUID, string(first.UID)))
	second := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sandboxes[1]))
	g.Expect(second.Status.Template).NotTo(BeNil())
	g.Expect(seen.Templates).To(Equal(map[string]string{second.Status.Template.GatewayName: "mirror.corp/agents/claude:1"}))
	g.Expect(seen.CreatedFrom).To(Equal(map[string]string{sandboxspec.SandboxName(tenant, "second"): second.Status.Template.GatewayName}))
	calls := st.Gateway.LineCalls()
	g.Expect(calls).To(HaveKey("0.1 ListSandboxes"))
	g.Expect(calls).To(HaveKey("0.1 GetSandbox"))
}

// runPythonClient runs testdata/openshell_client.py (the pinned wheel's
// SDK) against the stack's gateway with token, reading workspace and the
// sandbox named sandbox, and returns what it printed.
func runPythonClient(ctx context.Context, t *testing.T, st *stack.Stack, token, workspace, sandbox string, env ...string) []byte {
	t.Helper()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, st.CA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := framework.BinDir()
	cmd := exec.CommandContext(ctx, "python3", "testdata/openshell_client.py")
	cmd.Env = append(os.Environ(),
		"PYTHONPATH="+filepath.Join(bin, "python-sdk")+string(os.PathListSeparator)+filepath.Join(bin, "openshell-wheel"),
		"OPENSHELL_ENDPOINT="+strings.TrimPrefix(st.Gateway.Endpoint(), "https://"), "OPENSHELL_CA="+caFile,
		"OPENSHELL_TOKEN="+token, "OPENSHELL_WORKSPACE="+workspace, "OPENSHELL_SANDBOX="+sandbox)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.Output()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		t.Fatalf("the openshell SDK failed: %v\n%s", err, exit.Stderr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}
