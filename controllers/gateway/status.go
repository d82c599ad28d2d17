package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scc"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// managedHealth derives the TLSReady, RouteAdmitted and SCCReady
// conditions of a Managed gateway from what was observed, and the issues
// the summary conditions (setStatus) are made of. Pure.
func managedHealth(gw *openshellv1alpha1.OpenShellGateway, o observation, pf preflight.Result, in render.Inputs, usesSCC bool, h health) health {
	if !o.workload.Ready {
		h.waiting = append(h.waiting, issue{Reason: o.workload.Reason, Message: o.workload.Message})
	}
	h.ready = o.workload.Message

	tls := o.tls
	if render.ExternalIssuer(gw) != nil && in.TLS != render.TLSCertManager {
		tls = tlsState{Reason: openshellv1alpha1.GatewayReasonCertManagerRequired,
			Message: "spec.managed.tls.issuerRef needs cert-manager, which is not installed: install the cert-manager Operator or remove issuerRef"}
	}
	if tls.Ready && in.TLS == render.TLSBuiltin && pf.CertManager {
		tls.Message += "; cert-manager is installed too, but this gateway keeps the built-in PKI it started with " +
			"(a new CA would disconnect its sandboxes; a new gateway uses cert-manager)"
	}
	switch {
	case tls.Ready:
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionTLSReady, metav1.ConditionTrue, tls.Reason, tls.Message)
	case tls.Reason == openshellv1alpha1.GatewayReasonCertificatesPending:
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionTLSReady, metav1.ConditionFalse, tls.Reason, tls.Message)
		h.waiting = append(h.waiting, issue{Reason: tls.Reason, Message: tls.Message})
	default:
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionTLSReady, metav1.ConditionFalse, tls.Reason, tls.Message)
		h.degraded = append(h.degraded, issue{Reason: tls.Reason, Message: tls.Message})
	}

	switch {
	case !pf.Route:
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionRouteAdmitted, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonRouteAPIUnavailable,
			"route.openshift.io/v1 is not served: no Route is created; status.endpoint is the in-cluster Service address")
	case !render.RouteEnabled(gw, in):
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionRouteAdmitted, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonRouteDisabled, "spec.managed.route.enabled is false")
	case o.route.Admitted:
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionRouteAdmitted, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonRouteAdmitted, o.route.Message)
	default:
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionRouteAdmitted, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonRouteNotAdmitted, o.route.Message)
	}

	switch {
	case !pf.SCC:
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionSCCReady, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonSCCNotApplicable,
			"security.openshift.io/v1 is not served (not OpenShift): Pod Security admission applies instead (see PodSecurityAdmitted)")
	case in.Line == gatewayline.V01:
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionSCCReady, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonSCCRestrictedV2,
			"OpenShell 0.1 sandbox pods add no capabilities and run as the namespace's UID: the default restricted-v2 SCC admits them, no SCC is granted")
	case !usesSCC:
		msg := "the Combined supervisor topology needs the privileged SCC, which the operator never grants: use supervisorTopology Sidecar, or grant privileged to the sandbox ServiceAccount yourself"
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionSCCReady, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonPrivilegedRequired, msg)
		h.degraded = append(h.degraded, issue{Reason: openshellv1alpha1.GatewayReasonPrivilegedRequired, Message: msg})
	default:
		reason, msg := sccVerdict(gw, o.scc)
		if reason == openshellv1alpha1.GatewayReasonSCCApplied {
			status.SetCondition(gw, openshellv1alpha1.GatewayConditionSCCReady, metav1.ConditionTrue, reason, msg)
			break
		}
		status.SetCondition(gw, openshellv1alpha1.GatewayConditionSCCReady, metav1.ConditionFalse, reason, msg)
		h.degraded = append(h.degraded, issue{Reason: reason, Message: msg})
	}
	return h
}

// reportPodSecurity sets PodSecurityAdmitted on a Managed gateway of a
// cluster without SCCs, from its sandbox namespace's enforce label.
func (r *Reconciler) reportPodSecurity(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result, line gatewayline.Line) error {
	if pf.SCC {
		return nil
	}
	ns := render.NamesFor(gw).SandboxNamespace
	meta, _, err := tenancy.ReadNamespace(ctx, r.Client, ns)
	if apierrors.IsNotFound(err) {
		return nil // the install reports the missing namespace (SandboxNamespaceNotServed)
	}
	if err != nil {
		return fmt.Errorf("read the sandbox namespace: %w", err)
	}
	st, reason, msg := podSecurityVerdict(ns, meta.Labels[podSecurityEnforce])
	if line == gatewayline.V01 {
		st, reason, msg = metav1.ConditionTrue, openshellv1alpha1.GatewayReasonPodSecurityAnyLevel,
			fmt.Sprintf("OpenShell 0.1 sandbox pods meet the restricted Pod Security level, which every level of namespace %s admits", ns)
	}
	status.SetCondition(gw, openshellv1alpha1.GatewayConditionPodSecurityAdmitted, st, reason, msg)
	return nil
}

