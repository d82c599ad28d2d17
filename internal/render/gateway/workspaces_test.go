package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

func operatorMode(gw *openshellv1alpha1.OpenShellGateway) {
	gw.Spec.Managed.Sandboxes.WorkspaceMode = openshellv1alpha1.WorkspaceModeOperator
}

// TestOperatorModeConfig: the driver is told workspace mode operator with
// the mounted allowlist file (exactly one allowlist source), the file is
// mounted as a directory the kubelet updates, and a new allowlist does
// not restart the gateway.
func TestOperatorModeConfig(t *testing.T) {
	gw := gateway(operatorMode)
	in := v01(Inputs{TLS: TLSBuiltin, Workspaces: []string{"ws-b", "ws-a"}})
	r, err := Render(gw, in)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenShell struct {
			Drivers struct {
				Kubernetes map[string]any `toml:"kubernetes"`
			} `toml:"drivers"`
		} `toml:"openshell"`
	}
	if err := toml.Unmarshal([]byte(r.Config), &doc); err != nil {
		t.Fatal(err)
	}
	k := doc.OpenShell.Drivers.Kubernetes
	if k["workspace_mode"] != "operator" || k["operator_namespace_file"] != WorkspacesDir+"/"+WorkspacesFile {
		t.Errorf("driver config: workspace_mode %v, operator_namespace_file %v", k["workspace_mode"], k["operator_namespace_file"])
	}
	if _, both := k["operator_namespace_label"]; both {
		t.Error("both allowlist sources are set: the driver refuses to start")
	}
	var cm *corev1.ConfigMap
	for _, o := range r.Objects {
		if o, ok := o.(*corev1.ConfigMap); ok && o.Name == NamesFor(gw).Workspaces {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no allowlist ConfigMap")
	}
	var names []string
	if err := json.Unmarshal([]byte(cm.Data[WorkspacesFile]), &names); err != nil || strings.Join(names, ",") != "ws-a,ws-b" {
		t.Errorf("allowlist %q (%v): want a sorted JSON array", cm.Data[WorkspacesFile], err)
	}
	tmpl := PodTemplate(gw, in, r.ConfigHash)
	mounted := false
	for _, m := range tmpl.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.MountPath == WorkspacesDir && m.SubPath == "")
	}
	if !mounted {
		t.Error("the allowlist is not mounted as a directory")
	}
	in2 := in
	in2.Workspaces = []string{"ws-a"}
	r2, err := Render(gw, in2)
	if err != nil {
		t.Fatal(err)
	}
	if r2.ConfigHash != r.ConfigHash {
		t.Error("a changed allowlist rolls the gateway: the driver reloads the file itself")
	}
}

// TestOperatorModeGrants: the gateway holds the runtime's writes only in
// paired namespaces, reads its client certificate by name, and its one
// cluster-wide addition is list and watch of Sandboxes.
func TestOperatorModeGrants(t *testing.T) {
	gw := gateway(operatorMode)
	n := NamesFor(gw)
	objs := RBAC(gw, v01(Inputs{}))
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.RoleBinding:
			if o.RoleRef.Name == ClusterRoleGatewayRuntime {
				t.Errorf("runtime writes granted in %s, where no sandbox runs in Operator mode", o.Namespace)
			}
		case *rbacv1.Role:
			if len(o.Rules) != 1 || strings.Join(o.Rules[0].ResourceNames, ",") != n.ClientTLS || strings.Join(o.Rules[0].Verbs, ",") != "get" {
				t.Errorf("role %s: %+v", o.Name, o.Rules)
			}
		}
	}
	if !hasRef(objs, "ClusterRoleBinding", ClusterRoleGatewayWorkspaces) {
		t.Error("no cluster-wide Sandbox watch: the 0.1 driver's status watcher needs it outside Shared mode")
	}
	if hasRef(RBAC(gateway(nil), v01(Inputs{})), "ClusterRoleBinding", ClusterRoleGatewayWorkspaces) {
		t.Error("a Shared gateway is granted the cluster-wide Sandbox watch")
	}
	for _, cr := range OperandClusterRoles() {
		if cr.Name != ClusterRoleGatewayWorkspaces {
			continue
		}
		for _, r := range cr.Rules {
			for _, v := range r.Verbs {
				if v != "list" && v != "watch" {
					t.Errorf("%s grants %s cluster-wide", cr.Name, v)
				}
			}
		}
	}

	ws := WorkspaceObjects(gw, "team-a", "uid-1")
	nsObj := ws[0].(*corev1.Namespace)
	if nsObj.Name != PairedNamespace("team-a", "uid-1") || len(nsObj.Name) > 19 {
		t.Errorf("paired namespace %q: must be the tenant's workspace name (at most 19 characters)", nsObj.Name)
	}
	if nsObj.Labels[LabelPSAEnforce] != "restricted" || nsObj.Labels[LabelPSASync] != "false" {
		t.Errorf("paired namespace labels %v", nsObj.Labels)
	}
	if tenant, uid, ok := PairedTenant(gw, nsObj); !ok || tenant != "team-a" || uid != "uid-1" {
		t.Errorf("PairedTenant = %q %q %v", tenant, uid, ok)
	}
	other := gateway(func(g *openshellv1alpha1.OpenShellGateway) { g.Name = "other"; operatorMode(g) })
	if _, _, ok := PairedTenant(other, nsObj); ok {
		t.Error("another gateway claims the paired namespace")
	}
	forged := nsObj.DeepCopy()
	forged.Name = "ws-0000000000000000"
	if _, _, ok := PairedTenant(gw, forged); ok {
		t.Error("a namespace whose name is not the tenant's workspace is taken as paired")
	}
	for _, o := range ws[1:] {
		if o.GetNamespace() != nsObj.Name {
			t.Errorf("%T %s outside the paired namespace", o, o.GetName())
		}
		if rb, ok := o.(*rbacv1.RoleBinding); ok && rb.RoleRef.Kind != "ClusterRole" {
			t.Errorf("binding %s refers to a %s: the operator binds only the static ClusterRoles", rb.Name, rb.RoleRef.Kind)
		}
	}
}

