package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/proto"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	legacydatamodelv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	legacyopenshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/sandboxv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestGatewayDriftReverted (#45 item 5, providers and policy): a provider detached
// from a running sandbox directly at the gateway (what a Tenant Admin's
// gateway token may do) is found by the periodic sweep's one list of the
// gateway's sandboxes and attached again to match spec.providers, with a
// Warning event DriftReverted naming what differed. Nothing else of the
// sandbox changes (the same gateway sandbox runs on).
func TestGatewayDriftReverted(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS, sbNS := framework.CreateNamespace(ctx, t, c, "drift-platform"), framework.CreateNamespace(ctx, t, c, "drift-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "drift-tenant")
	// A short sweep period: the bound on how long a change at the gateway
	// lasts (10 minutes by default).
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS,
		Manager: operator.Options{WatchNamespaces: []string{gwNS, sbNS, tenant}, Controllers: operator.ControllerOptions{SweepPeriod: 2 * time.Second}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	declareSampleProfile(ctx, t, tenant)
	_, sb := createSampleTenant(ctx, t, tenant, "sk-drift", client.ObjectKeyFromObject(st.GatewayObj))
	key := client.ObjectKeyFromObject(sb)
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)
	ws, name := sandboxWorkspace(ctx, g, tenant), sandboxspec.SandboxName(tenant, sb.Name)
	g.Eventually(func() int { return st.Gateway.Attachments(ws) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(1))
	id := sandboxStatus(ctx, g, key).Status.SandboxID

	_, err = st.Gateway.DetachSandboxProvider(ctx, &legacyopenshellv1.DetachSandboxProviderRequest{SandboxName: name, ProviderName: "anthropic", Workspace: ws})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Gateway.Attachments(ws)).To(Equal(0))
	g.Eventually(func(g Gomega) {
		g.Expect(st.Gateway.Attachments(ws)).To(Equal(1), "the provider detached at the gateway was not attached again")
		evs := &eventsv1.EventList{}
		g.Expect(c.List(ctx, evs, client.InNamespace(tenant))).To(Succeed())
		found := false
		for _, e := range evs.Items {
			found = found || (e.Reason == "DriftReverted" && e.Regarding.Name == sb.Name)
		}
		g.Expect(found).To(BeTrue(), "no DriftReverted event")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	cur := sandboxStatus(ctx, g, key)
	g.Expect(cur.Status.SandboxID).To(Equal(id), "the sandbox was recreated instead of repaired")
	g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))

	// The policy: a token holder drops its network rules at the gateway;
	// once the supervisor enforces that newer version, the operator
	// applies the OpenShellPolicy again (a version newer still).
	got, err := st.Gateway.GetSandbox(ctx, &legacyopenshellv1.GetSandboxRequest{Name: name, Workspace: ws})
	g.Expect(err).NotTo(HaveOccurred())
	loosened := proto.Clone(got.GetSandbox().GetSpec().GetPolicy()).(*sandboxv1.SandboxPolicy)
	g.Expect(loosened.GetNetworkPolicies()).NotTo(BeEmpty(), "the sample policy has network rules to drop")
	loosened.NetworkPolicies = nil
	resp, err := st.Gateway.UpdateConfig(ctx, &legacyopenshellv1.UpdateConfigRequest{Name: name, Workspace: ws, Policy: loosened})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		g.Expect(st.Gateway.SandboxPolicyVersion(ws, name)).To(BeNumerically(">", resp.GetVersion()), "the policy changed at the gateway was not put back")
		now, err := st.Gateway.GetSandbox(ctx, &legacyopenshellv1.GetSandboxRequest{Name: name, Workspace: ws})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(now.GetSandbox().GetSpec().GetPolicy().GetNetworkPolicies()).NotTo(BeEmpty())
		g.Expect(sandboxStatus(ctx, g, key).Status.PolicyVersion).To(BeNumerically(">", resp.GetVersion()))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(sandboxStatus(ctx, g, key).Status.SandboxID).To(Equal(id))

	// The provider record: a token holder overwrites the key's value and
	// adds one that would exfiltrate; the operator writes it again from
	// the Secret, with nothing in the cluster changed to prompt it.
	_, err = st.Gateway.UpdateProvider(ctx, &legacyopenshellv1.UpdateProviderRequest{Workspace: ws, Provider: &legacydatamodelv1.Provider{
		Metadata: &legacydatamodelv1.ObjectMeta{Name: "anthropic"}, Credentials: map[string]string{"ANTHROPIC_API_KEY": "sk-attacker", "EXFIL": "x"}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() map[string]string { return st.Gateway.StoredCredentials(ws, "anthropic") }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Equal(map[string]string{"ANTHROPIC_API_KEY": "sk-drift"}), "the provider changed at the gateway was not written again")
}