// podSecurityEnforce is Pod Security Admission's enforce label.
const podSecurityEnforce = "pod-security.kubernetes.io/enforce"

// podSecurityVerdict says whether the sandbox namespace's Pod Security level
// admits sandbox pods (only privileged does). Pure.
func podSecurityVerdict(ns, level string) (metav1.ConditionStatus, string, string) {
	fix := fmt.Sprintf("`kubectl label namespace %s %s=privileged --overwrite` (a cluster admin; keep only sandbox pods there)", ns, podSecurityEnforce)
	switch level {
	case "privileged":
		return metav1.ConditionTrue, openshellv1alpha1.GatewayReasonPodSecurityPrivileged,
			fmt.Sprintf("namespace %s enforces Pod Security level privileged, which the sandbox pods' supervisor capabilities need", ns)
	case "":
		return metav1.ConditionFalse, openshellv1alpha1.GatewayReasonPodSecurityUnset,
			fmt.Sprintf("namespace %s has no %s label: the cluster's default level decides whether sandbox pods (which need privileged) are admitted; set it explicitly: %s", ns, podSecurityEnforce, fix)
	default:
		return metav1.ConditionFalse, openshellv1alpha1.GatewayReasonPodSecurityRestricted,
			fmt.Sprintf("namespace %s enforces Pod Security level %s, which refuses the sandbox pods' supervisor capabilities (NET_ADMIN, NET_RAW, SYS_PTRACE): %s", ns, level, fix)
	}
}

// sccState is what the live sandbox SCC is: absent, or the fields in which
// it differs from config/scc.
type sccState struct {
	Missing bool
	Diff    []string
}

// sccVerdict says whether the sidecar sandbox pods can be admitted.
func sccVerdict(gw *openshellv1alpha1.OpenShellGateway, s sccState) (reason, message string) {
	n := render.NamesFor(gw)
	switch {
	case s.Missing:
		return openshellv1alpha1.GatewayReasonSCCMissing, fmt.Sprintf("SecurityContextConstraints %s does not exist, so sandbox pods are refused: "+
			"a cluster admin applies it once with `oc apply -k config/scc` (see docs/security.md); the operator never creates SCCs", scc.Name)
	case len(s.Diff) > 0:
		return openshellv1alpha1.GatewayReasonSCCModified, fmt.Sprintf("SecurityContextConstraints %s differs from the reviewed config/scc in %s: "+
			"a cluster admin re-applies config/scc", scc.Name, strings.Join(s.Diff, ", "))
	}
	return openshellv1alpha1.GatewayReasonSCCApplied, fmt.Sprintf("SecurityContextConstraints %s matches config/scc and is granted to ServiceAccount %s/%s",
		scc.Name, n.SandboxNamespace, n.SandboxSA)
}

// issue is one reason the gateway is not (yet) available.
type issue struct {
	Reason, Message string
	// Phase overrides the phase this issue implies.
	Phase openshellv1alpha1.GatewayPhase
}

// health is everything the summary conditions depend on, besides preflight.
type health struct {
	// degraded issues need an admin; waiting ones resolve by themselves.
	degraded, waiting []issue
	// ready is the Available message when nothing is wrong.
	ready string
}

// workload is what the operator knows about the gateway process itself.
type workload struct {
	Ready           bool
	Reason, Message string
	// Version is the release its pod template runs.
	Version string
	// Instance identifies the ready pods (status.instance).
	Instance string
}