func hasRef(objs []client.Object, kind, role string) bool {
	for _, o := range objs {
		if b, ok := o.(*rbacv1.ClusterRoleBinding); ok && kind == "ClusterRoleBinding" && b.RoleRef.Name == role {
			return true
		}
	}
	return false
}

// TestPullSecret: the paired namespace's one pull Secret holds the
// gateway's registries and then the tenant's, the platform's winning
// where both name one; Secrets that are not Docker configs are left out
// and named, never their values.
func TestPullSecret(t *testing.T) {
	cfg := func(ns, name string, auths string) corev1.Secret {
		return corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":` + auths + `}`)}}
	}
	platform := []corev1.Secret{cfg("platform", "corp", `{"registry.corp":{"auth":"cGxhdGZvcm0="}}`)}
	tenant := []corev1.Secret{
		cfg("team-a", "mine", `{"registry.corp":{"auth":"dGVuYW50"},"ghcr.io":{"auth":"Z2g="}}`),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "opaque"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("s3cr3t")}},
	}
	s, problems := PullSecret(gateway(operatorMode), "team-a", "uid-a", platform, tenant)
	if s.Name != PairedPullSecret || s.Namespace != PairedNamespace("team-a", "uid-a") || s.Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("secret %s/%s of type %s", s.Namespace, s.Name, s.Type)
	}
	var got struct {
		Auths map[string]struct {
			Auth string `json:"auth"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &got); err != nil {
		t.Fatal(err)
	}
	if got.Auths["registry.corp"].Auth != "cGxhdGZvcm0=" || got.Auths["ghcr.io"].Auth != "Z2g=" || len(got.Auths) != 2 {
		t.Errorf("merged auths %+v: want the platform's registry.corp and the tenant's ghcr.io", got.Auths)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "opaque") || strings.Contains(problems[0], "s3cr3t") {
		t.Errorf("problems %q: want the Opaque Secret named, without its value", problems)
	}
	empty, _ := PullSecret(gateway(operatorMode), "team-b", "uid-b", nil, nil)
	if string(empty.Data[corev1.DockerConfigJsonKey]) != `{"auths":{}}` {
		t.Errorf("a tenant without pull Secrets gets %s: the driver names the Secret in every paired namespace", empty.Data[corev1.DockerConfigJsonKey])
	}
	cfgText, err := GatewayTOML(gateway(func(gw *openshellv1alpha1.OpenShellGateway) {
		operatorMode(gw)
		gw.Spec.Managed.Sandboxes.ImagePullSecrets = []string{"corp"}
	}), v01(Inputs{}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfgText, `image_pull_secrets = ['`+PairedPullSecret+`']`) {
		t.Errorf("operator mode names its paired pull Secret only:\n%s", cfgText)
	}
}
