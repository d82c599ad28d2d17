package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// loadSample reads a sample from config/samples into obj.
func loadSample(t *testing.T, file string, obj client.Object) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatal(err)
	}
}

func sandboxStatus(ctx context.Context, g Gomega, key client.ObjectKey) *openshellv1alpha1.OpenShellSandbox {
	sb := &openshellv1alpha1.OpenShellSandbox{}
	g.Expect(cluster.Client.Get(ctx, key, sb)).To(Succeed())
	return sb
}

// TestSandboxLifecycle applies the samples in a tenant namespace against an
// External gateway (the test gateway) and walks a sandbox through Ready,
// an in-place policy edit, a provider rotation, an image change (recreate),
// tenant isolation, a rejected image, a gateway outage and deletion.
func TestSandboxLifecycle(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "platform")
	sbNS := framework.CreateNamespace(ctx, t, c, "sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "tenant-a")
	other := framework.CreateNamespace(ctx, t, c, "tenant-b")

	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS,
		ImagePolicy: openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyEnforce, WhenNoPolicy: openshellv1alpha1.NoPolicyDeny}})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()

	g.Eventually(func(g Gomega) {
		gw := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), gw)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(gw.Status.Conditions, openshellv1alpha1.ConditionGatewayReachable)).To(BeTrue(), "%+v", gw.Status.Conditions)
		g.Expect(gw.Status.Phase).To(Equal(openshellv1alpha1.GatewayPhaseAvailable))
		g.Expect(gw.Status.Version).NotTo(BeEmpty())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	// The tenant admin's objects, from the samples.
	secret, sb := createSampleTenant(ctx, t, tenant, "sk-test-first-value", client.ObjectKey{Namespace: gwNS, Name: st.GatewayObj.Name})
	key := client.ObjectKeyFromObject(sb)

	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
		g.Expect(cur.Status.SandboxID).NotTo(BeEmpty())
		g.Expect(cur.Status.AgentSandbox).NotTo(BeNil())
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)
	cur := sandboxStatus(ctx, g, key)
	pod := &corev1.Pod{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: cur.Status.AgentSandbox.Name}, pod)).To(Succeed())
	g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	g.Expect(pod.Spec.InitContainers).NotTo(BeEmpty(), "the sandbox pod has the sidecar shape")
	tenantNS := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: tenant}, tenantNS)).To(Succeed())
	ws, name := sandboxspec.WorkspaceName(tenant, tenantNS.UID), sandboxspec.SandboxName(tenant, sb.Name)
	g.Expect(cur.Status.Workspace).To(Equal(ws))
	g.Expect(cur.Status.GatewaySandboxName).To(Equal(name))
	g.Expect(st.Gateway.StoredCredentials(ws, "anthropic")).To(Equal(map[string]string{"ANTHROPIC_API_KEY": "sk-test-first-value"}))

	// Each subtest below starts from whatever state the others left and
	// asserts only its own change: they can run alone (-run) or in any order.
	t.Run("policy network edit applies in place", func(t *testing.T) {
		g := NewWithT(t)
		before := st.Gateway.SandboxPolicyVersion(ws, name)
		id := sandboxStatus(ctx, g, key).Status.SandboxID
		addNetworkRule(ctx, g, tenant, "restricted", "github", "api.github.com")
		g.Eventually(func(g Gomega) {
			g.Expect(st.Gateway.SandboxPolicyVersion(ws, name)).To(Equal(before + 1))
			cur := sandboxStatus(ctx, g, key)
			g.Expect(cur.Status.SandboxID).To(Equal(id), "an in-place change must not recreate")
			g.Expect(cur.Status.PolicyVersion).To(Equal(int64(before + 1)))
		}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())
	})

	t.Run("credential rotation is pushed, values never shown", func(t *testing.T) {
		g := NewWithT(t)
		setSecretValue(ctx, g, client.ObjectKeyFromObject(secret), "ANTHROPIC_API_KEY", "sk-test-rotated-value")
		g.Eventually(func() map[string]string { return st.Gateway.StoredCredentials(ws, "anthropic") }).
			WithContext(ctx).WithTimeout(20 * time.Second).Should(Equal(map[string]string{"ANTHROPIC_API_KEY": "sk-test-rotated-value"}))
		p := &openshellv1alpha1.OpenShellProvider{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "anthropic"}, p)).To(Succeed())
		evs := &eventsv1.EventList{}
		g.Expect(c.List(ctx, evs, client.InNamespace(tenant))).To(Succeed())
		dump, _ := yaml.Marshal(map[string]any{"provider": p, "sandbox": sandboxStatus(ctx, g, key), "events": evs.Items})
		for _, v := range []string{"sk-test-first-value", "sk-test-rotated-value"} {
			g.Expect(string(dump)).NotTo(ContainSubstring(v), "a credential value leaked into status or events")
		}
	})

	t.Run("tenant B cannot use tenant A's policy, provider or secrets", func(t *testing.T) {
		g := NewWithT(t)
		ip := &openshellv1alpha1.OpenShellImagePolicy{}
		loadSample(t, "openshell_v1alpha1_openshellimagepolicy.yaml", ip)
		ip.Namespace = other
		g.Expect(c.Create(ctx, ip)).To(Succeed())
		b := sb.DeepCopy()
		b.ObjectMeta = metav1.ObjectMeta{Name: "borrower", Namespace: other}
		b.Spec.Env = []openshellv1alpha1.SandboxEnvVar{{Name: "KEY", ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{
			SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: "anthropic-credentials", Key: "ANTHROPIC_API_KEY"}}}}
		g.Expect(c.Create(ctx, b)).To(Succeed())
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(b))
			acc := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted)
			g.Expect(acc).NotTo(BeNil())
			g.Expect(acc.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(acc.Reason).To(Equal(openshellv1alpha1.SandboxReasonPolicyNotFound))
			g.Expect(meta.FindStatusCondition(cur.Status.Conditions, "ProvidersResolved").Reason).To(Equal(openshellv1alpha1.SandboxReasonProviderNotFound))
			g.Expect(cur.Status.SandboxID).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())
		// Remove the policy and provider references: the Secret of tenant A
		// is still out of reach.
		g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(b))
			cur.Spec.PolicyRef, cur.Spec.Providers = nil, nil
			return c.Update(ctx, cur)
		})).To(Succeed())
		g.Eventually(func(g Gomega) {
			acc := meta.FindStatusCondition(sandboxStatus(ctx, g, client.ObjectKeyFromObject(b)).Status.Conditions, openshellv1alpha1.ConditionAccepted)
			g.Expect(acc.Reason).To(Equal(openshellv1alpha1.SandboxReasonSecretNotFound))
			g.Expect(acc.Message).To(ContainSubstring("Secret anthropic-credentials not found in namespace " + other))
		}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())
	})

	t.Run("an unmirrored image is rejected", func(t *testing.T) {
		g := NewWithT(t)
		bad := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "unmirrored", Namespace: tenant},
			Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: sb.Spec.GatewayRef, Image: "docker.io/library/ubuntu:latest"}}
		g.Expect(c.Create(ctx, bad)).To(Succeed()) // no webhook in this cluster: the controller rejects it
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(bad))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseRejected))
			g.Expect(meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted).Reason).To(Equal(imagepolicy.ReasonImageNotMirrored))
		}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())
		g.Expect(st.Gateway.SandboxNames(ws)).NotTo(ContainElement(sandboxspec.SandboxName(tenant, "unmirrored")))
	})

	t.Run("a gateway sandbox that is not ours is never adopted", func(t *testing.T) {
		g := NewWithT(t)
		st.Gateway.SeedSandbox(ws, sandboxspec.SandboxName(tenant, "squatter"), map[string]string{sandboxspec.LabelOwnerUID: "someone-else"})
		sq := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "squatter", Namespace: tenant},
			Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: sb.Spec.GatewayRef}}
		g.Expect(c.Create(ctx, sq)).To(Succeed())
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sq))
			synced := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionSynced)
			g.Expect(synced).NotTo(BeNil())
			g.Expect(synced.Reason).To(Equal(openshellv1alpha1.SandboxReasonNameConflict))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseError))
			g.Expect(cur.Status.SandboxID).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())
	})

	t.Run("an image change recreates the sandbox", func(t *testing.T) {
		g := NewWithT(t)
		firstID := sandboxStatus(ctx, g, key).Status.SandboxID
		g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := sandboxStatus(ctx, g, key)
			if strings.Contains(cur.Spec.Image, "sandboxes/base") {
				cur.Spec.Image = strings.Replace(cur.Spec.Image, "sandboxes/base", "sandboxes/python", 1)
			} else {
				cur.Spec.Image = strings.Replace(cur.Spec.Image, "sandboxes/python", "sandboxes/base", 1)
			}
			return c.Update(ctx, cur)
		})).To(Succeed())
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, key)
			g.Expect(cur.Status.SandboxID).NotTo(BeEmpty())
			g.Expect(cur.Status.SandboxID).NotTo(Equal(firstID))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))
		}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
	})

	t.Run("an env Secret's rotation is reported, or recreates the sandbox when asked", func(t *testing.T) {
		g := NewWithT(t)
		envSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "agent-env", Namespace: tenant},
			Data: map[string][]byte{"TOKEN": []byte("env-value-one")}}
		g.Expect(c.Create(ctx, envSecret)).To(Succeed())
		spec := sandboxStatus(ctx, g, key).Spec.DeepCopy()
		spec.Env = []openshellv1alpha1.SandboxEnvVar{{Name: "TOKEN", ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{
			SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: "agent-env", Key: "TOKEN"}}}}
		reported := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "env-reported", Namespace: tenant}, Spec: *spec.DeepCopy()}
		restarted := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "env-restarted", Namespace: tenant}, Spec: *spec.DeepCopy()}
		restarted.Spec.RestartOnSecretChange = true
		ids := map[string]string{}
		for _, o := range []*openshellv1alpha1.OpenShellSandbox{reported, restarted} {
			g.Expect(c.Create(ctx, o)).To(Succeed())
			g.Eventually(func(g Gomega) {
				cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(o))
				g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
				g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.SandboxConditionEnvSecretsCurrent)).To(BeTrue(), "%+v", cur.Status.Conditions)
				ids[o.Name] = cur.Status.SandboxID
			}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
			g.Expect(st.Gateway.SandboxEnv(ws, sandboxspec.SandboxName(tenant, o.Name))).To(HaveKeyWithValue("TOKEN", "env-value-one"))
		}

		setSecretValue(ctx, g, client.ObjectKeyFromObject(envSecret), "TOKEN", "env-value-two")
		// Without restartOnSecretChange: reported, and it runs on with the
		// values it was created with.
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(reported))
			c := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionEnvSecretsCurrent)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(openshellv1alpha1.SandboxReasonEnvSecretChanged))
			g.Expect(c.Message).To(ContainSubstring("Secret agent-env"))
			g.Expect(cur.Status.SandboxID).To(Equal(ids[reported.Name]), "recreated without restartOnSecretChange")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		g.Expect(st.Gateway.SandboxEnv(ws, sandboxspec.SandboxName(tenant, reported.Name))).To(HaveKeyWithValue("TOKEN", "env-value-one"))
		// With it: recreated, with the new value.
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(restarted))
			g.Expect(cur.Status.SandboxID).NotTo(BeEmpty())
			g.Expect(cur.Status.SandboxID).NotTo(Equal(ids[restarted.Name]))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))
			g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.SandboxConditionEnvSecretsCurrent)).To(BeTrue(), "%+v", cur.Status.Conditions)
		}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
		g.Expect(st.Gateway.SandboxEnv(ws, sandboxspec.SandboxName(tenant, restarted.Name))).To(HaveKeyWithValue("TOKEN", "env-value-two"))
		// Never a value in status or events.
		evs := &eventsv1.EventList{}
		g.Expect(c.List(ctx, evs, client.InNamespace(tenant))).To(Succeed())
		dump, _ := yaml.Marshal(map[string]any{"reported": sandboxStatus(ctx, g, client.ObjectKeyFromObject(reported)),
			"restarted": sandboxStatus(ctx, g, client.ObjectKeyFromObject(restarted)), "events": evs.Items})
		for _, v := range []string{"env-value-one", "env-value-two"} {
			g.Expect(string(dump)).NotTo(ContainSubstring(v), "an env value leaked into status or events")
		}
		g.Expect(string(dump)).To(ContainSubstring(openshellv1alpha1.SandboxReasonEnvSecretChanged), "no event said the Secret changed")
		for _, o := range []*openshellv1alpha1.OpenShellSandbox{reported, restarted} {
			g.Expect(c.Delete(ctx, o)).To(Succeed())
		}
	})

	t.Run("a gateway outage is reported and recovered from", func(t *testing.T) {
		g := NewWithT(t)
		st.Gateway.SetUnavailable(true)
		addNetworkRule(ctx, g, tenant, "restricted", "during-outage", "pypi.org")
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, key)
			r := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionGatewayReachable)
			g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "an outage does not flap the phase")
		}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())
		st.Gateway.SetUnavailable(false)
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, key)
			g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionGatewayReachable)).To(BeTrue(), "%+v", cur.Status)
			g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionSynced)).To(BeTrue(), "%+v", cur.Status)
		}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
	})

	t.Run("deletion removes the gateway row, the Sandbox and its pod", func(t *testing.T) {
		g := NewWithT(t)
		// A sandbox of its own, so the others keep theirs.
		doomed := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "doomed", Namespace: tenant},
			Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: sb.Spec.GatewayRef, Image: sb.Spec.Image,
				PolicyRef: sb.Spec.PolicyRef, Providers: sb.Spec.Providers}}
		g.Expect(c.Create(ctx, doomed)).To(Succeed())
		dkey := client.ObjectKeyFromObject(doomed)
		var cur *openshellv1alpha1.OpenShellSandbox
		g.Eventually(func(g Gomega) {
			cur = sandboxStatus(ctx, g, dkey)
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
			g.Expect(cur.Status.AgentSandbox).NotTo(BeNil())
		}).WithContext(ctx).WithTimeout(60*time.Second).Should(Succeed(), cluster.CheckProcessesMessage)
		crName, dname := cur.Status.AgentSandbox.Name, cur.Status.GatewaySandboxName
		g.Expect(st.Gateway.SandboxNames(ws)).To(ContainElement(dname))
		g.Expect(c.Delete(ctx, cur)).To(Succeed())
		g.Eventually(func() error { return c.Get(ctx, dkey, &openshellv1alpha1.OpenShellSandbox{}) }).
			WithContext(ctx).WithTimeout(60 * time.Second).Should(Satisfy(apierrors.IsNotFound))
		g.Expect(st.Gateway.SandboxNames(ws)).NotTo(ContainElement(dname))
		cr := &unstructured.Unstructured{}
		cr.SetGroupVersionKind(sandboxGVK)
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, cr))).To(BeTrue())
		g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, &corev1.Pod{}) }).
			WithContext(ctx).WithTimeout(60 * time.Second).Should(Satisfy(apierrors.IsNotFound))
	})
}

