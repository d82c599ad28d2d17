package providerprofile

import (
	"context"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// driftKey names one profile in one gateway catalog in Reconciler.compared.
func driftKey(p *openshellv1alpha1.OpenShellProviderProfile, gateway string, scope openshellv1alpha1.ProfileScope) string {
	return string(p.UID) + " " + gateway + " " + string(scope)
}

// compare reads an imported profile back from its catalog when its last
// comparison (or import) there is older than the drift period, and says
// whether it must be imported again: deleted there, or at a resource
// version other than the one the operator's import left (someone else's
// UpdateProviderProfiles, such as a Tenant Admin's gateway token). The
// import that follows checks the owner again, so a profile someone else
// put in its place is a conflict, never overwritten. An entry imported by
// an operator that did not record the resource version adopts the one it
// reads.
func (r *Reconciler) compare(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, p *openshellv1alpha1.OpenShellProviderProfile,
	e *openshellv1alpha1.ProviderProfileGatewayStatus) (bool, error) {
	key := driftKey(p, e.Gateway, e.Scope)
	if !r.compared.Due(key, r.DriftPeriod) {
		return false, nil
	}
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		return false, err
	}
	got, err := conn.GetProviderProfile(ctx, &openshellv1.GetProviderProfileRequest{Id: p.Name, WorkspaceScope: selector(e.Workspace)})
	switch rv := got.GetProfile().GetResourceVersion(); {
	case grpcstatus.Code(err) == codes.NotFound:
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "Import",
			"profile %s was deleted from %s of gateway %s directly: importing it again", p.Name, catalogName(e.Workspace), e.Gateway)
		return true, nil
	case err != nil:
		return false, err
	case e.GatewayResourceVersion == 0:
		e.GatewayResourceVersion = rv
	case rv != e.GatewayResourceVersion:
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "Import",
			"profile %s in %s of gateway %s was changed at the gateway directly (resource version %d, not the %d the operator imported): importing it again",
			p.Name, catalogName(e.Workspace), e.Gateway, rv, e.GatewayResourceVersion)
		return true, nil
	}
	r.compared.Done(key)
	return false, nil
}
