package monitoring

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scheme"
)

type fixedPreflight preflight.Result

func (f fixedPreflight) Get() (preflight.Result, bool) { return preflight.Result(f), true }

func TestCollector(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ca, err := pki.NewCA("test", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	gw := func(name string, available metav1.ConditionStatus) *openshellv1alpha1.OpenShellGateway {
		return &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: name},
			Spec:   openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal},
			Status: openshellv1alpha1.OpenShellGatewayStatus{Conditions: []metav1.Condition{{Type: openshellv1alpha1.ConditionAvailable, Status: available}}}}
	}
	sb := func(ns, name string, phase openshellv1alpha1.SandboxPhase) *openshellv1alpha1.OpenShellSandbox {
		return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:   openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "up", Namespace: "platform"}},
			Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: phase}}
	}
	objs := []client.Object{gw("up", metav1.ConditionTrue), gw("down", metav1.ConditionFalse),
		sb("team-a", "one", openshellv1alpha1.SandboxPhaseReady), sb("team-b", "two", openshellv1alpha1.SandboxPhaseReady),
		sb("team-a", "three", openshellv1alpha1.SandboxPhaseError),
		// Gateway references are the tenant's: ones to no gateway share one label.
		func() client.Object { s := sb("team-c", "x", ""); s.Spec.GatewayRef.Name = "made-up-1"; return s }(),
		func() client.Object { s := sb("team-c", "y", ""); s.Spec.GatewayRef.Name = "made-up-2"; return s }(),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "gw-ca-tls",
			Labels: map[string]string{render.LabelManagedBy: render.ManagedByValue, render.LabelComponent: "tls"}},
			Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM}},
		// Not the operator's: not reported.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "other"}, Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM}},
	}
	c := &Collector{Reader: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build(),
		Preflight: fixedPreflight{}, RotatedAt: func() time.Time { return now.Add(-time.Hour) }, Now: func() time.Time { return now }}
	want := `
# HELP openshell_operator_agent_sandbox_available 1 when the Agent Sandbox CRD is served, 0 when it is missing.
# TYPE openshell_operator_agent_sandbox_available gauge
openshell_operator_agent_sandbox_available 0
# HELP openshell_operator_certificate_expiry_timestamp_seconds notAfter (Unix seconds) of each gateway certificate the operator issues or cert-manager issues for it.
# TYPE openshell_operator_certificate_expiry_timestamp_seconds gauge
openshell_operator_certificate_expiry_timestamp_seconds{namespace="platform",secret="gw-ca-tls"} ` + itoa(ca.Cert.NotAfter.Unix()) + `
# HELP openshell_operator_gateway_up 1 when the OpenShellGateway is Available, 0 otherwise.
# TYPE openshell_operator_gateway_up gauge
openshell_operator_gateway_up{gateway="platform/down",mode="External"} 0
openshell_operator_gateway_up{gateway="platform/up",mode="External"} 1
# HELP openshell_operator_oidc_signing_key_age_seconds Seconds since the operator's OIDC signing key last rotated.
# TYPE openshell_operator_oidc_signing_key_age_seconds gauge
openshell_operator_oidc_signing_key_age_seconds 3600
# HELP openshell_operator_sandboxes OpenShellSandboxes by gateway (namespace/name) and phase.
# TYPE openshell_operator_sandboxes gauge
openshell_operator_sandboxes{gateway="platform/up",phase="Error"} 1
openshell_operator_sandboxes{gateway="platform/up",phase="Ready"} 2
openshell_operator_sandboxes{gateway="unknown",phase="Pending"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
