package webhook_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

var env *framework.Env

// platformNS holds the tests' gateways: the operator serves gateways there.
const platformNS = "openshell-platform"

func TestMain(m *testing.M) {
	flag.Parse()
	framework.SetupLogging()
	if testing.Short() {
		fmt.Println("skipping webhook integration tests in -short mode")
		os.Exit(0)
	}
	var err error
	env, err = framework.StartEnv(framework.EnvOptions{
		AgentSandbox: framework.AgentSandboxBetaOnly,
		Webhooks: &envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(framework.RepoRoot(), "config", "webhook", "manifests.yaml")},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: platformNS}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	done, err := startManager(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	_ = env.Stop()
	os.Exit(code)
}

func startManager(ctx context.Context) (<-chan error, error) {
	wh := env.WebhookInstallOptions
	mgr, err := operator.New(env.Config, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: wh.LocalServingHost, WebhookPort: wh.LocalServingPort, WebhookCertDir: wh.LocalServingCertDir,
		// No gateway answers here: a deleted sandbox is released by
		// force-release, with no grace to wait out.
		Controllers: operator.ControllerOptions{EnableWebhooks: true, Platform: tenancy.Platform{OperatorNamespace: platformNS, GatewayNamespaces: []string{platformNS}},
			ForceReleaseAfter: time.Millisecond},
	})
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	// Wait until the webhook answers before running tests.
	err = framework.WaitFor(ctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		return mgr.GetWebhookServer().StartedChecker()(nil) == nil, nil
	})
	return done, err
}

const digest = "@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

type tenant struct {
	ns string
	gw *openshellv1alpha1.OpenShellGateway
}

// newTenant creates a namespace with a gateway using the given enforcement
// and, when allowed is non-nil, an image policy.
func newTenant(ctx context.Context, t *testing.T, enf openshellv1alpha1.ImagePolicyEnforcement, allowed []string, mirrors ...openshellv1alpha1.ImageMirror) tenant {
	t.Helper()
	g := NewWithT(t)
	ns := framework.CreateNamespace(ctx, t, env.Client, "img")
	// The tenant's own gateway, in the platform namespace, admitting only it.
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: ns, Namespace: platformNS},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{ImagePolicy: enf, SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(false)},
			Tenancy: openshellv1alpha1.GatewayTenancy{
				AllowedNamespaces: openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromSelector,
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}}}}}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), gw) })
	g.Expect(env.Client.Create(ctx, gw)).To(Succeed())
	if allowed != nil || mirrors != nil {
		p := &openshellv1alpha1.OpenShellImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "mirrors", Namespace: ns},
			Spec: openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: allowed, Mirrors: mirrors}}
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	}
	// The webhook reads through the manager's cache. The controllers write
	// status from that same cache, so once both objects carry status the
	// webhook sees them too and admission decisions are deterministic.
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
		if allowed != nil || mirrors != nil {
			p := &openshellv1alpha1.OpenShellImagePolicy{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mirrors"}, p)).To(Succeed())
			g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
		}
	}).WithTimeout(10 * time.Second).Should(Succeed())
	return tenant{ns: ns, gw: gw}
}

func sandbox(ns, name, image string) *openshellv1alpha1.OpenShellSandbox {
	return &openshellv1alpha1.OpenShellSandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: ns, Namespace: platformNS}, Image: image},
	}
}

var (
	enforceDeny  = openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyEnforce, WhenNoPolicy: openshellv1alpha1.NoPolicyDeny}
	enforceAllow = openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyEnforce, WhenNoPolicy: openshellv1alpha1.NoPolicyAllow}
	warnDeny     = openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyWarn, WhenNoPolicy: openshellv1alpha1.NoPolicyDeny}
	disabled     = openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyDisabled, WhenNoPolicy: openshellv1alpha1.NoPolicyDeny}
)

