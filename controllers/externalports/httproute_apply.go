package externalports

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/status"
)

// publishHTTPRoute keeps the relay's certificate, the CA bundle, the
// BackendTLSPolicy and the gateway's HTTPRoute, and reads what the
// Gateway made of them; what cannot be done here is the status's to say.
// It returns when to look again (the certificate's renewal).
func (r *Reconciler) publishHTTPRoute(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (*openshellv1alpha1.ExternalPortsStatus, time.Duration, error) {
	switch {
	case r.Namespace == "":
		return Status(gw, openshellv1alpha1.ExternalPortsReasonNoOperatorNamespace,
			"the operator runs outside a cluster namespace, where the relay's Service is not: nothing is published", ""), 0, nil
	case r.GatewayAPI == nil:
		return Status(gw, openshellv1alpha1.ExternalPortsReasonGatewayAPIUnavailable,
			"HTTPRoutes and BackendTLSPolicies (gateway.networking.k8s.io/v1) are not served, or were not when the operator started: "+
				"install the Gateway API's standard channel (v1.4 or later) and restart the operator; nothing is published", ""), 0, nil
	}
	ref := gw.Spec.ExternalPorts.ParentRef
	state := HTTPRouteState{Ref: *ref, Host: gw.Spec.ExternalPorts.Host, Namespace: r.Namespace}
	var err error
	if state.Parent, err = r.readGateway(ctx, ref); err != nil {
		return nil, 0, err
	}
	// A listener that is not HTTPS, or not the operator's alone, gets no
	// route at all: not even one waiting to be reported.
	if reason, msg, _ := HTTPRoutePublished(state); reason == openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS ||
		reason == openshellv1alpha1.ExternalPortsReasonListenerShared {
		return Status(gw, reason, msg, ""), gatewayRecheck, r.deleteHTTPRoute(ctx, client.ObjectKeyFromObject(gw))
	}
	caPEM, recheck, err := r.relayCA(ctx, time.Now())
	switch {
	case errors.Is(err, errNotOurs):
		return Status(gw, openshellv1alpha1.ExternalPortsReasonApplyFailed, err.Error(), ""), 0, nil
	case err != nil:
		return nil, 0, err
	}
	// The Gateway is read, not watched, and on OpenShift the service-ca
	// writes the relay's certificate on its own: looked at again within a
	// minute.
	recheck = min(recheck, gatewayRecheck)
	rt := HTTPRoute(gw, r.Namespace)
	if taken, err := r.takenBy(ctx, &gatewayv1.HTTPRouteList{}, rt, client.ObjectKeyFromObject(gw)); err != nil || taken != "" {
		return Status(gw, openshellv1alpha1.ExternalPortsReasonApplyFailed, taken, ""), 0, err
	}
	for _, obj := range []client.Object{CABundle(r.Namespace, caPEM), BackendTLSPolicy(r.Namespace), rt} {
		if err := apply.Apply(ctx, r.Client, r.GatewayAPI, obj); err != nil {
			if apierrors.IsConflict(err) {
				return nil, 0, err
			}
			return Status(gw, openshellv1alpha1.ExternalPortsReasonApplyFailed, status.Message(err), ""), 0, nil
		}
	}
	if why, err := r.relayCertProblem(ctx, caPEM); err != nil || why != "" {
		return Status(gw, openshellv1alpha1.ExternalPortsReasonRelayCertificateNotReady, why, ""), recheck, err
	}
	state.Generation = rt.GetGeneration()
	if state.Route, state.Policy, err = r.readOwn(ctx, rt); err != nil {
		return nil, 0, err
	}
	reason, msg, url := HTTPRoutePublished(state)
	return Status(gw, reason, msg, url), recheck, nil
}

// relayCertProblem says why the relay's external certificate would not
// pass the Gateway's check ("" when it would): the Secret the relay
// mounts must hold a certificate for the Service's DNS name that verifies
// against the CA bundle. On OpenShift the service-ca writes that Secret
// some moments after the Service appears.
func (r *Reconciler) relayCertProblem(ctx context.Context, caPEM []byte) (string, error) {
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: RelayCertSecret}, s); apierrors.IsNotFound(err) {
		return fmt.Sprintf("waiting for Secret %s, the relay's certificate", RelayCertSecret), nil
	} else if err != nil {
		return "", fmt.Errorf("read Secret %s: %w", RelayCertSecret, err)
	}
	if err := VerifyRelayCert(s.Data[corev1.TLSCertKey], caPEM, RelayHostname(r.Namespace), time.Now()); err != nil {
		return fmt.Sprintf("the relay's certificate (Secret %s) does not verify against the CA bundle %s: %v", RelayCertSecret, CABundleConfigMap, err), nil
	}
	return "", nil
}

