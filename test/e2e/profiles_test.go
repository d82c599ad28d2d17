package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestProviderProfiles: on an OpenShell 0.1 gateway, which builds no
// profiles in, a provider whose type nobody declared waits
// (ProfileMissing) and its sandbox with it; the Tenant Admin's
// OpenShellProviderProfile is imported into the namespace's workspace
// catalog only, re-imported on change, and withdrawn on deletion; another
// tenant's profile of the same id lands in that tenant's catalog and
// changes nothing of the first's; a profile the gateway's admin imported
// by hand is never overwritten (ProfileConflict); and a platform profile
// (the gateway's spec.providerProfiles) shadows the tenants', whose
// providers move to it.
func TestProviderProfiles(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS, sbNS := framework.CreateNamespace(ctx, t, c, "prof-platform"), framework.CreateNamespace(ctx, t, c, "prof-sandboxes")
	tenantA, tenantB := framework.CreateNamespace(ctx, t, c, "prof-tenant-a"), framework.CreateNamespace(ctx, t, c, "prof-tenant-b")
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS,
		Manager: operator.Options{WatchNamespaces: []string{gwNS, sbNS, tenantA, tenantB}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	gw := st.Gateway
	wsA, wsB := sandboxWorkspace(ctx, g, tenantA), sandboxWorkspace(ctx, g, tenantB)

	// Tenant A's provider of type github, attached by a sandbox: no
	// profile anywhere, so the provider waits and names what is missing.
	sbA := providerTenant(ctx, t, g, tenantA, "bot", "github", st.GatewayObj)
	expectProviderReason(ctx, g, tenantA, "bot", openshellv1alpha1.ProviderReasonProfileMissing, "provider profile github")
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sbA))
		g.Expect(meta.IsStatusConditionFalse(cur.Status.Conditions, openshellv1alpha1.SandboxConditionProvidersResolved)).To(BeTrue(), "%+v", cur.Status.Conditions)
		g.Expect(cur.Status.SandboxID).To(BeEmpty(), "created at the gateway without its provider")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	// The Tenant Admin declares it: imported into A's catalog, marked as
	// this object's; the provider names that catalog; the sandbox runs.
	profA := githubProfile(tenantA, "api.github.com")
	g.Expect(c.Create(ctx, profA)).To(Succeed())
	expectProfileReason(ctx, g, client.ObjectKeyFromObject(profA), openshellv1alpha1.ProfileReasonImported)
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(profA), profA)).To(Succeed())
	got := gw.Profile(wsA, "github")
	g.Expect(got).NotTo(BeNil())
	g.Expect(got.GetAnnotations()).To(HaveKeyWithValue(sandboxspec.LabelOwnerUID, string(profA.UID)))
	g.Expect(hosts(got)).To(Equal([]string{"api.github.com"}))
	g.Expect(gw.Profile("", "github")).To(BeNil(), "a tenant's profile reached the platform catalog")
	waitPhase(ctx, g, client.ObjectKeyFromObject(sbA), openshellv1alpha1.SandboxPhaseReady)
	g.Expect(profileWorkspaceOf(gw, wsA, "bot")).To(Equal(wsA))

	// A change is imported again (compare-and-swap on the gateway's version).
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellProviderProfile{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(profA), cur); err != nil {
			return err
		}
		cur.Spec.Endpoints = append(cur.Spec.Endpoints, openshellv1alpha1.NetworkEndpoint{Host: "uploads.github.com", Port: ptr.To[int32](443)})
		return c.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func() []string { return hosts(gw.Profile(wsA, "github")) }).WithContext(ctx).WithTimeout(30 * time.Second).
		Should(Equal([]string{"api.github.com", "uploads.github.com"}))
	// Updated in place (compare-and-swap), never deleted and imported anew;
	// a reconcile that read a stale cache may update it once more, alike.
	g.Expect(gw.Profile(wsA, "github").GetResourceVersion()).To(BeNumerically(">=", 2))
	g.Expect(gw.Profile(wsA, "github").GetAnnotations()).To(HaveKeyWithValue(sandboxspec.LabelOwnerUID, string(profA.UID)))

	// Tenant B's profile of the same id, with another host: B's catalog
	// only; A's profile is untouched.
	sbB := providerTenant(ctx, t, g, tenantB, "bot", "github", st.GatewayObj)
	profB := githubProfile(tenantB, "evil.example.com")
	g.Expect(c.Create(ctx, profB)).To(Succeed())
	expectProfileReason(ctx, g, client.ObjectKeyFromObject(profB), openshellv1alpha1.ProfileReasonImported)
	waitPhase(ctx, g, client.ObjectKeyFromObject(sbB), openshellv1alpha1.SandboxPhaseReady)
	g.Expect(hosts(gw.Profile(wsB, "github"))).To(Equal([]string{"evil.example.com"}))
	g.Expect(hosts(gw.Profile(wsA, "github"))).To(Equal([]string{"api.github.com", "uploads.github.com"}))

	// Deleting B's profile withdraws it from B's catalog (finalizer), and
	// B's provider waits again.
	g.Expect(c.Delete(ctx, profB)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(profB), profB) }).WithContext(ctx).WithTimeout(30 * time.Second).
		Should(Satisfy(apierrors.IsNotFound))
	g.Expect(gw.Profile(wsB, "github")).To(BeNil())
	expectProviderReason(ctx, g, tenantB, "bot", openshellv1alpha1.ProviderReasonProfileMissing, "provider profile github")

	// A profile the gateway's admin imported by hand is never overwritten.
	handmade := &v01.ProviderProfile{Id: "gitlab", Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "gitlab.example.com", Port: 443}}}
	gw.ImportProfile(wsA, handmade)
	providerTenant(ctx, t, g, tenantA, "lab", "gitlab", st.GatewayObj)
	profLab := &openshellv1alpha1.OpenShellProviderProfile{ObjectMeta: metav1.ObjectMeta{Name: "gitlab", Namespace: tenantA},
		Spec: openshellv1alpha1.OpenShellProviderProfileSpec{Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "attacker.example.com", Port: ptr.To[int32](443)}}}}
	g.Expect(c.Create(ctx, profLab)).To(Succeed())
	expectProfileReason(ctx, g, client.ObjectKeyFromObject(profLab), openshellv1alpha1.ProfileReasonConflict)
	g.Expect(hosts(gw.Profile(wsA, "gitlab"))).To(Equal([]string{"gitlab.example.com"}))
	g.Expect(c.Delete(ctx, profLab)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(profLab), profLab) }).WithContext(ctx).WithTimeout(30 * time.Second).
		Should(Satisfy(apierrors.IsNotFound))
	g.Expect(gw.Profile(wsA, "gitlab")).NotTo(BeNil(), "deleting the refused profile deleted the gateway admin's")

	// The platform defines github for the gateway: its profile lands in
	// the platform catalog, A's is withdrawn (ShadowedByPlatform), and A's
	// and B's providers resolve in the platform catalog.
	platformProf := githubProfile(st.GatewayObj.Namespace, "api.github.com")
	g.Expect(c.Create(ctx, platformProf)).To(Succeed())
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellGateway{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), cur); err != nil {
			return err
		}
		cur.Spec.ProviderProfiles = []string{"github"}
		return c.Update(ctx, cur)
	})).To(Succeed())
	expectProfileReason(ctx, g, client.ObjectKeyFromObject(platformProf), openshellv1alpha1.ProfileReasonImported)
	expectProfileReason(ctx, g, client.ObjectKeyFromObject(profA), openshellv1alpha1.ProfileReasonShadowed)
	g.Expect(gw.Profile("", "github")).NotTo(BeNil())
	g.Eventually(func() *v01.ProviderProfile { return gw.Profile(wsA, "github") }).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeNil())
	for _, ns := range []string{tenantA, tenantB} {
		expectProviderReason(ctx, g, ns, "bot", openshellv1alpha1.ProviderReasonSynced, "")
	}
	g.Expect(profileWorkspaceOf(gw, wsA, "bot")).To(Equal(""))
	second := sandboxOn(tenantA, "second", st.GatewayObj)
	second.Spec.Providers = []string{"bot"}
	g.Expect(c.Create(ctx, second)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(second), openshellv1alpha1.SandboxPhaseReady)
}

