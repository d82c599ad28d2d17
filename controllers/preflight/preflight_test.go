package preflight_test

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// The target: a condition follows a CRD change within 5 seconds.
const flipTimeout = 5 * time.Second

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithEnv(m, framework.EnvOptions{}, &env))
}

func condition(g Gomega, conds []metav1.Condition, typ string) metav1.Condition {
	c := meta.FindStatusCondition(conds, typ)
	g.Expect(c).NotTo(BeNil(), "condition %s missing", typ)
	return *c
}

// TestAgentSandboxCRDLifecycle walks the Agent Sandbox CRD through absent →
// v1alpha1 only (v0.4.6) → v1alpha1+v1beta1 (v0.5.6) → v1beta1 only (v1.0.3)
// → deleted, with the operator running, and checks that the gateway and the
// sandbox follow each step live.
func TestAgentSandboxCRDLifecycle(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := env.Client
	ns := framework.CreateNamespace(ctx, t, c, "preflight")
	startManager(ctx, t, ns)

	// The sandbox names no policy: this test is about the Agent Sandbox CRD.
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(false)}}}
	g.Expect(c.Create(ctx, gw)).To(Succeed())
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw"}}}
	g.Expect(c.Create(ctx, sb)).To(Succeed())

	expect := func(step string, wantAvailable bool, reason string, msgParts ...string) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			cur := &openshellv1alpha1.OpenShellGateway{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
			as := condition(g, cur.Status.Conditions, preflight.ConditionAgentSandboxAvailable)
			g.Expect(as.Reason).To(Equal(reason))
			g.Expect(as.Status).To(Equal(boolStatus(wantAvailable)))
			for _, p := range msgParts {
				g.Expect(as.Message).To(ContainSubstring(p))
			}
			g.Expect(as.ObservedGeneration).To(Equal(cur.Generation))
			// Other things (no pods run here) may degrade the gateway too;
			// the Agent Sandbox reason is present exactly when the CRD is unusable.
			deg := condition(g, cur.Status.Conditions, openshellv1alpha1.ConditionDegraded)
			if wantAvailable {
				g.Expect(deg.Reason).NotTo(Equal("AgentSandboxUnavailable"))
			} else {
				g.Expect(deg.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(deg.Reason).To(Equal("AgentSandboxUnavailable"))
			}

			// The sandbox was re-queued by the same change.
			s := &openshellv1alpha1.OpenShellSandbox{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(sb), s)).To(Succeed())
			acc := condition(g, s.Status.Conditions, openshellv1alpha1.ConditionAccepted)
			g.Expect(s.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhasePending))
			if wantAvailable {
				g.Expect(acc.Status).To(Equal(metav1.ConditionTrue))
			} else {
				g.Expect(acc.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(acc.Reason).To(Equal(openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing))
				g.Expect(acc.Message).To(Equal(as.Message))
			}
			want := 0.0
			if wantAvailable {
				want = 1
			}
			g.Expect(testutil.ToFloat64(preflight.CapabilityGauge("AgentSandbox"))).To(Equal(want))
		}).WithTimeout(flipTimeout).WithPolling(100*time.Millisecond).Should(Succeed(), step)
	}

	expect("absent", false, preflight.ReasonCRDNotFound, "sandboxes.agents.x-k8s.io not found", "install the Agent Sandbox controller")
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
	g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.GatewayPhasePending))

	for _, step := range []struct {
		release string
		parts   []string
	}{
		{framework.AgentSandboxAlphaOnly, []string{"agents.x-k8s.io/v1alpha1 served", "served versions: v1alpha1)"}},
		{framework.AgentSandboxAlphaBeta, []string{"agents.x-k8s.io/v1beta1 served", "served versions: v1alpha1, v1beta1", "conversion webhook"}},
		{framework.AgentSandboxBetaOnly, []string{"agents.x-k8s.io/v1beta1 served", "served versions: v1beta1)"}},
	} {
		crd, err := framework.AgentSandboxCRD(step.release)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(framework.InstallCRD(ctx, c, crd)).To(Succeed(), step.release)
		expect("Agent Sandbox "+step.release, true, preflight.ReasonAvailable, step.parts...)
	}

	// The transition to available was announced on the gateway.
	g.Eventually(func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(c.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
		var reasons []string
		for _, e := range evs.Items {
			if e.Regarding.Name == gw.Name && e.Regarding.Kind == "OpenShellGateway" {
				reasons = append(reasons, e.Reason+": "+e.Note)
			}
		}
		g.Expect(reasons).To(ContainElement(HavePrefix("CapabilityAvailable: AgentSandbox is now available")))
	}).WithTimeout(flipTimeout).Should(Succeed())

	crd, err := framework.AgentSandboxCRD(framework.AgentSandboxBetaOnly)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(framework.WaitCRDReady(ctx, c, crd)).To(Succeed())
	g.Expect(c.Delete(ctx, crd)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(crd), crd) }).
		WithTimeout(30 * time.Second).Should(Satisfy(apierrors.IsNotFound))
	expect("deleted", false, preflight.ReasonCRDNotFound, "not found")
	g.Eventually(func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(c.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
		found := false
		for _, e := range evs.Items {
			found = found || (e.Reason == "CapabilityLost" && e.Type == corev1.EventTypeWarning &&
				strings.HasPrefix(e.Note, "AgentSandbox is no longer available"))
		}
		g.Expect(found).To(BeTrue(), "no CapabilityLost event")
	}).WithTimeout(flipTimeout).Should(Succeed())
}