func TestAdmission(t *testing.T) {
	ctx := context.Background()
	tn := newTenant(ctx, t, enforceDeny, []string{"mirror.corp/openshell"},
		openshellv1alpha1.ImageMirror{Source: "ghcr.io/nvidia/openshell-community", Mirrors: []string{"mirror.corp/community"}})
	for _, tt := range []struct {
		name, image, reason, hint string
	}{
		{"mirrored by digest", "mirror.corp/openshell/base" + digest, "", ""},
		{"mapped source by digest", "ghcr.io/nvidia/openshell-community/sandboxes/base" + digest, "", ""},
		{"default image", "", "", ""},
		{"not mirrored", "docker.io/library/ubuntu:latest", imagepolicy.ReasonImageNotMirrored, "closest allowed: "},
		{"tag only", "mirror.corp/openshell/base:1.0", imagepolicy.ReasonImageNotDigestPinned, "pin it as mirror.corp/openshell/base@sha256:<digest>"},
		{"boundary trick", "mirror.corp/openshell-evil/base" + digest, imagepolicy.ReasonImageNotAllowed, "closest allowed: mirror.corp/openshell"},
		{"invalid", "mirror.corp/OpenShell/base" + digest, imagepolicy.ReasonImageReferenceInvalid, "must be lowercase"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			name := strings.ReplaceAll(tt.name, " ", "-")
			err := env.Client.Create(ctx, sandbox(tn.ns, name, tt.image))
			if tt.reason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(`denied the request: ` + tt.reason + ": "))
			g.Expect(err.Error()).To(ContainSubstring(tt.hint), "the message says what to do")
		})
	}

	t.Run("the finalizer is set at admission", func(t *testing.T) {
		// A dry run shows what admission made of the object; no controller
		// ever sees it, so the finalizer can only come from the webhook.
		g := NewWithT(t)
		sb := sandbox(tn.ns, "finalized", "mirror.corp/openshell/base"+digest)
		sb.Finalizers = []string{"team.example/keep"}
		g.Expect(env.Client.Create(ctx, sb, client.DryRunAll)).To(Succeed())
		g.Expect(sb.Finalizers).To(Equal([]string{"team.example/keep", openshellv1alpha1.SandboxFinalizer}))
		denied := sandbox(tn.ns, "finalized-denied", "docker.io/library/ubuntu:latest")
		g.Expect(apierrors.IsForbidden(env.Client.Create(ctx, denied, client.DryRunAll))).To(BeTrue(), "validation still runs after the mutation")
	})

	t.Run("update to a bad image is denied, other updates are not", func(t *testing.T) {
		g := NewWithT(t)
		sb := sandbox(tn.ns, "updated", "mirror.corp/openshell/base"+digest)
		g.Expect(env.Client.Create(ctx, sb)).To(Succeed())
		bad := sb.DeepCopy()
		bad.Spec.Image = "docker.io/library/ubuntu" + digest
		err := env.Client.Patch(ctx, bad, client.MergeFrom(sb))
		g.Expect(err).To(MatchError(ContainSubstring(imagepolicy.ReasonImageNotMirrored)))
		labelled := sb.DeepCopy()
		labelled.Labels = map[string]string{"team": "a"}
		g.Expect(env.Client.Patch(ctx, labelled, client.MergeFrom(sb))).To(Succeed())
	})
}

func TestNoPolicyAndIsolation(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	denyNS := newTenant(ctx, t, enforceDeny, nil)
	err := env.Client.Create(ctx, sandbox(denyNS.ns, "s", "mirror.corp/openshell/base"+digest))
	g.Expect(err).To(MatchError(ContainSubstring(imagepolicy.ReasonImageNotAllowed + ": ")))
	g.Expect(err).To(MatchError(ContainSubstring("has no OpenShellImagePolicy")))

	allowNS := newTenant(ctx, t, enforceAllow, nil)
	g.Expect(env.Client.Create(ctx, sandbox(allowNS.ns, "s", "docker.io/library/ubuntu:latest"))).To(Succeed())

	// A policy in another namespace does not allow anything here.
	other := newTenant(ctx, t, enforceDeny, []string{"docker.io/library"})
	_ = other
	err = env.Client.Create(ctx, sandbox(denyNS.ns, "s2", "docker.io/library/ubuntu"+digest))
	g.Expect(err).To(MatchError(ContainSubstring(imagepolicy.ReasonImageNotAllowed)))

	off := newTenant(ctx, t, disabled, nil)
	g.Expect(env.Client.Create(ctx, sandbox(off.ns, "s", "anything.example/x:latest"))).To(Succeed())
}