// setStatus renders the preflight conditions and the Available,
// Progressing and Degraded summary with the phase. Pure: same inputs, same
// status.
func setStatus(gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result, known bool, h health) {
	for _, c := range preflight.GatewayConditions(pf, known) {
		status.SetCondition(gw, c.Type, c.Status, c.Reason, c.Message)
	}
	set := func(typ string, s metav1.ConditionStatus, reason, msg string) {
		status.SetCondition(gw, typ, s, reason, msg)
	}
	if !known {
		set(openshellv1alpha1.ConditionDegraded, metav1.ConditionUnknown, preflight.ReasonPreflightPending, "waiting for the first cluster probe")
		set(openshellv1alpha1.ConditionAvailable, metav1.ConditionUnknown, preflight.ReasonPreflightPending, "waiting for the first cluster probe")
		set(openshellv1alpha1.ConditionProgressing, metav1.ConditionTrue, preflight.ReasonPreflightPending, "waiting for the first cluster probe")
		gw.Status.Phase = openshellv1alpha1.GatewayPhasePending
		return
	}
	npStatus, npReason, npMessage := networkPolicyEnforced(gw, pf)
	set(openshellv1alpha1.GatewayConditionNetworkPolicyEnforced, npStatus, npReason, npMessage)
	var degraded []issue
	if !pf.AgentSandbox.Available {
		degraded = append(degraded, issue{openshellv1alpha1.GatewayReasonAgentSandboxUnavailable, "sandboxes cannot be created: " + pf.AgentSandbox.Message, openshellv1alpha1.GatewayPhasePending})
	}
	if !pf.Kubernetes.Supported {
		degraded = append(degraded, issue{openshellv1alpha1.GatewayReasonKubernetesTooOld, pf.Kubernetes.Message, ""})
	}
	degraded = append(degraded, h.degraded...)

	switch {
	case len(degraded) > 0:
		first := degraded[0]
		set(openshellv1alpha1.ConditionDegraded, metav1.ConditionTrue, first.Reason, first.Message)
		set(openshellv1alpha1.ConditionAvailable, metav1.ConditionFalse, first.Reason, first.Message)
		if len(h.waiting) > 0 {
			set(openshellv1alpha1.ConditionProgressing, metav1.ConditionTrue, h.waiting[0].Reason, h.waiting[0].Message)
		} else {
			set(openshellv1alpha1.ConditionProgressing, metav1.ConditionFalse, first.Reason, "waiting for the problem to be fixed")
		}
		gw.Status.Phase = openshellv1alpha1.GatewayPhaseDegraded
		if first.Phase != "" {
			gw.Status.Phase = first.Phase
		}
	case len(h.waiting) > 0:
		w := h.waiting[0]
		set(openshellv1alpha1.ConditionDegraded, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonAsExpected, "nothing is degraded")
		set(openshellv1alpha1.ConditionAvailable, metav1.ConditionFalse, w.Reason, w.Message)
		set(openshellv1alpha1.ConditionProgressing, metav1.ConditionTrue, w.Reason, w.Message)
		gw.Status.Phase = openshellv1alpha1.GatewayPhaseInstalling
	default:
		set(openshellv1alpha1.ConditionDegraded, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonAsExpected, "nothing is degraded")
		set(openshellv1alpha1.ConditionAvailable, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonWorkloadReady, h.ready)
		set(openshellv1alpha1.ConditionProgressing, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonWorkloadReady, h.ready)
		gw.Status.Phase = openshellv1alpha1.GatewayPhaseAvailable
	}
}

// phaseMessage is the event text for a phase transition.
func phaseMessage(gw *openshellv1alpha1.OpenShellGateway) string {
	for _, c := range gw.Status.Conditions {
		if c.Type == openshellv1alpha1.ConditionAvailable {
			return "gateway is " + string(gw.Status.Phase) + ": " + c.Message
		}
	}
	return "gateway is " + string(gw.Status.Phase)
}

// networkPolicyEnforced says whether the gateway's sandboxes get the
// NetworkPolicy enforcement the OpenShell 0.1 runtime relies on: read from
// OpenShift's network plugin where it is known, else the Platform Admin's
// acknowledgement (as upstream's chart requires), else Unknown.
func networkPolicyEnforced(gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result) (metav1.ConditionStatus, string, string) {
	switch pf.NetworkType {
	case "OVNKubernetes":
		return metav1.ConditionTrue, openshellv1alpha1.GatewayReasonNetworkPluginEnforces,
			"the cluster's network plugin (OVNKubernetes) enforces NetworkPolicy ingress and egress"
	case "OpenShiftSDN":
		return metav1.ConditionFalse, openshellv1alpha1.GatewayReasonNetworkPluginLacksEgress,
			"the cluster's network plugin (OpenShiftSDN) does not enforce egress NetworkPolicy, which the OpenShell 0.1 runtime's sandbox fence relies on: " +
				"migrate the cluster to OVN-Kubernetes"
	}
	if gw.Spec.NetworkPolicyEnforcement.Acknowledged {
		return metav1.ConditionTrue, openshellv1alpha1.GatewayReasonEnforcementAcknowledged,
			"the platform admin acknowledged that the network plugin enforces NetworkPolicy ingress and egress in the sandbox namespaces"
	}
	plugin := "this cluster's network plugin"
	if pf.NetworkType != "" {
		plugin = "the network plugin " + pf.NetworkType
	}
	return metav1.ConditionUnknown, openshellv1alpha1.GatewayReasonEnforcementNotVerified,
		"the operator cannot tell whether " + plugin + " enforces NetworkPolicy ingress and egress, which the OpenShell 0.1 runtime's sandbox fence relies on " +
			"(Kubernetes accepts NetworkPolicies that nothing enforces): verify it, then set spec.networkPolicyEnforcement.acknowledged: true"
}