// providerTenant creates, in ns, a Secret and a provider name of type
// typ, and a sandbox on gw that attaches it.
func providerTenant(ctx context.Context, t *testing.T, g Gomega, ns, name, typ string, gw *openshellv1alpha1.OpenShellGateway) *openshellv1alpha1.OpenShellSandbox {
	t.Helper()
	c := cluster.Client
	g.ExpectWithOffset(1, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-token", Namespace: ns},
		StringData: map[string]string{"TOKEN": "t-" + name}})).To(Succeed())
	g.ExpectWithOffset(1, c.Create(ctx, &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: openshellv1alpha1.OpenShellProviderSpec{Type: typ, CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: name + "-token"}}})).To(Succeed())
	sb := sandboxOn(ns, "uses-"+name, gw)
	sb.Spec.Providers = []string{name}
	g.ExpectWithOffset(1, c.Create(ctx, sb)).To(Succeed())
	return sb
}

func githubProfile(ns, host string) *openshellv1alpha1.OpenShellProviderProfile {
	return &openshellv1alpha1.OpenShellProviderProfile{ObjectMeta: metav1.ObjectMeta{Name: "github", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellProviderProfileSpec{DisplayName: "GitHub", Category: "SourceControl",
			Credentials: []openshellv1alpha1.ProviderProfileCredential{{Name: "TOKEN", EnvVars: []string{"GITHUB_TOKEN"}, Required: true}},
			Endpoints:   []openshellv1alpha1.NetworkEndpoint{{Host: host, Port: ptr.To[int32](443)}}}}
}

// hosts lists a gateway profile's endpoint hosts.
func hosts(p *v01.ProviderProfile) []string {
	var out []string
	for _, e := range p.GetEndpoints() {
		out = append(out, e.GetHost())
	}
	return out
}

func expectProfileReason(ctx context.Context, g Gomega, key client.ObjectKey, reason string) {
	g.EventuallyWithOffset(1, func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellProviderProfile{}
		g.Expect(cluster.Client.Get(ctx, key, cur)).To(Succeed())
		ready := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(reason), "%+v", cur.Status)
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

func expectProviderReason(ctx context.Context, g Gomega, ns, name, reason, mentions string) {
	g.EventuallyWithOffset(1, func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellProvider{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cur)).To(Succeed())
		ready := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(reason), "%+v", cur.Status)
		g.Expect(ready.Message).To(ContainSubstring(mentions))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

// profileWorkspaceOf is a provider's profile_workspace at the gateway
// ("<none>" if it was never given one through the 0.1 wire).
func profileWorkspaceOf(gw *testgateway.Gateway, ws, name string) string {
	pw, ok := gw.ProviderProfileWorkspace(ws, name)
	if !ok {
		return "<none>"
	}
	return pw
}
