package e2e

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestProviderCredentialRefresh runs spec.refresh through the operator
// against a 0.1 gateway: refused until the Platform Admin allows the
// strategy on the gateway; then configured from the material Secret (every
// key secret); the gateway's mint reported as Refreshed and kept through
// drift sweeps and a rotation of the credentials Secret; the rotate
// annotation minting once per value; a failing mint reported without the
// material (its rotation not retried); and the real openshell SDK, as a workspace user, reading the
// refresh the operator made.
func TestProviderCredentialRefresh(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	// A short sweep: every drift comparison after a mint sees a new
	// resource version at the gateway.
	st, tenants, _ := startLineStackWith(ctx, t, g, "refresh", 1, operator.ControllerOptions{SweepPeriod: 2 * time.Second})
	tenant := tenants[0]
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	gw := st.Gateway
	ws := sandboxWorkspace(ctx, g, tenant)

	g.Expect(c.Create(ctx, githubProfile(tenant, "api.github.com"))).To(Succeed())
	const refreshToken = "rt-e2e-very-secret"
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bot-refresh", Namespace: tenant},
		StringData: map[string]string{"client_id": "bot", "refresh_token": refreshToken}})).To(Succeed())
	sb := providerTenant(ctx, t, g, tenant, "bot", "github", st.GatewayObj)
	prov := client.ObjectKey{Namespace: tenant, Name: "bot"}
	editProvider(ctx, g, prov, func(p *openshellv1alpha1.OpenShellProvider) {
		p.Spec.Refresh = []openshellv1alpha1.CredentialRefresh{{CredentialKey: "ACCESS_TOKEN", Strategy: openshellv1alpha1.RefreshOAuth2RefreshToken,
			MaterialSecretRef: openshellv1alpha1.LocalObjectReference{Name: "bot-refresh"}}}
	})
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)

	// The gateway does not allow it: nothing reaches the gateway.
	expectRefreshed(ctx, g, prov, openshellv1alpha1.RefreshReasonNotAllowed, "allowedRefreshStrategies")
	g.Expect(gw.Calls()["ConfigureProviderRefresh"]).To(BeZero())

	// The Platform Admin allows it: configured, every material key secret.
	editGateway(ctx, g, client.ObjectKeyFromObject(st.GatewayObj), func(cur *openshellv1alpha1.OpenShellGateway) {
		cur.Spec.SandboxControls.AllowedRefreshStrategies = []openshellv1alpha1.CredentialRefreshStrategy{openshellv1alpha1.RefreshOAuth2RefreshToken}
	})
	expectRefreshed(ctx, g, prov, openshellv1alpha1.RefreshReasonPending, "ACCESS_TOKEN")
	material, secretKeys, ok := gw.RefreshMaterial(ws, "bot", "ACCESS_TOKEN")
	g.Expect(ok).To(BeTrue())
	g.Expect(material).To(HaveKeyWithValue("refresh_token", refreshToken))
	g.Expect(secretKeys).To(ConsistOf("client_id", "refresh_token"))

	// The gateway mints: Refreshed, and the minted value outlives drift
	// sweeps (each mint is a new resource version) and a rotation of the
	// credentials Secret.
	g.Expect(gw.RunRefreshWorker()).To(Equal(1))
	minted := credential(gw, ws, "bot", "ACCESS_TOKEN")
	expectRefreshed(ctx, g, prov, openshellv1alpha1.RefreshReasonRefreshed, "")
	rotateSecret(ctx, g, client.ObjectKey{Namespace: tenant, Name: "bot-token"}, map[string]string{"TOKEN": "t-rotated", "ACCESS_TOKEN": "stale"})
	g.Eventually(func() string { return credential(gw, ws, "bot", "TOKEN") }).WithContext(ctx).WithTimeout(30 * time.Second).
		Should(Equal("t-rotated"))
	sweeps := gw.Calls()["GetProvider"]
	g.Eventually(func() int { return gw.Calls()["GetProvider"] }).WithContext(ctx).WithTimeout(30*time.Second).Should(BeNumerically(">=", sweeps+2),
		"two drift sweeps")
	g.Expect(credential(gw, ws, "bot", "ACCESS_TOKEN")).To(Equal(minted), "drift repair or the Secret's rotation reverted the minted credential")
	g.Expect(providerReady(ctx, g, &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "bot"}}).Reason).
		To(Equal(openshellv1alpha1.ProviderReasonSynced))

	// Rotate now: one mint for one annotation value.
	editProvider(ctx, g, prov, func(p *openshellv1alpha1.OpenShellProvider) {
		p.Annotations = map[string]string{openshellv1alpha1.AnnotationRotateCredentials: "first"}
	})
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellProvider{}
		g.Expect(c.Get(ctx, prov, cur)).To(Succeed())
		g.Expect(cur.Status.Gateways).To(HaveLen(1))
		g.Expect(cur.Status.Gateways[0].Rotation).To(Equal("first"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func() int { return gw.Calls()["RotateProviderCredential"] }).WithContext(ctx).WithTimeout(4 * time.Second).Should(Equal(1))
	g.Expect(credential(gw, ws, "bot", "ACCESS_TOKEN")).NotTo(Equal(minted))

	// The real SDK, as a workspace user (alice's exchanged token), reads
	// the refresh the operator made.
	installOLMAggregatedRoles(ctx, t)
	bind(ctx, t, tenant, "alice", "admin")
	r, err := st.StartRelay(ctx, cluster.Config, st.GatewayObj.Namespace, zap.New(zap.WriteTo(io.Discard)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(r.Stop(context.Background(), c)).To(Succeed()) })
	var tok *accessv1alpha1.SandboxToken
	g.Eventually(func() (err error) {
		tok, err = exchangeAs(ctx, userConfig("alice"), tenant, sb.Name)
		return err
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	var seen struct {
		Refresh map[string]struct {
			Status      string `json:"status"`
			LastRefresh int64  `json:"lastRefresh"`
		} `json:"refresh"`
	}
	out := runPythonClient(ctx, t, st, tok.Token, ws, sandboxspec.SandboxName(tenant, sb.Name), "OPENSHELL_PROVIDER=bot")
	g.Expect(json.Unmarshal(out, &seen)).To(Succeed(), string(out))
	g.Expect(seen.Refresh).To(HaveKey("ACCESS_TOKEN"))
	g.Expect(seen.Refresh["ACCESS_TOKEN"].Status).To(Equal("refreshed"))
	g.Expect(seen.Refresh["ACCESS_TOKEN"].LastRefresh).To(BeNumerically(">", 0))

	// A rotation whose mint fails, with error text quoting the material:
	// reported, with the material masked in status and events.
	gw.FailRefresh("invalid_grant", 2, "token endpoint refused refresh_token="+refreshToken)
	t.Cleanup(func() { gw.FailRefresh("", 0, "") })
	editProvider(ctx, g, prov, func(p *openshellv1alpha1.OpenShellProvider) {
		p.Annotations = map[string]string{openshellv1alpha1.AnnotationRotateCredentials: "second"}
	})
	expectRefreshed(ctx, g, prov, openshellv1alpha1.RefreshReasonFailed, "invalid_grant")
	cur := &openshellv1alpha1.OpenShellProvider{}
	g.Expect(c.Get(ctx, prov, cur)).To(Succeed())
	raw, _ := json.Marshal(cur)
	g.Expect(string(raw)).NotTo(ContainSubstring(refreshToken))
	g.Consistently(func() int { return gw.Calls()["RotateProviderCredential"] }).WithContext(ctx).WithTimeout(4*time.Second).
		Should(Equal(2), "a failed rotation is tried once per value")
	events := &corev1.EventList{}
	g.Expect(c.List(ctx, events, client.InNamespace(tenant))).To(Succeed())
	for _, e := range events.Items {
		g.Expect(e.Message).NotTo(ContainSubstring(refreshToken), "event %s", e.Name)
	}
}

// expectRefreshed waits for the provider's Refreshed reason (True for
// Refreshed) and a message mentioning mentions.
func expectRefreshed(ctx context.Context, g Gomega, key client.ObjectKey, reason, mentions string) {
	g.EventuallyWithOffset(1, func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellProvider{}
		g.Expect(cluster.Client.Get(ctx, key, cur)).To(Succeed())
		c := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionRefreshed)
		g.Expect(c).NotTo(BeNil(), "%+v", cur.Status)
		g.Expect(c.Reason).To(Equal(reason), "%+v", c)
		g.Expect(c.Message).To(ContainSubstring(mentions))
		g.Expect(c.ObservedGeneration).To(Equal(cur.Generation))
	}).WithContext(ctx).WithTimeout(45 * time.Second).Should(Succeed())
}

func editProvider(ctx context.Context, g Gomega, key client.ObjectKey, edit func(*openshellv1alpha1.OpenShellProvider)) {
	g.ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellProvider{}
		if err := cluster.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		edit(cur)
		return cluster.Client.Update(ctx, cur)
	})).To(Succeed())
}

func rotateSecret(ctx context.Context, g Gomega, key client.ObjectKey, data map[string]string) {
	g.ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Secret{}
		if err := cluster.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		cur.Data, cur.StringData = nil, data
		return cluster.Client.Update(ctx, cur)
	})).To(Succeed())
}

// credential is what the gateway holds for a provider's key ("" if none).
func credential(gw *testgateway.Gateway, ws, provider, key string) string {
	v, _ := gw.ProviderCredential(ws, provider, key)
	return v
}