// reportTenantEgress sets TenantEgressEnforced on a gateway with
// spec.managed.sandboxes.tenantEgress from the outcomes its paired
// namespaces record (controllers/pairedns), and removes it otherwise.
func (r *Reconciler) reportTenantEgress(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result) error {
	if gw.Spec.Managed == nil || gw.Spec.Managed.Sandboxes.TenantEgress == nil {
		meta.RemoveStatusCondition(&gw.Status.Conditions, openshellv1alpha1.GatewayConditionTenantEgressEnforced)
		return nil
	}
	paired, err := r.pairedNamespaces(ctx, gw)
	if err != nil {
		return err
	}
	var outcomes []tenantOutcome
	for _, ns := range paired {
		tenant, _, _ := render.PairedTenant(gw, ns)
		outcomes = append(outcomes, tenantOutcome{tenant, ns.Annotations[render.AnnotationTenantEgress]})
	}
	st, reason, msg := tenantEgressVerdict(pf, outcomes)
	status.SetCondition(gw, openshellv1alpha1.GatewayConditionTenantEgressEnforced, st, reason, msg)
	return nil
}

// tenantOutcome is one paired namespace's recorded tenant egress.
type tenantOutcome struct{ tenant, outcome string }

// tenantEgressVerdict is TenantEgressEnforced from the API's presence and
// the paired namespaces' outcomes. Pure.
func tenantEgressVerdict(pf preflight.Result, outcomes []tenantOutcome) (metav1.ConditionStatus, string, string) {
	if !pf.AdminNetworkPolicy {
		return metav1.ConditionFalse, openshellv1alpha1.GatewayReasonAdminNetworkPolicyUnavailable,
			"the cluster does not serve policy.networking.k8s.io/v1alpha1 AdminNetworkPolicies (OVN-Kubernetes on OpenShift 4.16 or later does): tenants' egress NetworkPolicies do not bind their agents"
	}
	slices.SortFunc(outcomes, func(a, b tenantOutcome) int { return strings.Compare(a.tenant, b.tenant) })
	var failed, pending []string
	enforced := 0
	for _, o := range outcomes {
		switch {
		case strings.HasPrefix(o.outcome, render.TenantEgressNotWritten):
			failed = append(failed, o.tenant+": "+strings.TrimPrefix(o.outcome, render.TenantEgressNotWritten+": "))
		case strings.HasPrefix(o.outcome, render.TenantEgressApplied):
			enforced++
		case o.outcome == "":
			pending = append(pending, o.tenant)
		}
	}
	if len(failed) > 0 {
		msg := fmt.Sprintf("the AdminNetworkPolicy of %d tenant namespace(s) is not written (apply config/tenant-egress to grant the operator AdminNetworkPolicies): %s", len(failed), failed[0])
		if len(failed) > 1 {
			msg += fmt.Sprintf(" (and %d more)", len(failed)-1)
		}
		return metav1.ConditionFalse, openshellv1alpha1.GatewayReasonTenantEgressNotWritten, msg
	}
	if len(pending) > 0 {
		return metav1.ConditionUnknown, openshellv1alpha1.GatewayReasonTenantEgressPending,
			fmt.Sprintf("the egress of %d tenant namespace(s) is not evaluated yet: %s", len(pending), strings.Join(pending, ", "))
	}
	return metav1.ConditionTrue, openshellv1alpha1.GatewayReasonTenantEgressApplied,
		fmt.Sprintf("the egress NetworkPolicies of %d tenant namespace(s) bind their agents through AdminNetworkPolicies; tenants without an egress policy need none", enforced)
}