// addNetworkRule appends an egress rule to a tenant's OpenShellPolicy, as
// its Tenant Admin edits it.
func addNetworkRule(ctx context.Context, g Gomega, ns, policy, rule, host string) {
	g.ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &openshellv1alpha1.OpenShellPolicy{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: policy}, p); err != nil {
			return err
		}
		port := int32(443)
		p.Spec.NetworkPolicies = append(p.Spec.NetworkPolicies, openshellv1alpha1.NetworkPolicyRule{Name: rule,
			Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: host, Port: &port}}})
		return cluster.Client.Update(ctx, p)
	})).To(Succeed())
}

// setSecretValue rotates one key of a Secret.
func setSecretValue(ctx context.Context, g Gomega, key client.ObjectKey, name, value string) {
	g.ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		if err := cluster.Client.Get(ctx, key, s); err != nil {
			return err
		}
		s.Data[name] = []byte(value)
		return cluster.Client.Update(ctx, s)
	})).To(Succeed())
}

// createSampleTenant creates, in ns, what the samples give a tenant: the
// credentials Secret (with value), the policy, provider and image policy,
// and the sample sandbox on gateway gw. It returns the Secret and sandbox.
// declareSampleProfile creates the sample OpenShellProviderProfile (the
// sample provider's type) in ns: what a 0.1 gateway needs imported before
// it serves that provider.
func declareSampleProfile(ctx context.Context, t *testing.T, ns string) *openshellv1alpha1.OpenShellProviderProfile {
	t.Helper()
	p := &openshellv1alpha1.OpenShellProviderProfile{}
	loadSample(t, "openshell_v1alpha1_openshellproviderprofile.yaml", p)
	p.Namespace = ns
	NewWithT(t).Expect(cluster.Client.Create(ctx, p)).To(Succeed())
	return p
}

