package gateway

import (
	corev1 "k8s.io/api/core/v1"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

func TestSetStatus(t *testing.T) {
	okCluster := preflight.Result{
		AgentSandbox: preflight.AgentSandbox{Available: true, Preferred: "v1beta1", Reason: preflight.ReasonAvailable},
		Kubernetes:   preflight.EvaluateKubernetesVersion("v1.34.4"),
	}
	noCRD := okCluster
	noCRD.AgentSandbox = preflight.EvaluateAgentSandbox(nil)
	oldKube := okCluster
	oldKube.Kubernetes = preflight.EvaluateKubernetesVersion("v1.27.3")
	ready := health{ready: "1/1 gateway replicas ready"}
	rolling := health{waiting: []issue{{Reason: openshellv1alpha1.GatewayReasonInstalling, Message: "0/1 gateway replicas ready"}}}
	badTLS := health{degraded: []issue{{Reason: openshellv1alpha1.GatewayReasonCertificateInvalid, Message: "expired"}},
		waiting: []issue{{Reason: openshellv1alpha1.GatewayReasonInstalling, Message: "rolling"}}}

	for name, tt := range map[string]struct {
		pf                            preflight.Result
		known                         bool
		h                             health
		phase                         openshellv1alpha1.GatewayPhase
		available, degraded, progress metav1.ConditionStatus
		availableReason               string
	}{
		"before first probe": {preflight.Result{}, false, ready, openshellv1alpha1.GatewayPhasePending,
			metav1.ConditionUnknown, metav1.ConditionUnknown, metav1.ConditionTrue, preflight.ReasonPreflightPending},
		"agent sandbox missing": {noCRD, true, ready, openshellv1alpha1.GatewayPhasePending,
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonAgentSandboxUnavailable},
		"kubernetes too old": {oldKube, true, ready, openshellv1alpha1.GatewayPhaseDegraded,
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonKubernetesTooOld},
		"installing": {okCluster, true, rolling, openshellv1alpha1.GatewayPhaseInstalling,
			metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonInstalling},
		"degraded while rolling": {okCluster, true, badTLS, openshellv1alpha1.GatewayPhaseDegraded,
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonCertificateInvalid},
		"ready": {okCluster, true, ready, openshellv1alpha1.GatewayPhaseAvailable,
			metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonWorkloadReady},
	} {
		t.Run(name, func(t *testing.T) {
			gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
			setStatus(gw, tt.pf, tt.known, tt.h)
			if gw.Status.Phase != tt.phase {
				t.Errorf("phase = %s, want %s", gw.Status.Phase, tt.phase)
			}
			for typ, want := range map[string]metav1.ConditionStatus{
				openshellv1alpha1.ConditionAvailable:   tt.available,
				openshellv1alpha1.ConditionDegraded:    tt.degraded,
				openshellv1alpha1.ConditionProgressing: tt.progress,
			} {
				c := meta.FindStatusCondition(gw.Status.Conditions, typ)
				if c == nil || c.Status != want || c.ObservedGeneration != 2 {
					t.Errorf("%s = %+v, want status %s at generation 2", typ, c, want)
				}
			}
			if c := meta.FindStatusCondition(gw.Status.Conditions, openshellv1alpha1.ConditionAvailable); c.Reason != tt.availableReason {
				t.Errorf("Available reason = %s, want %s", c.Reason, tt.availableReason)
			}
			before := gw.DeepCopy()
			setStatus(gw, tt.pf, tt.known, tt.h)
			if len(before.Status.Conditions) != len(gw.Status.Conditions) || before.Status.Phase != gw.Status.Phase {
				t.Error("setStatus is not idempotent")
			}
		})
	}
}

func TestManagedHealth(t *testing.T) {
	readyWorkload := workload{Ready: true, Reason: openshellv1alpha1.GatewayReasonWorkloadReady, Message: "1/1 gateway replicas ready"}
	certsOK := tlsState{Ready: true, Reason: openshellv1alpha1.GatewayReasonCertificatesReady, Message: "issued"}
	openshift := preflight.Result{Route: true, SCC: true}
	vanilla := preflight.Result{}
	sidecar := func() *openshellv1alpha1.OpenShellGateway {
		return &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "ns"},
			Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{}}}
	}
	for _, tc := range []struct {
		name     string
		o        observation
		pf       preflight.Result
		usesSCC  bool
		mutate   func(*openshellv1alpha1.OpenShellGateway)
		tls      metav1.ConditionStatus
		tlsSays  string
		route    string
		scc      string
		degraded []string
		waiting  []string
	}{
		{name: "all ready on OpenShift", o: observation{workload: readyWorkload, tls: certsOK, route: routeState{Admitted: true, Host: "gw.apps"}},
			pf: openshift, usesSCC: true, tls: metav1.ConditionTrue, route: openshellv1alpha1.GatewayReasonRouteAdmitted, scc: openshellv1alpha1.GatewayReasonSCCApplied},
		{name: "vanilla Kubernetes", o: observation{workload: readyWorkload, tls: certsOK}, pf: vanilla,
			tls: metav1.ConditionTrue, route: openshellv1alpha1.GatewayReasonRouteAPIUnavailable, scc: openshellv1alpha1.GatewayReasonSCCNotApplicable},
		{name: "rolling out, certificates pending", o: observation{workload: workload{Reason: openshellv1alpha1.GatewayReasonInstalling, Message: "0/1"},
			tls: tlsState{Reason: openshellv1alpha1.GatewayReasonCertificatesPending}}, pf: vanilla,
			tls: metav1.ConditionFalse, route: openshellv1alpha1.GatewayReasonRouteAPIUnavailable, scc: openshellv1alpha1.GatewayReasonSCCNotApplicable,
			waiting: []string{openshellv1alpha1.GatewayReasonInstalling, openshellv1alpha1.GatewayReasonCertificatesPending}},
		{name: "an invalid certificate degrades", o: observation{workload: readyWorkload, tls: tlsState{Reason: openshellv1alpha1.GatewayReasonCertificateInvalid}},
			pf: vanilla, tls: metav1.ConditionFalse, route: openshellv1alpha1.GatewayReasonRouteAPIUnavailable, scc: openshellv1alpha1.GatewayReasonSCCNotApplicable,
			degraded: []string{openshellv1alpha1.GatewayReasonCertificateInvalid}},
		{name: "an issuerRef without cert-manager degrades", o: observation{workload: readyWorkload, tls: certsOK}, pf: vanilla,
			mutate: func(gw *openshellv1alpha1.OpenShellGateway) {
				gw.Spec.Managed.TLS.IssuerRef = &openshellv1alpha1.IssuerReference{Name: "letsencrypt"}
			},
			tls: metav1.ConditionFalse, route: openshellv1alpha1.GatewayReasonRouteAPIUnavailable, scc: openshellv1alpha1.GatewayReasonSCCNotApplicable,
			degraded: []string{openshellv1alpha1.GatewayReasonCertManagerRequired}},
		{name: "Combined topology needs privileged", o: observation{workload: readyWorkload, tls: certsOK, route: routeState{Message: "waiting"}},
			pf: openshift, usesSCC: false, tls: metav1.ConditionTrue, route: openshellv1alpha1.GatewayReasonRouteNotAdmitted,
			scc: openshellv1alpha1.GatewayReasonPrivilegedRequired, degraded: []string{openshellv1alpha1.GatewayReasonPrivilegedRequired}},
		{name: "cert-manager installed after a built-in PKI gateway: said, not switched", o: observation{workload: readyWorkload, tls: certsOK},
			pf: preflight.Result{CertManager: true}, tls: metav1.ConditionTrue, tlsSays: "keeps the built-in PKI it started with",
			route: openshellv1alpha1.GatewayReasonRouteAPIUnavailable, scc: openshellv1alpha1.GatewayReasonSCCNotApplicable},
		{name: "route disabled", o: observation{workload: readyWorkload, tls: certsOK}, pf: openshift, usesSCC: true,
			mutate: func(gw *openshellv1alpha1.OpenShellGateway) { gw.Spec.Managed.Route.Enabled = ptrFalse() },
			tls:    metav1.ConditionTrue, route: openshellv1alpha1.GatewayReasonRouteDisabled, scc: openshellv1alpha1.GatewayReasonSCCApplied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := sidecar()
			if tc.mutate != nil {
				tc.mutate(gw)
			}
			in := render.Inputs{Route: tc.pf.Route, SCC: tc.pf.SCC, TLS: render.TLSBuiltin}
			h := managedHealth(gw, tc.o, tc.pf, in, tc.usesSCC, health{})
			cond := func(typ string) *metav1.Condition {
				c := meta.FindStatusCondition(gw.Status.Conditions, typ)
				if c == nil {
					t.Fatalf("no %s condition", typ)
				}
				return c
			}
			if c := cond(openshellv1alpha1.GatewayConditionTLSReady); c.Status != tc.tls || !strings.Contains(c.Message, tc.tlsSays) {
				t.Errorf("TLSReady %s (%s: %s), want %s saying %q", c.Status, c.Reason, c.Message, tc.tls, tc.tlsSays)
			}
			if c := cond(openshellv1alpha1.GatewayConditionRouteAdmitted); c.Reason != tc.route {
				t.Errorf("RouteAdmitted reason %s, want %s", c.Reason, tc.route)
			}
			if c := cond(openshellv1alpha1.GatewayConditionSCCReady); c.Reason != tc.scc {
				t.Errorf("SCCReady reason %s, want %s", c.Reason, tc.scc)
			}
			reasons := func(is []issue) []string {
				var out []string
				for _, i := range is {
					out = append(out, i.Reason)
				}
				return out
			}
			if got := reasons(h.degraded); !slices.Equal(got, tc.degraded) {
				t.Errorf("degraded %v, want %v", got, tc.degraded)
			}
			if got := reasons(h.waiting); !slices.Equal(got, tc.waiting) {
				t.Errorf("waiting %v, want %v", got, tc.waiting)
			}
		})
	}
}

