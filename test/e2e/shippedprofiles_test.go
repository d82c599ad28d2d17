package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	profilecatalogctrl "github.com/openshell/openshell-operator/controllers/profilecatalog"
	"github.com/openshell/openshell-operator/internal/profilecatalog"
)

// TestShippedProfilesServeAFreshManagedGateway: a fresh Managed gateway on
// the default 0.1 line imports the operator's shipped provider profiles
// into its platform catalog, so that the sample tenant's provider of type
// claude-code (the quick start's) is Ready and its sandbox Ready without
// anyone writing a profile; the provider names the platform catalog. A
// tenant's own profile of that id then takes over for its namespace, and
// policy None withdraws the shipped profiles, leaving the tenant's.
func TestShippedProfilesServeAFreshManagedGateway(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	catalog, err := profilecatalog.Load()
	g.Expect(err).NotTo(HaveOccurred())
	_, m, tenant := startManagedStack(ctx, t, g, "ship", "")
	gwKey := client.ObjectKeyFromObject(m.Object)

	_, sb := createSampleTenant(ctx, t, tenant, "sk-shipped", gwKey)
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	expectProviderReason(ctx, g, tenant, "anthropic", openshellv1alpha1.ProviderReasonSynced, "")
	ws := sandboxWorkspace(ctx, g, tenant)
	g.Expect(profileWorkspaceOf(m.Gateway, ws, "anthropic")).To(Equal(""), "the provider does not name the platform catalog")
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, gwKey, cur)).To(Succeed())
		st := cur.Status.BuiltinProviderProfiles
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.Imported).To(Equal(catalog.IDs()))
		g.Expect(st.Catalog).To(Equal(catalog.Version))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	for _, id := range catalog.IDs() {
		p := m.Gateway.Profile("", id)
		g.Expect(p).NotTo(BeNil(), "shipped profile %s is not in the platform catalog", id)
		g.Expect(p.GetAnnotations()).To(HaveKeyWithValue(profilecatalogctrl.AnnotationCatalog, "openshell-operator"))
	}

	// The Tenant Admin's own profile of the id serves the namespace's
	// providers from its workspace catalog.
	declareSampleProfile(ctx, t, tenant)
	g.Eventually(func() string { return profileWorkspaceOf(m.Gateway, ws, "anthropic") }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(ws))

	// None: the shipped profiles are withdrawn; the tenant's stays.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellGateway{}
		if err := c.Get(ctx, gwKey, cur); err != nil {
			return err
		}
		cur.Spec.BuiltinProviderProfiles = &openshellv1alpha1.BuiltinProviderProfiles{Policy: openshellv1alpha1.BuiltinProfilesNone}
		return c.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, id := range catalog.IDs() {
			g.Expect(m.Gateway.Profile("", id)).To(BeNil(), "shipped profile %s is still imported", id)
		}
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(m.Gateway.Profile(ws, "claude-code")).NotTo(BeNil(), "the tenant's profile was withdrawn")
	cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb))
	g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
}
