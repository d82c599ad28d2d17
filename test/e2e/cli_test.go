package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestOpenShellCLI: the `openshell` CLI of 0.0.111 (bin/openshell, from
// the pinned wheel), a real client no one here wrote, used as a user of a
// 0.0.111 gateway would use it. It registers the gateway with its own
// `gateway add` (OIDC), finds the token a login would have stored, and
// lists and reads what the operator created: both sandboxes, Ready, with
// the owner label the operator set. A user-role token may not list every
// workspace, and the CLI says why. The policy the operator sent is the
// one the CLI prints.
func TestOpenShellCLI(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant, _ := startLineStack(ctx, t, g, "cli")

	g.Expect(c.Create(ctx, &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "egress", Namespace: tenant},
		Spec: openshellv1alpha1.OpenShellPolicySpec{NetworkPolicies: []openshellv1alpha1.NetworkPolicyRule{{Name: "github",
			Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "api.github.com", Port: ptr.To[int32](443)}}}}}})).To(Succeed())
	var sandboxes []*openshellv1alpha1.OpenShellSandbox
	for _, name := range []string{"first", "second"} {
		sb := sandboxOn(tenant, name, st.GatewayObj)
		if name == "first" {
			sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "egress"}
		}
		g.Expect(c.Create(ctx, sb)).To(Succeed())
		sandboxes = append(sandboxes, sb)
	}
	for _, sb := range sandboxes {
		waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	}
	g.Expect(st.Gateway.LineCalls()).To(HaveKey("0.0 CreateSandbox"), "the sandboxes were not created over the 0.0.x wire")
	ws := sandboxWorkspace(ctx, g, tenant)

	cli := newCLI(ctx, t, st, "alice@example.com")
	var listed []cliSandbox
	g.Expect(json.Unmarshal(cli.run(t, "sandbox", "list", "--workspace", ws, "-o", "json"), &listed)).To(Succeed())
	var names []string
	for _, sb := range listed {
		names = append(names, sb.Name)
	}
	first, second := sandboxspec.SandboxName(tenant, "first"), sandboxspec.SandboxName(tenant, "second")
	g.Expect(names).To(ConsistOf(first, second))

	var got cliSandbox
	g.Expect(json.Unmarshal(cli.run(t, "sandbox", "get", first, "--workspace", ws, "-o", "json"), &got)).To(Succeed())
	status := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sandboxes[0]))
	g.Expect(got.Name).To(Equal(first))
	g.Expect(got.ID).To(Equal(status.Status.SandboxID))
	g.Expect(strings.ToLower(got.Phase)).To(ContainSubstring("ready"))
	g.Expect(got.Labels).To(HaveKeyWithValue(sandboxspec.LabelOwnerUID, string(status.UID)))

	out, err := cli.try(t, "sandbox", "list", "--all-workspaces")
	g.Expect(err).To(HaveOccurred(), "a user-role token listed every workspace:\n%s", out)
	// The CLI wraps its message to the width of a terminal.
	said := strings.Join(strings.Fields(strings.ReplaceAll(string(out), "│", "")), " ")
	g.Expect(said).To(ContainSubstring("listing all workspaces requires the platform admin role"))

	// The policy the operator rendered from the OpenShellPolicy, as the
	// release's own code reads and prints it.
	var policy struct {
		NetworkPolicies map[string]struct {
			Endpoints []struct {
				Host string `json:"host"`
				Port int    `json:"port"`
			} `json:"endpoints"`
		} `json:"network_policies"`
	}
	printed := cli.run(t, "sandbox", "get", first, "--workspace", ws, "--policy-only")
	g.Expect(yaml.Unmarshal(printed, &policy)).To(Succeed(), string(printed))
	g.Expect(policy.NetworkPolicies).To(HaveKey("github"), string(printed))
	g.Expect(policy.NetworkPolicies["github"].Endpoints).To(ConsistOf(And(HaveField("Host", "api.github.com"), HaveField("Port", 443))), string(printed))

	calls := st.Gateway.LineCalls()
	g.Expect(calls).To(HaveKey("0.0 ListSandboxes"))
	g.Expect(calls).To(HaveKey("0.0 GetSandbox"))
}

// cliSandbox is what `openshell sandbox list|get -o json` prints of a
// sandbox (0.0.111), as far as the test reads it.
type cliSandbox struct {
	ID     string            `json:"id"`
	Name   string            `json:"name"`
	Phase  string            `json:"phase"`
	Labels map[string]string `json:"labels"`
}

// cli is the pinned `openshell` CLI with a configuration of its own.
type cli struct {
	home string
	env  []string
}

// newCLI registers the stack's gateway with the CLI's own `gateway add`
// (OIDC, the operator's issuer) and stores a token for subject where the
// CLI's login keeps it (gateways/<name>/oidc_token.json): the login flows
// themselves (browser, device code, client credentials) need an identity
// provider with endpoints the operator's issuer does not serve.
func newCLI(ctx context.Context, t *testing.T, st *stack.Stack, subject string) *cli {
	t.Helper()
	home := t.TempDir()
	c := &cli{home: home, env: []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"OPENSHELL_NO_BROWSER=1", "PATH=" + os.Getenv("PATH")}}
	const name = "e2e"
	audience := oidc.Audience(st.GatewayObj.Namespace, st.GatewayObj.Name)
	// The device-code login that `gateway add` tries fails (the issuer's
	// CA is not the CLI's, and it has no device endpoint): the
	// registration stays, as the CLI documents for a suppressed browser.
	c.run(t, "gateway", "add", st.Gateway.Endpoint(), "--name", name,
		"--oidc-issuer", "https://"+st.IssuerAddress(), "--oidc-audience", audience)

	token, err := st.UserToken(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if parts := strings.Split(token, "."); len(parts) == 3 {
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err == nil {
			err = json.Unmarshal(payload, &claims)
		}
		if err != nil {
			t.Fatalf("read the token's claims: %v", err)
		}
	}
	if claims.Exp == 0 {
		t.Fatal("the issuer's token has no expiry")
	}
	bundle, err := json.Marshal(map[string]any{"access_token": token, "expires_at": claims.Exp,
		"issuer": "https://" + st.IssuerAddress(), "client_id": "openshell-cli"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, ".config", "openshell", "gateways", name)
	for file, data := range map[string][]byte{"oidc_token.json": bundle, "mtls/ca.crt": st.CA.CertPEM} {
		path := filepath.Join(dir, file)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// cliTimeout bounds one CLI command: a CLI that hangs (on a prompt, or a
// stream that never ends) fails its test instead of the suite's deadline.
const cliTimeout = 2 * time.Minute

// try runs the CLI and returns what it printed (stdout, then stderr).
func (c *cli) try(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(framework.BinDir(), "openshell"), args...)
	cmd.Env, cmd.Dir = c.env, c.home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		t.Fatalf("bin/openshell is missing (make tools): %v", err)
	}
	return append(stdout.Bytes(), stderr.Bytes()...), err
}

// run runs the CLI, fails the test if it fails, and returns its stdout.
func (c *cli) run(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(framework.BinDir(), "openshell"), args...)
	cmd.Env, cmd.Dir = c.env, c.home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("openshell %s: %v\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}