func ptrFalse() *bool { f := false; return &f }

func TestPinnedTLSSource(t *testing.T) {
	builtin := &corev1.Secret{}
	issued := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"cert-manager.io/certificate-name": "openshell-ca"}}}
	tests := []struct {
		name        string
		ca          *corev1.Secret
		certManager bool
		want        render.TLSSource
	}{
		{"a new gateway without cert-manager: built-in PKI", nil, false, render.TLSBuiltin},
		{"a new gateway with cert-manager: cert-manager", nil, true, render.TLSCertManager},
		{"cert-manager installed after the gateway: it keeps the built-in PKI", builtin, true, render.TLSBuiltin},
		{"cert-manager removed under its gateway: still cert-manager (reported, never swapped)", issued, false, render.TLSCertManager},
		{"cert-manager's gateway with cert-manager: cert-manager", issued, true, render.TLSCertManager},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pinnedTLSSource(tt.ca, tt.certManager); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPodSecurityVerdict(t *testing.T) {
	for level, want := range map[string]string{"privileged": "Privileged", "baseline": "PodSecurityTooStrict",
		"restricted": "PodSecurityTooStrict", "": "PodSecurityUnset"} {
		st, reason, msg := podSecurityVerdict("sb", level)
		if reason != want || (st == metav1.ConditionTrue) != (level == "privileged") || msg == "" {
			t.Errorf("%q: %s %s %q", level, st, reason, msg)
		}
	}
}

// TestNetworkPolicyEnforced: OpenShift's network plugin decides where it is
// known (OVN-Kubernetes enforces ingress and egress, OpenShift SDN no
// egress, whatever was acknowledged); elsewhere the Platform Admin's
// acknowledgement, else Unknown with what to do.
func TestNetworkPolicyEnforced(t *testing.T) {
	acked := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{
		NetworkPolicyEnforcement: openshellv1alpha1.NetworkPolicyEnforcement{Acknowledged: true}}}
	plain := &openshellv1alpha1.OpenShellGateway{}
	for name, c := range map[string]struct {
		gw      *openshellv1alpha1.OpenShellGateway
		network string
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		"OVN-Kubernetes":            {plain, "OVNKubernetes", metav1.ConditionTrue, openshellv1alpha1.GatewayReasonNetworkPluginEnforces, "OVNKubernetes"},
		"OpenShift SDN":             {acked, "OpenShiftSDN", metav1.ConditionFalse, openshellv1alpha1.GatewayReasonNetworkPluginLacksEgress, "migrate the cluster to OVN-Kubernetes"},
		"acknowledged elsewhere":    {acked, "", metav1.ConditionTrue, openshellv1alpha1.GatewayReasonEnforcementAcknowledged, "acknowledged"},
		"another plugin, not acked": {plain, "Calico", metav1.ConditionUnknown, openshellv1alpha1.GatewayReasonEnforcementNotVerified, "the network plugin Calico"},
		"vanilla, not acknowledged": {plain, "", metav1.ConditionUnknown, openshellv1alpha1.GatewayReasonEnforcementNotVerified, "spec.networkPolicyEnforcement.acknowledged: true"},
	} {
		st, reason, msg := networkPolicyEnforced(c.gw, preflight.Result{NetworkType: c.network})
		if st != c.status || reason != c.reason || !strings.Contains(msg, c.message) {
			t.Errorf("%s: %s %s %q; want %s %s containing %q", name, st, reason, msg, c.status, c.reason, c.message)
		}
	}
}

