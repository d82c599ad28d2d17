package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	routev1 "github.com/openshift/api/route/v1"
	securityv1 "github.com/openshift/api/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/routeadmission"
	"github.com/openshell/openshell-operator/internal/pki"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scc"
	"github.com/openshell/openshell-operator/internal/trust"
)

// observeWorkload reads the StatefulSet or Deployment and says whether the
// gateway serves: every replica updated and ready for the current spec,
// and no other left.
//
// The read is of the cache, which may not yet hold what this reconcile
// applied: a generation the apply gave the workload (in rendered) and the
// cached copy lacks is rolling out, whatever the copy's status says.
// Reading the copy alone reported a spec change that rolls the pods as
// Available and not Progressing until the watch caught up.
func (r *Reconciler) observeWorkload(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, rendered []client.Object) (workload, error) {
	key := client.ObjectKey{Namespace: gw.Namespace, Name: render.NamesFor(gw).Fullname}
	want := render.Replicas(gw)
	var gen, observed int64
	var ready, updated, total int32
	var template map[string]string
	var owner workloadOwner
	var live client.Object
	if render.UsesPostgres(gw) {
		d := &appsv1.Deployment{}
		if err := r.Client.Get(ctx, key, d); err != nil {
			return workload{Reason: openshellv1alpha1.GatewayReasonInstalling, Message: "creating the gateway Deployment"}, client.IgnoreNotFound(err)
		}
		gen, observed, ready, updated, total = d.Generation, d.Status.ObservedGeneration, d.Status.ReadyReplicas, d.Status.UpdatedReplicas, d.Status.Replicas
		template, live = d.Spec.Template.Annotations, d
		owner = workloadOwner{deployment: d.Name}
	} else {
		s := &appsv1.StatefulSet{}
		if err := r.Client.Get(ctx, key, s); err != nil {
			return workload{Reason: openshellv1alpha1.GatewayReasonInstalling, Message: "creating the gateway StatefulSet"}, client.IgnoreNotFound(err)
		}
		gen, observed, ready, updated, total = s.Generation, s.Status.ObservedGeneration, s.Status.ReadyReplicas, s.Status.UpdatedReplicas, s.Status.Replicas
		template, live = s.Spec.Template.Annotations, s
		owner = workloadOwner{statefulSet: s.UID}
	}
	version := render.TemplateVersion(template)
	msg := fmt.Sprintf("%d/%d gateway replicas ready", ready, want)
	// A Deployment counts the pods of its old ReplicaSets as ready too:
	// until none is left (total), an old release may still serve.
	if cacheBehind(live, appliedAs(live, rendered)) || observed < gen || updated < want || ready < want || total > want {
		return workload{Reason: openshellv1alpha1.GatewayReasonInstalling, Message: msg + " (rolling out)", Version: version}, nil
	}
	instance, err := r.instance(ctx, gw, owner)
	if err != nil {
		return workload{}, err
	}
	return workload{Ready: true, Reason: openshellv1alpha1.GatewayReasonWorkloadReady, Message: msg, Version: version, Instance: instance}, nil
}

// appliedAs is the object of rendered that is live's (nil: none), with the
// generation and UID this reconcile's apply gave it (none when it applied
// nothing).
func appliedAs(live client.Object, rendered []client.Object) client.Object {
	for _, o := range rendered {
		if o.GetName() == live.GetName() && o.GetNamespace() == live.GetNamespace() && reflect.TypeOf(o) == reflect.TypeOf(live) {
			return o
		}
	}
	return nil
}

// cacheBehind says whether live, read from the cache, predates applied,
// what this reconcile applied of it (nil: nothing): an older generation,
// or another object of the name (deleted and made again).
func cacheBehind(live, applied client.Object) bool {
	if applied == nil {
		return false
	}
	return (applied.GetUID() != "" && applied.GetUID() != live.GetUID()) || applied.GetGeneration() > live.GetGeneration()
}

