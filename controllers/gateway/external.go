package gateway

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"google.golang.org/grpc/status"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	gwstatus "github.com/openshell/openshell-operator/internal/status"
)

// externalHealthPeriod is how often an External gateway's Health RPC is
// called: one small unauthenticated read per gateway per period.
const externalHealthPeriod = time.Minute

// notNowRetry is how soon a Health call the operator could not make (its
// bulkhead full, its issuer not signing yet) is tried again.
const notNowRetry = 2 * time.Second

// errNotNow says nothing new is known for a reason of the operator's own
// (a Health RPC it could not make, gwconn.NotNow; its issuer still
// starting): the status keeps what it said.
var errNotNow = errors.New("nothing new is known yet: the operator is starting")

// checkExternal calls the gateway's Health RPC and reports reachability.
// errNotNow means there is nothing to report yet.
func (r *Reconciler) checkExternal(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (health, ctrl.Result, error) {
	var h health
	res := ctrl.Result{RequeueAfter: externalHealthPeriod}
	gw.Status.Endpoint = gw.Spec.External.Endpoint
	unreachable := func(msg string) (health, ctrl.Result, error) {
		gwstatus.SetCondition(gw, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonUnreachable, msg)
		h.degraded = append(h.degraded, issue{Reason: openshellv1alpha1.GatewayReasonUnreachable, Message: msg})
		return h, ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	}
	if r.Gateways == nil {
		return unreachable("no gateway connections configured")
	}
	conn, err := r.Gateways.Probe(ctx, gw) // Health's wire is the same on every line
	if gwconn.NotNow(err) {
		return h, ctrl.Result{RequeueAfter: notNowRetry}, errNotNow
	}
	if err != nil {
		return unreachable(err.Error())
	}
	resp, err := conn.Health(ctx, &openshellv1.HealthRequest{})
	if gwconn.NotNow(err) {
		return h, ctrl.Result{RequeueAfter: notNowRetry}, errNotNow
	}
	if err != nil {
		return unreachable("Health RPC failed: " + status.Convert(err).Message())
	}
	if resp.Status != openshellv1.ServiceStatus_SERVICE_STATUS_HEALTHY {
		return unreachable("the gateway reports " + resp.Status.String())
	}
	gw.Status.Version = resp.Version
	gwstatus.SetCondition(gw, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonHealthy, "Health RPC answered HEALTHY")
	if why := gatewayline.Check(resp.Version); why != "" {
		// Sandboxes and providers are not sent to it (gwconn.Connect).
		h.degraded = append(h.degraded, issue{Reason: openshellv1alpha1.GatewayReasonVersionNotSupported, Message: why})
		return h, res, nil
	}
	h.ready = "the external gateway answers its Health RPC"
	return h, res, nil
}