func TestTenantEgressVerdict(t *testing.T) {
	served := preflight.Result{AdminNetworkPolicy: true}
	for _, tc := range []struct {
		name     string
		pf       preflight.Result
		outcomes []tenantOutcome
		status   metav1.ConditionStatus
		reason   string
		says     string
	}{
		{"no API", preflight.Result{}, nil, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonAdminNetworkPolicyUnavailable, "does not serve"},
		{"nothing to enforce yet", served, nil, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonTenantEgressApplied, "of 0 tenant"},
		{"applied and none", served, []tenantOutcome{{"a", render.TenantEgressApplied}, {"b", render.TenantEgressNone}},
			metav1.ConditionTrue, openshellv1alpha1.GatewayReasonTenantEgressApplied, "of 1 tenant"},
		{"one not evaluated yet", served, []tenantOutcome{{"a", render.TenantEgressApplied}, {"c", ""}},
			metav1.ConditionUnknown, openshellv1alpha1.GatewayReasonTenantEgressPending, "not evaluated yet: c"},
		{"one not written", served, []tenantOutcome{{"z", render.TenantEgressNotWritten + ": forbidden"}, {"a", render.TenantEgressApplied},
			{"b", render.TenantEgressNotWritten + ": denied by policy"}},
			metav1.ConditionFalse, openshellv1alpha1.GatewayReasonTenantEgressNotWritten, "of 2 tenant namespace(s) is not written (apply config/tenant-egress to grant the operator AdminNetworkPolicies): b: denied by policy (and 1 more)"},
	} {
		st, reason, msg := tenantEgressVerdict(tc.pf, tc.outcomes)
		if st != tc.status || reason != tc.reason || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %s %s %q", tc.name, st, reason, msg)
		}
	}
}