// instance hashes the UIDs of the gateway's pods (read by metadata from
// the cache): it changes exactly when a pod is replaced. Only pods its
// workload controls count: labels alone are not proof, since a pod a
// gateway creates for a tenant's sandbox (in the gateway's namespace,
// 0.0.111's default) can wear any label a gateway token holder asks for,
// and each change of instance re-pushes every tenant's providers and holds
// new sandboxes of every tenant (ProviderSyncing).
func (r *Reconciler) instance(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, owner workloadOwner) (string, error) {
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.Client.List(ctx, pods, client.InNamespace(gw.Namespace), client.MatchingLabels(render.SelectorLabels(gw))); err != nil {
		return "", fmt.Errorf("list the gateway pods: %w", err)
	}
	uids := make([]string, 0, len(pods.Items))
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() && owner.controls(&p) {
			uids = append(uids, string(p.UID))
		}
	}
	slices.Sort(uids)
	sum := sha256.Sum256([]byte(strings.Join(uids, ",")))
	return hex.EncodeToString(sum[:6]), nil
}

// workloadOwner is the gateway's StatefulSet (by UID) or Deployment (by
// name: its pods' controller is a ReplicaSet named after it and the
// pod's template hash).
type workloadOwner struct {
	statefulSet types.UID
	deployment  string
}

// controls reports that p's controller is the gateway's workload.
func (o workloadOwner) controls(p *metav1.PartialObjectMetadata) bool {
	ref := metav1.GetControllerOfNoCopy(p)
	switch {
	case ref == nil:
		return false
	case o.statefulSet != "":
		return ref.Kind == "StatefulSet" && ref.UID == o.statefulSet
	case o.deployment != "":
		hash := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		return ref.Kind == "ReplicaSet" && hash != "" && ref.Name == o.deployment+"-"+hash
	}
	return false
}

// routeState is what the Route's status says.
type routeState struct {
	Admitted bool
	Host     string
	Message  string
}

// observeRoute reads what the routers said of the gateway's Route. Only
// what a router said of the Route's current host counts, and nothing
// while the cache lags this reconcile's change of it (as for the workload):
// the endpoint clients are given would otherwise be the previous host.
func (r *Reconciler) observeRoute(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, rendered []client.Object) (routeState, error) {
	rt := &routev1.Route{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: render.NamesFor(gw).Fullname}, rt); err != nil {
		if apierrors.IsNotFound(err) {
			return routeState{Message: "the Route is being created"}, nil
		}
		return routeState{}, fmt.Errorf("get route: %w", err)
	}
	waiting := routeState{Message: "waiting for a router to admit the Route"}
	// openshift-apiserver keeps no generation for Routes: the host this
	// reconcile applied is compared too.
	applied := appliedAs(rt, rendered)
	if want, ok := applied.(*routev1.Route); ok && want.Spec.Host != "" && rt.Spec.Host != want.Spec.Host {
		return waiting, nil
	}
	if cacheBehind(rt, applied) {
		return waiting, nil
	}
	admitted, host, msg := routeadmission.Read(rt)
	switch {
	case admitted:
		return routeState{Admitted: true, Host: host, Message: msg}, nil
	case msg != "":
		return routeState{Message: msg}, nil
	}
	return waiting, nil
}

// tlsState is what the gateway's certificate Secrets hold.
type tlsState struct {
	Ready   bool
	Reason  string
	Message string
	// Expires is the earliest expiry of the server and client certificates.
	Expires time.Time
}