// warnings records admission warnings returned to a client.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func TestWarnMode(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tn := newTenant(ctx, t, warnDeny, []string{"mirror.corp/openshell"})
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())

	sb := sandbox(tn.ns, "warned", "docker.io/library/ubuntu"+digest)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	g.Expect(w.msgs).To(ContainElement(And(HavePrefix(imagepolicy.ReasonImageNotMirrored+": "), ContainSubstring("mode is Warn"))))

	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(sb), sb)).To(Succeed())
		img := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionImageAllowed)
		g.Expect(img).NotTo(BeNil())
		g.Expect(img.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(img.Reason).To(Equal(imagepolicy.ReasonImageNotMirrored))
		g.Expect(meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.ConditionAccepted)).To(BeTrue())
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// TestPolicyEditReevaluatesSandboxes: tightening a policy turns an admitted
// sandbox that has not been created at the gateway into Rejected with the
// reason; loosening it again accepts it.
func TestPolicyEditReevaluatesSandboxes(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tn := newTenant(ctx, t, enforceDeny, []string{"mirror.corp/openshell", "mirror.corp/extra"})
	sb := sandbox(tn.ns, "agent", "mirror.corp/extra/agent"+digest)
	g.Expect(env.Client.Create(ctx, sb)).To(Succeed())

	expect := func(phase openshellv1alpha1.SandboxPhase, image metav1.ConditionStatus, reason string) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			cur := &openshellv1alpha1.OpenShellSandbox{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(sb), cur)).To(Succeed())
			g.Expect(cur.Status.Phase).To(Equal(phase))
			img := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionImageAllowed)
			g.Expect(img).NotTo(BeNil())
			g.Expect(img.Status).To(Equal(image))
			g.Expect(img.Reason).To(Equal(reason))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	}
	expect(openshellv1alpha1.SandboxPhasePending, metav1.ConditionTrue, imagepolicy.ReasonAllowed)

	setAllowed := func(allowed ...string) {
		t.Helper()
		g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := &openshellv1alpha1.OpenShellImagePolicy{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: "mirrors"}, p); err != nil {
				return err
			}
			p.Spec.AllowedMirrors = allowed
			return env.Client.Update(ctx, p)
		})).To(Succeed())
	}
	setAllowed("mirror.corp/openshell")
	expect(openshellv1alpha1.SandboxPhaseRejected, metav1.ConditionFalse, imagepolicy.ReasonImageNotAllowed)
	cur := &openshellv1alpha1.OpenShellSandbox{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(sb), cur)).To(Succeed())
	acc := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted)
	g.Expect(acc.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(acc.Reason).To(Equal(imagepolicy.ReasonImageNotAllowed))

	setAllowed("mirror.corp/openshell", "mirror.corp/extra")
	expect(openshellv1alpha1.SandboxPhasePending, metav1.ConditionTrue, imagepolicy.ReasonAllowed)

	// A gateway switch to Disabled is seen through the gateway index.
	setAllowed("mirror.corp/openshell")
	expect(openshellv1alpha1.SandboxPhaseRejected, metav1.ConditionFalse, imagepolicy.ReasonImageNotAllowed)
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gw := &openshellv1alpha1.OpenShellGateway{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tn.gw), gw); err != nil {
			return err
		}
		gw.Spec.ImagePolicy.Mode = openshellv1alpha1.ImagePolicyDisabled
		return env.Client.Update(ctx, gw)
	})).To(Succeed())
	expect(openshellv1alpha1.SandboxPhasePending, metav1.ConditionTrue, imagepolicy.ReasonPolicyDisabled)
}

func TestInvalidPolicyEntriesAreReported(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tn := newTenant(ctx, t, enforceDeny, []string{"mirror.corp/ok", "library/ubuntu"})
	g.Eventually(func(g Gomega) {
		p := &openshellv1alpha1.OpenShellImagePolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: "mirrors"}, p)).To(Succeed())
		c := meta.FindStatusCondition(p.Status.Conditions, openshellv1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal("InvalidEntry"))
		g.Expect(c.Message).To(ContainSubstring(`spec.allowedMirrors[1] "library/ubuntu": location "library/ubuntu" must start with a registry host`))
		g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// TestPolicyInUseCannotBeDeleted: deleting a policy that a sandbox