func createSampleTenant(ctx context.Context, t *testing.T, ns, value string, gw client.ObjectKey) (*corev1.Secret, *openshellv1alpha1.OpenShellSandbox) {
	t.Helper()
	g := NewWithT(t)
	c := cluster.Client
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "anthropic-credentials", Namespace: ns},
		StringData: map[string]string{"ANTHROPIC_API_KEY": value}}
	g.Expect(c.Create(ctx, secret)).To(Succeed())
	for file, obj := range map[string]client.Object{
		"openshell_v1alpha1_openshellpolicy.yaml":      &openshellv1alpha1.OpenShellPolicy{},
		"openshell_v1alpha1_openshellprovider.yaml":    &openshellv1alpha1.OpenShellProvider{},
		"openshell_v1alpha1_openshellimagepolicy.yaml": &openshellv1alpha1.OpenShellImagePolicy{},
	} {
		loadSample(t, file, obj)
		obj.SetNamespace(ns)
		g.Expect(c.Create(ctx, obj)).To(Succeed(), file)
	}
	sb := &openshellv1alpha1.OpenShellSandbox{}
	loadSample(t, "openshell_v1alpha1_openshellsandbox.yaml", sb)
	sb.Namespace = ns
	sb.Spec.GatewayRef = openshellv1alpha1.GatewayReference{Name: gw.Name, Namespace: gw.Namespace}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	return secret, sb
}