func (r *Reconciler) observeTLS(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, source render.TLSSource, read client.Reader) (tlsState, error) {
	n := render.NamesFor(gw)
	names := []string{n.ServerTLS, n.ClientTLS}
	if render.ExternalIssuer(gw) != nil {
		names = append(names, n.ServerExternal)
	}
	var expires time.Time
	now := r.now()
	for _, name := range names {
		s := &corev1.Secret{}
		if err := read.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: name}, s); err != nil {
			if apierrors.IsNotFound(err) {
				return tlsState{Reason: openshellv1alpha1.GatewayReasonCertificatesPending, Message: fmt.Sprintf("waiting for %s to write Secret %s", source, name)}, nil
			}
			return tlsState{}, fmt.Errorf("read secret %s: %w", name, err)
		}
		cert, err := pki.ParseCert(s.Data[pki.KeyCert])
		if err != nil || len(s.Data[pki.KeyKey]) == 0 || (name != n.ServerExternal && len(s.Data[pki.KeyCA]) == 0) {
			return tlsState{Reason: openshellv1alpha1.GatewayReasonCertificateInvalid, Message: fmt.Sprintf("Secret %s does not hold a usable tls.crt, tls.key and ca.crt", name)}, nil
		}
		if !now.Before(cert.NotAfter) {
			return tlsState{Reason: openshellv1alpha1.GatewayReasonCertificateInvalid, Message: fmt.Sprintf("the certificate in Secret %s expired at %s", name, cert.NotAfter.UTC().Format(time.RFC3339))}, nil
		}
		if expires.IsZero() || cert.NotAfter.Before(expires) {
			expires = cert.NotAfter
		}
	}
	st := tlsState{Ready: true, Reason: openshellv1alpha1.GatewayReasonCertificatesReady, Expires: expires,
		Message: fmt.Sprintf("certificates issued by %s; the earliest expires at %s", source, expires.UTC().Format(time.RFC3339))}
	if source == render.TLSBuiltin {
		set, err := r.loadCASet(ctx, read, gw.Namespace, n.CA)
		if err != nil {
			return tlsState{}, err
		}
		if set.Rotating() {
			st.Reason = openshellv1alpha1.GatewayReasonCARotating
			st.Message = caRotationMessage(set, r.PKI.withDefaults().CAOverlap) + "; " + st.Message
		}
	}
	return st, nil
}

// caRotationMessage says where a CA rotation stands and what comes next.
func caRotationMessage(set pki.CASet, overlap time.Duration) string {
	next := set.NextStep(overlap).UTC().Format(time.RFC3339)
	if set.Phase == pki.CAPhaseIntroduced {
		return "rotating the gateway CA: the next CA is trusted alongside the current one and signs from " + next
	}
	return "rotating the gateway CA: the new CA signs; the previous one stays trusted until " + next
}

// observeSCC reads the sandbox SCC and compares it with config/scc. It is
// read by name from the API server, not watched: the operator may get that
// one SCC and nothing else (an informer would need list and watch), and a
// gateway whose SCC is not right re-checks it every sccRecheck.
func (r *Reconciler) observeSCC(ctx context.Context) (sccState, error) {
	live := &securityv1.SecurityContextConstraints{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: scc.Name}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return sccState{Missing: true}, nil
		}
		return sccState{}, fmt.Errorf("read SecurityContextConstraints %s: %w", scc.Name, err)
	}
	return sccState{Diff: scc.Verify(live)}, nil
}

// trustBundle is what the gateway trusts for outbound TLS: the public
// roots, the operator's OIDC issuer CA and, on OpenShift, the cluster's
// trusted CA bundle once the Cluster Network Operator has injected it (its
// ConfigMap's change re-renders the bundle and rolls the gateway).
func (r *Reconciler) trustBundle(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, in render.Inputs) ([]byte, error) {
	var operatorCA, cluster []byte
	if in.OIDC != nil {
		operatorCA = in.OIDC.CAPEM
	}
	if in.OpenShift() {
		cm := &corev1.ConfigMap{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: render.NamesFor(gw).TrustedCA}, cm)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read the cluster's trusted CA bundle: %w", err)
		}
		cluster = []byte(cm.Data["ca-bundle.crt"])
	}
	bundle, _ := trust.Bundle(operatorCA, cluster, r.TrustRoots)
	return bundle, nil
}