// references is refused with the sandbox named, the policy counts its
// users, and once the sandbox stops referencing it the policy goes.
func TestPolicyInUseCannotBeDeleted(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tn := newTenant(ctx, t, enforceAllow, nil)
	p := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "restricted", Namespace: tn.ns}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	sb := sandbox(tn.ns, "user", "")
	sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "restricted"}
	g.Expect(env.Client.Create(ctx, sb)).To(Succeed())

	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), cur)).To(Succeed())
		g.Expect(cur.Status.SandboxCount).To(Equal(int32(1)))
		g.Expect(cur.Finalizers).To(ContainElement("openshell.ai/policy-in-use"))
	}).WithTimeout(10 * time.Second).Should(Succeed())

	err := env.Client.Delete(ctx, p)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("PolicyInUse: OpenShellPolicy restricted is used by OpenShellSandbox user"))

	// No gateway answers in this environment, so the deletion waits for
	// its word until force-released (as a cluster admin may).
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(sb), sb); err != nil {
			return err
		}
		sb.Annotations = map[string]string{openshellv1alpha1.AnnotationForceRelease: "true"}
		return env.Client.Update(ctx, sb)
	})).To(Succeed())
	g.Expect(env.Client.Delete(ctx, sb)).To(Succeed())
	g.Eventually(func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(sb), sb) }).
		WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
	g.Eventually(func() error { return env.Client.Delete(ctx, p) }).WithTimeout(10 * time.Second).Should(Succeed())
	g.Eventually(func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(p), p) }).
		WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
}

// TestPolicyRefCannotChangeTheProcessIdentity: moving a sandbox to another
// policy obeys the rule a policy's own spec.process obeys — the identity a
// running agent runs as cannot change — as an editor would try it.
func TestPolicyRefCannotChangeTheProcessIdentity(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tn := newTenant(ctx, t, enforceAllow, nil)
	policy := func(name string, process *openshellv1alpha1.ProcessPolicy) {
		g.Expect(env.Client.Create(ctx, &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.ns},
			Spec: openshellv1alpha1.OpenShellPolicySpec{Process: process}})).To(Succeed())
	}
	policy("sandbox-user", &openshellv1alpha1.ProcessPolicy{RunAsUser: "sandbox", RunAsGroup: "sandbox"})
	policy("same-identity", &openshellv1alpha1.ProcessPolicy{RunAsUser: "sandbox", RunAsGroup: "sandbox"})
	policy("uid-1000", &openshellv1alpha1.ProcessPolicy{RunAsUser: "1000", RunAsGroup: "1000"})
	policy("no-process", nil)
	policy("empty-process", &openshellv1alpha1.ProcessPolicy{})
	for _, name := range []string{"sandbox-user", "same-identity", "uid-1000", "no-process", "empty-process"} {
		g.Eventually(func() error {
			return env.Client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: name}, &openshellv1alpha1.OpenShellPolicy{})
		}).WithTimeout(10 * time.Second).Should(Succeed())
	}
	sb := sandbox(tn.ns, "agent", "")
	sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "sandbox-user"}
	g.Expect(env.Client.Create(ctx, sb)).To(Succeed())

	// The controller writes the sandbox too: retry on conflicts only.
	refOf := func(key client.ObjectKey, name string) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &openshellv1alpha1.OpenShellSandbox{}
			if err := env.Client.Get(ctx, key, cur); err != nil {
				return err
			}
			cur.Spec.PolicyRef = nil
			if name != "" {
				cur.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: name}
			}
			return env.Client.Update(ctx, cur)
		})
	}
	setRef := func(name string) error { return refOf(client.ObjectKeyFromObject(sb), name) }
	refused := func(err error) {
		t.Helper()
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("ProcessIdentityImmutable: spec.policyRef"))
		g.Expect(err.Error()).To(ContainSubstring("create a new sandbox with that policy"))
	}
	// The cache the webhook reads may lag the policies just created: the
	// allowed move is retried until it is seen.
	g.Eventually(func() error { return setRef("same-identity") }).WithTimeout(10 * time.Second).Should(Succeed())
	refused(setRef("uid-1000"))
	refused(setRef(""))           // dropping the policy: the gateway's default identity
	refused(setRef("no-process")) // a policy without spec.process: the same
	// A sandbox under the default identity may move between policies that
	// keep it, and a policy that does not exist (yet) decides nothing.
	other := sandbox(tn.ns, "default-identity", "")
	g.Expect(env.Client.Create(ctx, other)).To(Succeed())
	for _, name := range []string{"no-process", "empty-process", "not-there"} {
		g.Expect(refOf(client.ObjectKeyFromObject(other), name)).To(Succeed(), name)
	}
}

