package provider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// driftKey names one provider at one gateway in Reconciler.compared.
func driftKey(p *openshellv1alpha1.OpenShellProvider, gateway string) string {
	return string(p.UID) + " " + gateway
}

// compare reads the provider back from gw when its last comparison (or
// push) there is older than the drift period, and says whether it must be
// written again: nil when it need not, else the credential and config
// keys the gateway holds (so that keys someone else added are deleted). A
// provider deleted at the gateway is written again (created); one of
// another owner under the operator's name is a *gwconn.ConflictError,
// never written. An entry pushed by an operator that did not record the
// gateway's resource version adopts the one it reads, if nothing else
// differs.
func (r *Reconciler) compare(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, p *openshellv1alpha1.OpenShellProvider,
	e *openshellv1alpha1.ProviderGatewayStatus) (*stale, error) {
	key := driftKey(p, e.Gateway)
	if !r.compared.Due(key, r.DriftPeriod) {
		return nil, nil
	}
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		return nil, err
	}
	resp, err := conn.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: e.Name, WorkspaceScope: gatewayapi.Workspace(e.Workspace)})
	if grpcstatus.Code(err) == codes.NotFound {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "Push",
			"provider %s was deleted at gateway %s directly: creating it again from %s", e.Name, e.Gateway, writtenFrom(p))
		return &stale{}, nil
	}
	if err != nil {
		return nil, err
	}
	got := resp.GetProvider()
	if !sandboxspec.OwnedBy(got.GetMetadata().GetLabels(), map[string]string{sandboxspec.LabelOwnerUID: string(p.UID)}) ||
		(e.GatewayID != "" && got.GetMetadata().GetId() != e.GatewayID) {
		// Not the record the operator created (labels can be copied, IDs
		// cannot): never written.
		return nil, &gwconn.ConflictError{Kind: "provider", Name: e.Name, Workspace: e.Workspace, Gateway: e.Gateway}
	}
	msg := providerDrift(*e, p, got, heldKeys(e))
	if msg == "" && len(e.Refresh) > 0 && e.GatewayResourceVersion != 0 && got.GetMetadata().GetResourceVersion() != e.GatewayResourceVersion {
		// A mint wrote the record, or someone else did: the values cannot
		// tell (REDACTED). The operator's own keys are written again,
		// without a warning: each mint costs one such push.
		return &stale{}, nil
	}
	if msg == "" {
		if e.GatewayResourceVersion == 0 {
			e.GatewayResourceVersion = got.GetMetadata().GetResourceVersion()
		}
		if e.GatewayID == "" {
			e.GatewayID = got.GetMetadata().GetId()
		}
		r.compared.Done(key)
		return nil, nil
	}
	r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "Push", "%s", msg)
	return &stale{credentials: credentialKeys(got), config: slices.Collect(maps.Keys(got.GetConfig()))}, nil
}

// providerDrift says how the provider a gateway holds differs from what
// the operator last wrote there, "" when it does not. Values cannot be
// compared (the gateway answers REDACTED) and are never named: a write by
// anyone else shows as a newer resource version. Pure.
func providerDrift(e openshellv1alpha1.ProviderGatewayStatus, p *openshellv1alpha1.OpenShellProvider, got *datamodelv1.Provider, held []string) string {
	var diffs []string
	// Each mint of a refreshed credential writes the record, so with
	// refreshes a newer resource version is no sign of a foreign write
	// (compare writes the operator's keys again, quietly); the gateway's
	// keys (held) are its own.
	if rv := got.GetMetadata().GetResourceVersion(); e.GatewayResourceVersion != 0 && rv != e.GatewayResourceVersion && len(e.Refresh) == 0 {
		diffs = append(diffs, fmt.Sprintf("resource version %d, not the %d the operator wrote", rv, e.GatewayResourceVersion))
	}
	isHeld := func(k string) bool { return slices.Contains(held, k) }
	keys, wrote := slices.DeleteFunc(credentialKeys(got), isHeld), slices.DeleteFunc(slices.Clone(e.CredentialKeys), isHeld)
	if !slices.Equal(keys, wrote) {
		diffs = append(diffs, fmt.Sprintf("credential keys [%s], not [%s]", strings.Join(keys, ", "), strings.Join(wrote, ", ")))
	}
	if !maps.Equal(got.GetConfig(), p.Spec.Config) {
		diffs = append(diffs, "config differs from spec.config")
	}
	if !strings.EqualFold(got.GetType(), p.Spec.Type) {
		diffs = append(diffs, fmt.Sprintf("type %q, not %q", got.GetType(), p.Spec.Type))
	}
	if got.GetProfileWorkspace() != e.ProfileWorkspace {
		diffs = append(diffs, fmt.Sprintf("profile workspace %q, not %q", got.GetProfileWorkspace(), e.ProfileWorkspace))
	}
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprintf("provider %s at gateway %s was changed at the gateway directly (%s): writing it again from %s",
		e.Name, e.Gateway, strings.Join(diffs, "; "), writtenFrom(p))
}

// writtenFrom names what the operator writes a provider from.
func writtenFrom(p *openshellv1alpha1.OpenShellProvider) string {
	if p.Spec.CredentialsSecretRef == nil {
		return "spec"
	}
	return "Secret " + p.Spec.CredentialsSecretRef.Name + " and spec"
}

// credentialKeys are the names, sorted, of the credentials a gateway
// provider holds, inline or behind a handle.
func credentialKeys(got *datamodelv1.Provider) []string {
	keys := slices.Collect(maps.Keys(got.GetCredentials()))
	for k := range got.GetCredentialHandles() {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