// gatewayRecheck bounds how long a change of the Gateway (its listener's
// protocol) goes unseen when its controller does not report on the
// HTTPRoute again.
const gatewayRecheck = time.Minute

// readOwn reads the live HTTPRoute and BackendTLSPolicy (nil while the
// cache has not seen them).
func (r *Reconciler) readOwn(ctx context.Context, rt *gatewayv1.HTTPRoute) (*gatewayv1.HTTPRoute, *gatewayv1.BackendTLSPolicy, error) {
	route := &gatewayv1.HTTPRoute{}
	if err := r.GatewayAPI.Get(ctx, client.ObjectKeyFromObject(rt), route); apierrors.IsNotFound(err) {
		route = nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("get the external ports HTTPRoute: %w", err)
	}
	policy := &gatewayv1.BackendTLSPolicy{}
	if err := r.GatewayAPI.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: BackendTLSPolicyName}, policy); apierrors.IsNotFound(err) {
		policy = nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("get the relay's BackendTLSPolicy: %w", err)
	}
	return route, policy, nil
}

// readGateway reads the Gateway a parentRef names (nil when it is not
// there) from the API server: the operator may get Gateways, not watch
// them.
func (r *Reconciler) readGateway(ctx context.Context, ref *openshellv1alpha1.ExternalPortsParentRef) (*gatewayv1.Gateway, error) {
	parent := &gatewayv1.Gateway{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, parent); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("get Gateway %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return parent, nil
}

// deleteHTTPRoute deletes the HTTPRoute of the gateway key, if there is one.
func (r *Reconciler) deleteHTTPRoute(ctx context.Context, key types.NamespacedName) error {
	if r.GatewayAPI == nil {
		return nil
	}
	return r.deleteOwned(ctx, r.GatewayAPI, &gatewayv1.HTTPRoute{}, "HTTPRoute", key)
}

// releaseShared deletes the BackendTLSPolicy and the CA bundle once no
// gateway asks for an HTTPRoute. The relay's certificate stays: the relay
// mounts it, and turning HTTPRoutes on again needs no new CA.
func (r *Reconciler) releaseShared(ctx context.Context) error {
	if r.GatewayAPI == nil || r.Namespace == "" {
		return nil
	}
	list := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, list); err != nil {
		return fmt.Errorf("list gateways: %w", err)
	}
	for i := range list.Items {
		gw := &list.Items[i]
		if !WantsHTTPRoute(gw) || !gw.DeletionTimestamp.IsZero() {
			continue
		}
		// A tenant's own gateway, not served, keeps nothing alive.
		if served, err := r.Platform.Served(ctx, r.Client, gw); err != nil || served == "" {
			return err
		}
	}
	for _, obj := range []client.Object{BackendTLSPolicy(r.Namespace), CABundle(r.Namespace, nil)} {
		name := obj.GetName()
		if err := r.GatewayAPI.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		uid := obj.GetUID()
		if err := r.Client.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %s: %w", name, err)
		}
	}
	return nil
}