// TestSandboxControlsAreEnforcedAtAdmission: each of a gateway's
// spec.sandboxControls refuses a sandbox over it with its reason and the
// field at fault, on create and on update, as a sandbox user would meet it.
func TestSandboxControlsAreEnforcedAtAdmission(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tn := newTenant(ctx, t, enforceAllow, nil)
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tn.gw), cur)).To(Succeed())
	cur.Spec.SandboxControls = openshellv1alpha1.SandboxControls{
		RequirePolicy:         ptr.To(false),
		MaxResources:          corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Gi")},
		MaxGPUs:               ptr.To[int32](1),
		AllowedRuntimeClasses: []string{"kata"},
		AllowedProviderTypes:  []string{"claude-code"},
	}
	g.Expect(env.Client.Update(ctx, cur)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tn.gw), cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	g.Expect(env.Client.Create(ctx, &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: "gh", Namespace: tn.ns},
		Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "github", CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: "gh-token"}}})).To(Succeed())

	refused := func(err error, reason, field, text string) {
		t.Helper()
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring(reason + ": " + text))
		status, ok := err.(apierrors.APIStatus)
		g.Expect(ok).To(BeTrue())
		g.Expect(status.Status().Details.Causes).To(ContainElement(And(HaveField("Type", metav1.CauseType(reason)), HaveField("Field", field))))
	}
	big := sandbox(tn.ns, "big", "")
	big.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi")}}
	refused(env.Client.Create(ctx, big), "ResourceLimitExceeded", "spec.resources.limits.memory", "spec.resources.limits.memory 64Gi exceeds gateway")
	// Under a memory ceiling a sandbox must declare its memory limit.
	bounded := func(name string) *openshellv1alpha1.OpenShellSandbox {
		sb := sandbox(tn.ns, name, "")
		sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		return sb
	}
	noClass := bounded("no-class") // allowedRuntimeClasses without a default: one must be named
	refused(env.Client.Create(ctx, noClass), "RuntimeClassNotAllowed", "spec.runtimeClassName", "no RuntimeClass (and the gateway sets no default) is not allowed")
	refused(env.Client.Create(ctx, sandbox(tn.ns, "unbounded", "")), "ResourceLimitExceeded", "spec.resources.limits.memory", "gateway "+platformNS+"/"+tn.gw.Name+" caps memory at 16Gi per sandbox")
	runc := bounded("runc")
	runc.Spec.RuntimeClassName = "runc"
	refused(env.Client.Create(ctx, runc), "RuntimeClassNotAllowed", "spec.runtimeClassName", `RuntimeClass "runc" is not allowed`)
	gh := bounded("gh")
	gh.Spec.Providers = []string{"gh"}
	gh.Spec.RuntimeClassName = "kata"
	g.Eventually(func() error { return env.Client.Create(ctx, gh) }).WithTimeout(10 * time.Second).
		Should(MatchError(ContainSubstring(`ProviderNotAllowed: OpenShellProvider gh has type "github"`)))

	ok := bounded("within")
	ok.Spec.RuntimeClassName = "kata"
	ok.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 1}
	g.Expect(env.Client.Create(ctx, ok)).To(Succeed())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ok), cur); err != nil {
			return err
		}
		cur.Spec.GPU.Count = 2
		return env.Client.Update(ctx, cur)
	})
	refused(err, "ResourceLimitExceeded", "spec.gpu.count", "2 GPUs and devices (spec.gpu.count and every extended resource")
}