// TestOpenShiftAndCertManagerAPIs starts on vanilla Kubernetes, then
// installs the real OpenShift and cert-manager CRDs and removes them again.
func TestOpenShiftAndCertManagerAPIs(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := env.Client
	ns := framework.CreateNamespace(ctx, t, c, "platform")
	startManager(ctx, t, ns)
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns}}
	g.Expect(c.Create(ctx, gw)).To(Succeed())

	expect := func(route, certManager bool) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			cur := &openshellv1alpha1.OpenShellGateway{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
			rt := condition(g, cur.Status.Conditions, preflight.ConditionRouteAPIAvailable)
			cm := condition(g, cur.Status.Conditions, preflight.ConditionCertManagerAvailable)
			g.Expect(rt.Status).To(Equal(boolStatus(route)))
			g.Expect(cm.Status).To(Equal(boolStatus(certManager)))
			if !route {
				g.Expect(rt.Reason).To(Equal(preflight.ReasonNotOpenShift))
				g.Expect(rt.Message).To(ContainSubstring("vanilla Kubernetes"))
			}
			if !certManager {
				g.Expect(cm.Reason).To(Equal(preflight.ReasonNotInstalled))
				g.Expect(cm.Message).To(ContainSubstring("built-in PKI"))
			}
			kv := condition(g, cur.Status.Conditions, preflight.ConditionKubernetesVersionSupported)
			g.Expect(kv.Status).To(Equal(metav1.ConditionTrue), kv.Message)
		}).WithTimeout(flipTimeout).WithPolling(100 * time.Millisecond).Should(Succeed())
		g.Expect(testutil.ToFloat64(preflight.CapabilityGauge("Route"))).To(Equal(map[bool]float64{true: 1}[route]))
	}

	expect(false, false)
	installed := installDir(ctx, t, framework.UpstreamDir("crds", framework.CRDsOpenShift))
	installed = append(installed, installDir(ctx, t, framework.UpstreamDir("crds", framework.CRDsCertManager))...)
	expect(true, true)
	g.Expect(testutil.ToFloat64(preflight.CapabilityGauge("SecurityContextConstraints"))).To(Equal(1.0))
	g.Expect(testutil.ToFloat64(preflight.CapabilityGauge("ImageDigestMirrorSet"))).To(Equal(1.0))

	for _, crd := range installed {
		g.Expect(framework.WaitCRDReady(ctx, c, crd)).To(Succeed())
		g.Expect(c.Delete(ctx, crd)).To(Succeed())
	}
	for _, crd := range installed {
		g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(crd), crd) }).
			WithTimeout(30*time.Second).Should(Satisfy(apierrors.IsNotFound), func() string {
			return fmt.Sprintf("%s: finalizers %v conditions %+v", crd.Name, crd.Finalizers, crd.Status.Conditions)
		})
	}
	expect(false, false)
}

func installDir(ctx context.Context, t *testing.T, dir string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", dir, err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		crd, err := framework.LoadCRD(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := framework.InstallCRD(ctx, env.Client, crd); err != nil {
			t.Fatalf("install %s: %v", crd.Name, err)
		}
		out = append(out, crd)
	}
	return out
}

// startManager runs the operator with gateways served in gatewayNS (the
// tests' gateways and sandboxes share it).
func startManager(ctx context.Context, t *testing.T, gatewayNS string) {
	t.Helper()
	mgr, err := operator.New(env.Config, operator.Options{MetricsAddr: "0", ProbeAddr: "0", SkipControllerNameValidation: true,
		Controllers: operator.ControllerOptions{Platform: tenancy.Platform{OperatorNamespace: gatewayNS, GatewayNamespaces: []string{gatewayNS}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func boolStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// TestProbeReadsTheNetworkPlugin: on OpenShift the probe reads the network
// plugin from the cluster network configuration (NetworkPolicyEnforced on
// gateways); where the API or the object is missing it is not known.
func TestProbeReadsTheNetworkPlugin(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := env.Client
	disc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	probe := func() string {
		res, err := preflight.Probe(ctx, c, disc)
		g.Expect(err).NotTo(HaveOccurred())
		return res.NetworkType
	}
	g.Expect(probe()).To(BeEmpty(), "no OpenShift network API")
	crd, err := framework.LoadCRD(filepath.Join(framework.UpstreamDir("crds", framework.CRDsOpenShift), "0000_10_config-operator_01_networks-Default.crd.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(framework.InstallCRD(ctx, c, crd)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), crd) })
	g.Expect(framework.WaitCRDReady(ctx, c, crd)).To(Succeed())
	g.Expect(probe()).To(BeEmpty(), "no cluster network configuration yet")

	network := &unstructured.Unstructured{}
	network.SetAPIVersion("config.openshift.io/v1")
	network.SetKind("Network")
	network.SetName("cluster")
	g.Expect(unstructured.SetNestedField(network.Object, map[string]any{}, "spec")).To(Succeed())
	// The CRD has no status subresource: status is written with the object.
	g.Expect(unstructured.SetNestedField(network.Object, "OVNKubernetes", "status", "networkType")).To(Succeed())
	g.Expect(c.Create(ctx, network)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), network) })
	g.Expect(probe()).To(Equal("OVNKubernetes"))
}