// TestPolicyIsRequired: on a gateway that requires a policy (the API
// default), a sandbox user cannot create a sandbox without one, nor drop
// the one a sandbox has, unless the namespace's Tenant Admin marked a
// default policy; two defaults are refused as ambiguous.
func TestPolicyIsRequired(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tn := newTenant(ctx, t, enforceAllow, nil)
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tn.gw), cur)).To(Succeed())
	cur.Spec.SandboxControls.RequirePolicy = nil // the API defaults it to true
	g.Expect(env.Client.Update(ctx, cur)).To(Succeed())
	g.Expect(*cur.Spec.SandboxControls.RequirePolicy).To(BeTrue(), "requirePolicy defaults to true")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tn.gw), cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}).WithTimeout(10 * time.Second).Should(Succeed())

	err := env.Client.Create(ctx, sandbox(tn.ns, "no-policy", ""))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("PolicyRequired: gateway " + platformNS + "/" + tn.gw.Name + " requires a policy"))

	g.Expect(env.Client.Create(ctx, &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "named", Namespace: tn.ns}})).To(Succeed())
	named := sandbox(tn.ns, "named", "")
	named.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "named"}
	g.Expect(env.Client.Create(ctx, named)).To(Succeed())
	dropped := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &openshellv1alpha1.OpenShellSandbox{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(named), c); err != nil {
			return err
		}
		c.Spec.PolicyRef = nil
		return env.Client.Update(ctx, c)
	})
	g.Expect(apierrors.IsForbidden(dropped)).To(BeTrue(), "dropping the policy: want Forbidden, got %v", dropped)
	g.Expect(dropped.Error()).To(ContainSubstring("PolicyRequired"))

	// The Tenant Admin marks a default: sandboxes may name none.
	g.Expect(env.Client.Create(ctx, &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "house", Namespace: tn.ns},
		Spec: openshellv1alpha1.OpenShellPolicySpec{Default: true}})).To(Succeed())
	g.Eventually(func() error { return env.Client.Create(ctx, sandbox(tn.ns, "by-default", "")) }).WithTimeout(10 * time.Second).Should(Succeed())
	// A second default makes the choice ambiguous.
	g.Expect(env.Client.Create(ctx, &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: tn.ns},
		Spec: openshellv1alpha1.OpenShellPolicySpec{Default: true}})).To(Succeed())
	g.Eventually(func() error { return env.Client.Create(ctx, sandbox(tn.ns, "ambiguous", "")) }).WithTimeout(10 * time.Second).
		Should(MatchError(ContainSubstring("DefaultPolicyAmbiguous: no spec.policyRef, and OpenShellPolicies house, other of namespace " + tn.ns)))
}

// TestNamespaceBudgetAtAdmission: a namespace's sandboxes on a gateway are
// held to spec.sandboxControls.namespaceBudget together — the count and the
// summed requests — as a tenant filling the shared gateway would meet it.
func TestNamespaceBudgetAtAdmission(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tn := newTenant(ctx, t, enforceAllow, nil)
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tn.gw), cur)).To(Succeed())
	cur.Spec.SandboxControls.NamespaceBudget = &openshellv1alpha1.NamespaceBudget{MaxSandboxes: ptr.To[int32](2),
		MaxRequests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}
	g.Expect(env.Client.Update(ctx, cur)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tn.gw), cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	withCPU := func(name, cpu string) *openshellv1alpha1.OpenShellSandbox {
		sb := sandbox(tn.ns, name, "")
		sb.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
		return sb
	}
	g.Expect(env.Client.Create(ctx, withCPU("first", "2"))).To(Succeed())
	// The webhook counts what its cache holds: the first sandbox shows up.
	g.Eventually(func() error { return env.Client.Create(ctx, withCPU("too-big", "2")) }).WithTimeout(10 * time.Second).
		Should(MatchError(ContainSubstring("NamespaceBudgetExceeded: namespace " + tn.ns + " would have 4 cpu requested on gateway")))
	g.Expect(env.Client.Create(ctx, withCPU("second", "1"))).To(Succeed())
	g.Eventually(func() error { return env.Client.Create(ctx, withCPU("third", "100m")) }).WithTimeout(10 * time.Second).
		Should(MatchError(ContainSubstring("would have 3 sandboxes on gateway")))
}

// TestPlatformAllowlistIsTheCeiling: a tenant's allowlist cannot widen what
// the gateway's platform allowlist allows, nor can a namespace without one.
func TestPlatformAllowlistIsTheCeiling(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tn := newTenant(ctx, t, enforceAllow, []string{"mirror.example.com"})
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tn.gw), cur)).To(Succeed())
	cur.Spec.ImagePolicy.PlatformAllowlist = []string{"mirror.example.com/approved"}
	g.Expect(env.Client.Update(ctx, cur)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tn.gw), cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}).WithTimeout(10 * time.Second).Should(Succeed())

	g.Eventually(func() error {
		return env.Client.Create(ctx, sandbox(tn.ns, "approved", "mirror.example.com/approved/agent"+digest))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	err := env.Client.Create(ctx, sandbox(tn.ns, "wider", "mirror.example.com/other/agent"+digest))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("ImageNotAllowedByPlatform: image mirror.example.com/other/agent@sha256:"))
	g.Expect(err.Error()).To(ContainSubstring("outside gateway " + platformNS + "/" + tn.gw.Name + "'s platform allowlist"))
	// The default sandbox image is the platform's own.
	g.Expect(env.Client.Create(ctx, sandbox(tn.ns, "default-image", ""))).To(Succeed())
}
