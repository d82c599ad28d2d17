// Package provider reconciles OpenShellProvider objects: it pushes the
// provider, with credentials read from its Secret in the same namespace, to
// every gateway whose sandboxes attach it, pushes again when the Secret
// rotates, and deletes it there when it goes. Credential values are never
// written to status, events or logs, and a provider is never read back
// from the gateway and written again (the gateway returns REDACTED).
package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/driftcheck"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// Finalizer deletes the provider at its gateways first.
const Finalizer = "openshell.ai/provider-cleanup"

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellproviders,verbs=list;watch;patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellproviders/status,verbs=patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellproviders/finalizers,verbs=update,namespace=system

// Reconciler reconciles OpenShellProvider.
type Reconciler struct {
	Client client.Client
	// APIReader reads credential Secrets on demand: they are never cached.
	APIReader client.Reader
	Gateways  *gwconn.Resolver
	Recorder  events.EventRecorder
	// SecretMetadata is a metadata-only cache of Secrets: rotations are
	// noticed without holding any Secret value in memory.
	SecretMetadata cache.Cache
	// Platform decides which gateways a namespace may push providers to.
	Platform tenancy.Platform
	// DriftPeriod is how often, at most, a pushed provider is read back
	// at each gateway and compared (0: driftcheck.DefaultPeriod): it bounds how
	// long a change made at the gateway directly lasts.
	DriftPeriod time.Duration

	// compared remembers when each provider was last compared with, or
	// pushed to, each gateway (driftKey → time.Time): only this
	// reconciler reads and writes it.
	compared driftcheck.Schedule
	// refreshPolls remembers when each provider's refresh status was last
	// read at each gateway (driftKey → time.Time); only this reconciler
	// uses it.
	refreshPolls driftcheck.Schedule
	// rotations remembers each provider's last rotation at each gateway
	// (driftKey → time.Time), which bounds how often a rotation mints;
	// retries when each rejected refresh was last configured (driftKey
	// and credential key).
	rotations, retries driftcheck.Schedule
	// digests holds, per provider, gateway and credential key, a SHA-256
	// of the material last configured there (never stored elsewhere): a
	// material Secret whose resourceVersion moved without its data
	// changing (a label, a sync) is not configured again.
	digests sync.Map
	// written holds off a reconcile whose cached copy predates this
	// reconciler's last write.
	written status.OwnWrites
}

// Reconcile pushes the provider where it is needed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &openshellv1alpha1.OpenShellProvider{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx, behind, done := r.written.Begin(ctx, req.NamespacedName, p.ResourceVersion)
	if behind {
		// The cache predates this reconciler's last write: it would push
		// again what it pushed (status.OwnWrites). The write's arrival
		// re-queues it.
		return ctrl.Result{RequeueAfter: status.StaleRetry}, nil
	}
	defer func() { done(p.ResourceVersion) }()
	if !p.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, p)
	}
	orig := p.DeepCopy()
	ns, nsUID, err := tenancy.ReadNamespace(ctx, r.Client, p.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	needed, refused, err := r.neededGateways(ctx, p, ns)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(needed) > 0 {
		if _, err := status.AddFinalizer(ctx, r.Client, orig, p, Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	pending, err := r.withdrawStale(ctx, p, needed)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.recordTargets(ctx, orig, p, needed, nsUID); err != nil {
		return ctrl.Result{}, err
	}
	res, acted, synced := r.push(ctx, p, nsUID, needed, refused)
	res.RequeueAfter = enqueue.Sooner(res.RequeueAfter, r.refreshAll(ctx, orig, p, needed, synced))
	if pending {
		res.RequeueAfter = enqueue.Sooner(res.RequeueAfter, deleteRetry)
	}
	if acted {
		p.Status.ObservedGeneration = p.Generation
	}
	return res, status.Patch(ctx, r.Client, orig, p)
}

// recordTargets persists, before the first push to a gateway, that the
// provider may be there (an entry without a Secret version): a deletion that
// follows, even one that beats the push's own status write, then withdraws
// it there - after checking the gateway provider is this one's.
func (r *Reconciler) recordTargets(ctx context.Context, orig, p *openshellv1alpha1.OpenShellProvider,
	needed []*openshellv1alpha1.OpenShellGateway, nsUID types.UID) error {
	return status.Record(ctx, r.Client, orig, p, func(x *openshellv1alpha1.OpenShellProvider) {
		for _, gw := range needed {
			key := gwconn.Key(gw)
			if !slices.ContainsFunc(x.Status.Gateways, func(e openshellv1alpha1.ProviderGatewayStatus) bool { return e.Gateway == key }) {
				x.Status.Gateways = append(x.Status.Gateways, openshellv1alpha1.ProviderGatewayStatus{Gateway: key, Name: x.Name,
					Workspace: sandboxspec.WorkspaceName(x.Namespace, nsUID)})
			}
		}
	})
}

// neededGateways are the existing gateways of sandboxes that attach p and
// that p's namespace may use; refused says why the others are skipped.
// Credentials are never sent to a gateway the namespace may not use.
func (r *Reconciler) neededGateways(ctx context.Context, p *openshellv1alpha1.OpenShellProvider, ns tenancy.Namespace) (
	needed []*openshellv1alpha1.OpenShellGateway, refused []string, err error) {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, list, client.InNamespace(p.Namespace), client.MatchingFields{index.SandboxProviders: p.Name}); err != nil {
		return nil, nil, fmt.Errorf("list sandboxes using provider: %w", err)
	}
	seen := map[string]bool{}
	for i := range list.Items {
		key := list.Items[i].GatewayKey()
		if seen[key.String()] {
			continue
		}
		seen[key.String()] = true
		gw := &openshellv1alpha1.OpenShellGateway{}
		if err := r.Client.Get(ctx, key, gw); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, nil, err
		}
		msg, err := r.Platform.Access(ctx, r.Client, gw, ns)
		if err != nil {
			return nil, nil, err
		}
		if msg != "" {
			refused = append(refused, msg)
			continue
		}
		needed = append(needed, gw)
	}
	sort.Slice(needed, func(i, j int) bool { return gwconn.Key(needed[i]) < gwconn.Key(needed[j]) })
	sort.Strings(refused)
	return needed, refused, nil
}

// credentials reads the Secret; keys filters it. It returns the values and
// the Secret's resourceVersion.
func (r *Reconciler) credentials(ctx context.Context, p *openshellv1alpha1.OpenShellProvider) (map[string]string, string, error) {
	ref := p.Spec.CredentialsSecretRef
	if ref == nil {
		return map[string]string{}, "", nil
	}
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ref.Name}, s); err != nil {
		return nil, "", err
	}
	creds := map[string]string{}
	for k, v := range s.Data {
		if len(ref.Keys) == 0 || slices.Contains(ref.Keys, k) {
			creds[k] = string(v)
		}
	}
	for _, k := range ref.Keys {
		if _, ok := creds[k]; !ok {
			return nil, "", fmt.Errorf("secret %s has no key %q", ref.Name, k)
		}
	}
	return creds, s.ResourceVersion, nil
}

// push brings every needed gateway up to date and reports whether this
// generation was fully acted on: every push succeeded, or what failed needs
// a human (a conflict, a missing Secret, a refused gateway) rather than a
// retry.
func (r *Reconciler) push(ctx context.Context, p *openshellv1alpha1.OpenShellProvider, nsUID types.UID,
	needed []*openshellv1alpha1.OpenShellGateway, refused []string) (res ctrl.Result, acted bool, synced map[string]bool) {
	if len(needed) == 0 && len(refused) == 0 {
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonUnused, "no sandbox attaches this provider yet")
		return ctrl.Result{}, true, nil
	}
	if len(needed) == 0 {
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ReasonGatewayNotAllowed, strings.Join(refused, "; "))
		return ctrl.Result{}, true, nil
	}
	creds, secretRV, err := r.credentials(ctx, p)
	if err != nil {
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ProviderReasonSecretNotFound, credentialsError(p, err))
		return ctrl.Result{}, true, nil
	}
	failed, conflict, synced := r.pushEach(ctx, p, nsUID, needed, creds, secretRV)
	switch {
	case conflict == openshellv1alpha1.ProviderReasonProfileMissing:
		// A gateway admin may import it out of band, which no watch sees.
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, conflict, strings.Join(failed, "; "))
		return ctrl.Result{RequeueAfter: profileRecheck}, true, synced
	case conflict != "":
		// Not retried on a timer: it needs a gateway admin, a rename, or a
		// profile's import (whose status change re-queues the provider).
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, conflict, strings.Join(failed, "; "))
		return ctrl.Result{}, true, synced
	case len(failed) > 0:
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ProviderReasonGatewayError, strings.Join(failed, "; "))
		return ctrl.Result{RequeueAfter: pushRetry}, false, synced
	case len(refused) > 0:
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ReasonGatewayNotAllowed, strings.Join(refused, "; "))
		return ctrl.Result{}, true, synced
	}
	status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced,
		fmt.Sprintf("pushed to %d gateway(s)", len(needed)))
	// The next comparison with what the gateways hold.
	return ctrl.Result{RequeueAfter: driftcheck.Period(r.DriftPeriod)}, true, synced
}

// pushEach brings each needed gateway up to date: the failures, the
// reason when one met a workspace or provider of another owner, and the
// gateways now in sync.
func (r *Reconciler) pushEach(ctx context.Context, p *openshellv1alpha1.OpenShellProvider, nsUID types.UID,
	needed []*openshellv1alpha1.OpenShellGateway, creds map[string]string, secretRV string) (failed []string, conflict string, synced map[string]bool) {
	synced = map[string]bool{}
	for _, gw := range needed {
		reason, msg := r.pushIfChanged(ctx, gw, p, nsUID, creds, secretRV)
		switch {
		case msg == "":
			synced[gwconn.Key(gw)] = true
		case reason != "":
			conflict = reason
			failed = append(failed, msg)
		default:
			failed = append(failed, msg)
		}
	}
	return failed, conflict, synced
}

// pushRetry is how soon a failed push is tried again; deleteRetry how soon
// a provider waiting to be deleted at a gateway is.
const (
	pushRetry   = 5 * time.Second
	deleteRetry = 2 * time.Second
	// profileRecheck is how soon a gateway is asked again for a profile
	// that no OpenShellProviderProfile declares.
	profileRecheck = time.Minute
)

// credentialsError says why the credentials Secret could not be used, never
// with a value.
func credentialsError(p *openshellv1alpha1.OpenShellProvider, err error) string {
	var apiErr apierrors.APIStatus
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("Secret %s not found in namespace %s", p.Spec.CredentialsSecretRef.Name, p.Namespace)
	case errors.As(err, &apiErr):
		return fmt.Sprintf("cannot read Secret %s: %s", p.Spec.CredentialsSecretRef.Name, apiErr.Status().Reason)
	default:
		return err.Error() // our own message naming a missing key
	}
}

// pushIfChanged pushes to one gateway unless its status entry already
// records this Secret version and generation, and records the result. A
// failure comes back as a message; a conflict also as its reason.
func (r *Reconciler) pushIfChanged(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, p *openshellv1alpha1.OpenShellProvider,
	nsUID types.UID, creds map[string]string, secretRV string) (conflictReason, failure string) {
	key := gwconn.Key(gw)
	line, err := r.Gateways.Line(ctx, gw)
	if err != nil {
		return "", fmt.Sprintf("%s: %s", key, err)
	}
	i := slices.IndexFunc(p.Status.Gateways, func(g openshellv1alpha1.ProviderGatewayStatus) bool { return g.Gateway == key })
	// An entry without a Secret version is only an intent (recordTargets):
	// nothing confirmed there yet, so the push creates (ownership-checked).
	known := i >= 0 && p.Status.Gateways[i].SecretResourceVersion != ""
	var old stale
	if known {
		old.credentials, old.id = p.Status.Gateways[i].CredentialKeys, p.Status.Gateways[i].GatewayID
	}
	if i >= 0 && p.Status.Gateways[i].SecretResourceVersion == secretRV && p.Status.Gateways[i].ObservedGeneration == p.Generation &&
		p.Status.Gateways[i].GatewayInstance == gw.Status.Instance && pushedLine(p.Status.Gateways[i]) == line &&
		p.Status.Gateways[i].ProfileWorkspace == r.declaredCatalog(ctx, line, gw, p, nsUID) {
		atGateway, err := r.compare(ctx, gw, p, &p.Status.Gateways[i])
		switch c := (*gwconn.ConflictError)(nil); {
		case errors.As(err, &c):
			return openshellv1alpha1.ReasonProviderConflict, c.Error()
		case err != nil:
			return "", fmt.Sprintf("%s: %s", key, grpcstatus.Convert(err).Message())
		case atGateway == nil:
			return "", ""
		}
		// Keys someone else added at the gateway are deleted too.
		old = old.and(*atGateway)
	}
	entry, err := r.pushTo(ctx, gw, p, nsUID, creds, old, known)
	if pe := (*profileError)(nil); errors.As(err, &pe) {
		return pe.reason, pe.Error()
	}
	if c := (*gwconn.ConflictError)(nil); errors.As(err, &c) {
		if c.Kind == "workspace" {
			return openshellv1alpha1.ReasonWorkspaceConflict, c.Error()
		}
		return openshellv1alpha1.ReasonProviderConflict, c.Error()
	}
	if err != nil {
		return "", fmt.Sprintf("%s: %s", key, grpcstatus.Convert(err).Message())
	}
	entry.SecretResourceVersion, entry.ObservedGeneration, entry.GatewayInstance = secretRV, p.Generation, gw.Status.Instance
	r.compared.Done(driftKey(p, key))
	if line != gatewayline.Legacy {
		entry.Line = string(line)
	}
	entry.ProfileWorkspace = r.declaredCatalog(ctx, line, gw, p, nsUID)
	recordPush(p, i, entry)
	r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "CredentialsPushed", "Push",
		"provider pushed to gateway %s (%d credential keys)", key, len(creds))
	return "", ""
}

// recordPush stores entry as p's status at its gateway, index i of
// status.gateways (-1: a new one). Pushing to the same record leaves its
// refreshes standing; a record made anew has none (they went with the
// old one) and is configured again.
func recordPush(p *openshellv1alpha1.OpenShellProvider, i int, entry openshellv1alpha1.ProviderGatewayStatus) {
	if i < 0 {
		p.Status.Gateways = append(p.Status.Gateways, entry)
		return
	}
	if old := p.Status.Gateways[i]; old.GatewayID == "" || old.GatewayID == entry.GatewayID {
		entry.Refresh, entry.Rotation = old.Refresh, old.Rotation
	}
	p.Status.Gateways[i] = entry
}

// stale is what a push knows of the record at a gateway: the keys it
// deletes unless still declared (the credentials of the last push, and
// what someone else added there), and the record's ID ("" if unknown).
type stale struct {
	credentials, config []string
	id                  string
}

func (s stale) and(o stale) stale {
	return stale{credentials: append(slices.Clone(s.credentials), o.credentials...), config: append(slices.Clone(s.config), o.config...), id: s.id}
}

// pushTo creates or updates the provider at one gateway with the full
// current credentials; stale keys are sent empty (deleted). A
// provider it did not create is never updated: UpdateProvider merges, so
// writing into another owner's provider would mix credentials.
func (r *Reconciler) pushTo(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, p *openshellv1alpha1.OpenShellProvider,
	nsUID types.UID, creds map[string]string, old stale, known bool) (openshellv1alpha1.ProviderGatewayStatus, error) {
	entry := openshellv1alpha1.ProviderGatewayStatus{Gateway: gwconn.Key(gw), Name: p.Name, CredentialKeys: pushedKeys(creds)}
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		return entry, err
	}
	ws, err := r.Gateways.EnsureWorkspace(ctx, conn, gwconn.Key(gw), p.Namespace, nsUID)
	if err != nil {
		return entry, err
	}
	entry.Workspace = ws
	profileWS, err := r.profileCatalog(ctx, conn, gw, p, ws)
	if err != nil {
		return entry, err
	}
	owner := ownerLabels(p, nsUID)
	msg := &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: p.Name, Labels: owner}, Type: p.Spec.Type,
		Credentials: creds, Config: p.Spec.Config, ProfileWorkspace: profileWS}
	if !known {
		resp, err := conn.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: msg, WorkspaceScope: gatewayapi.Workspace(ws)})
		entry.GatewayResourceVersion, entry.GatewayID = resp.GetProvider().GetMetadata().GetResourceVersion(), resp.GetProvider().GetMetadata().GetId()
		if grpcstatus.Code(err) == codes.NotFound {
			// The gateway lost the workspace (a new database): the retry
			// creates it again.
			r.Gateways.ForgetWorkspace(gwconn.Key(gw), ws)
		}
		if grpcstatus.Code(err) != codes.AlreadyExists {
			return entry, err
		}
		// Ours after a lost status write, or someone else's: the labels decide.
		got, err := conn.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: p.Name, WorkspaceScope: gatewayapi.Workspace(ws)})
		if err != nil {
			return entry, err
		}
		if !sandboxspec.OwnedBy(got.GetProvider().GetMetadata().GetLabels(), owner) {
			return entry, &gwconn.ConflictError{Kind: "provider", Name: p.Name, Workspace: ws, Gateway: gwconn.Key(gw)}
		}
	}
	if known && old.id != "" {
		switch same, err := sameRecord(ctx, conn, gw, p.Name, ws, old.id); {
		case err != nil:
			return entry, err
		case !same:
			return r.pushTo(ctx, gw, p, nsUID, creds, stale{}, false)
		}
	}
	// A refreshed credential is the gateway's: never written or deleted
	// here (the gateway refuses both).
	refreshed := heldKeys(entryAt(p, gwconn.Key(gw)))
	upd := &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: p.Name}, Type: p.Spec.Type,
		Credentials: without(withDeleted(creds, old.credentials), refreshed), Config: withDeleted(p.Spec.Config, old.config), ProfileWorkspace: profileWS}
	resp, err := conn.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: upd, WorkspaceScope: gatewayapi.Workspace(ws)})
	if known && grpcstatus.Code(err) == codes.NotFound {
		// The gateway lost it (a new database, deleted by hand): create it anew.
		return r.pushTo(ctx, gw, p, nsUID, creds, stale{}, false)
	}
	entry.GatewayResourceVersion, entry.GatewayID = resp.GetProvider().GetMetadata().GetResourceVersion(), resp.GetProvider().GetMetadata().GetId()
	return entry, err
}

// entryAt is p's status entry for gateway key, nil if none.
func entryAt(p *openshellv1alpha1.OpenShellProvider, key string) *openshellv1alpha1.ProviderGatewayStatus {
	i := slices.IndexFunc(p.Status.Gateways, func(g openshellv1alpha1.ProviderGatewayStatus) bool { return g.Gateway == key })
	if i < 0 {
		return nil
	}
	return &p.Status.Gateways[i]
}

// pushedKeys are the names, sorted, of the credentials a push leaves at
// the gateway: an empty value deletes its key there.
func pushedKeys(creds map[string]string) []string {
	var keys []string
	for k, v := range creds {
		if v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// sameRecord says whether the provider record of the name in ws is still
// the one of ID id, false when there is none (it is created again).
// UpdateProvider merges into whatever record has the name, so one made
// again by someone else (its owner labels copied) is a
// *gwconn.ConflictError: it never gets the credentials.
func sameRecord(ctx context.Context, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway, name, ws, id string) (bool, error) {
	got, err := conn.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: name, WorkspaceScope: gatewayapi.Workspace(ws)})
	switch {
	case grpcstatus.Code(err) == codes.NotFound:
		return false, nil
	case err != nil:
		return false, err
	case got.GetProvider().GetMetadata().GetId() != id:
		return false, &gwconn.ConflictError{Kind: "provider", Name: name + " (created again at the gateway by someone else)", Workspace: ws, Gateway: gwconn.Key(gw)}
	}
	return true, nil
}

// withDeleted is want with every other key of old mapped to "", which
// UpdateProvider (a merge) takes as a deletion.
func withDeleted(want map[string]string, old []string) map[string]string {
	out := make(map[string]string, len(want)+len(old))
	for _, k := range old {
		out[k] = ""
	}
	maps.Copy(out, want)
	return out
}

// declaredCatalog is the profile_workspace the declared profiles give a
// provider at gw (what profileCatalog decides, without asking the
// gateway): its namespace's workspace when the namespace declares its
// type and the gateway's platform does not, else the platform catalog.
// A change (a profile declared, a platform profile added) pushes again.
func (r *Reconciler) declaredCatalog(ctx context.Context, line gatewayline.Line, gw *openshellv1alpha1.OpenShellGateway,
	p *openshellv1alpha1.OpenShellProvider, nsUID types.UID) string {
	if !gatewayline.ImportsProfiles(line) || slices.Contains(gw.Spec.ProviderProfiles, p.Spec.Type) {
		return ""
	}
	prof := &openshellv1alpha1.OpenShellProviderProfile{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Spec.Type}, prof); err != nil || !prof.DeletionTimestamp.IsZero() {
		return ""
	}
	return sandboxspec.WorkspaceName(p.Namespace, nsUID)
}

// pushedLine is the line an entry was pushed in (none recorded: 0.0.x).
func pushedLine(e openshellv1alpha1.ProviderGatewayStatus) gatewayline.Line {
	if e.Line == "" {
		return gatewayline.Legacy
	}
	return gatewayline.Line(e.Line)
}

// profileError says why a provider cannot be pushed to a 0.1 gateway yet:
// its type's profile is missing there, or declared but not imported.
type profileError struct {
	reason, msg string
}

func (e *profileError) Error() string { return e.msg }

// profileCatalog decides which catalog of a 0.1 gateway holds the
// profile of the provider's type, and returns the provider's
// profile_workspace for it ("" for the platform's). The platform's
// declared profile wins over the namespace's (a tenant cannot replace
// what the platform defines); a declared profile must be imported at this
// gateway incarnation first; an undeclared one must already be in the
// platform catalog (imported there by the gateway's admin).
func (r *Reconciler) profileCatalog(ctx context.Context, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway,
	p *openshellv1alpha1.OpenShellProvider, ws string) (string, error) {
	if !gatewayline.ImportsProfiles(conn.Line) {
		return "", nil // 0.0.x builds its profiles in
	}
	id := p.Spec.Type
	scope, profileNS, catalog := openshellv1alpha1.ProfileScopeWorkspace, p.Namespace, ws
	if slices.Contains(gw.Spec.ProviderProfiles, id) {
		scope, profileNS, catalog = openshellv1alpha1.ProfileScopePlatform, gw.Namespace, ""
	}
	prof := &openshellv1alpha1.OpenShellProviderProfile{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: profileNS, Name: id}, prof)
	switch {
	case err == nil:
		if imported(prof, gw, scope) {
			return catalog, nil
		}
		return "", &profileError{reason: openshellv1alpha1.ProviderReasonProfilePending, msg: fmt.Sprintf(
			"waiting for OpenShellProviderProfile %s/%s to be imported at gateway %s (see its status)", profileNS, id, gwconn.Key(gw))}
	case !apierrors.IsNotFound(err):
		return "", err
	case scope == openshellv1alpha1.ProfileScopePlatform:
		return "", &profileError{reason: openshellv1alpha1.ProviderReasonProfileMissing, msg: fmt.Sprintf(
			"gateway %s lists provider profile %s in spec.providerProfiles, but namespace %s has no OpenShellProviderProfile %s: "+
				"the platform admin must create it", gwconn.Key(gw), id, gw.Namespace, id)}
	}
	_, err = conn.GetProviderProfile(ctx, &openshellv1.GetProviderProfileRequest{Id: id})
	if grpcstatus.Code(err) == codes.NotFound {
		return "", &profileError{reason: openshellv1alpha1.ProviderReasonProfileMissing, msg: fmt.Sprintf(
			"gateway %s (OpenShell 0.1) has no provider profile %s: create an OpenShellProviderProfile named %s in namespace %s, "+
				"or ask the platform admin to provide it (the gateway's spec.providerProfiles)", gwconn.Key(gw), id, id, p.Namespace)}
	}
	return "", err
}

// imported says whether a profile is in a gateway's catalog of scope at
// the gateway's current incarnation.
func imported(prof *openshellv1alpha1.OpenShellProviderProfile, gw *openshellv1alpha1.OpenShellGateway, scope openshellv1alpha1.ProfileScope) bool {
	return prof.DeletionTimestamp.IsZero() && slices.ContainsFunc(prof.Status.Gateways, func(e openshellv1alpha1.ProviderProfileGatewayStatus) bool {
		return e.Gateway == gwconn.Key(gw) && e.Scope == scope && e.ObservedGeneration > 0 && e.GatewayInstance == gw.Status.Instance
	})
}

// ownerLabels mark a gateway provider as created for this OpenShellProvider
// in this namespace incarnation.
func ownerLabels(p *openshellv1alpha1.OpenShellProvider, nsUID types.UID) map[string]string {
	l := sandboxspec.WorkspaceLabels(p.Namespace, nsUID)
	l[sandboxspec.LabelOwnerUID] = string(p.UID)
	return l
}

func (r *Reconciler) reconcileDelete(ctx context.Context, p *openshellv1alpha1.OpenShellProvider) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		return ctrl.Result{}, nil
	}
	orig := p.DeepCopy()
	left, _, err := r.withdraw(ctx, p, p.Status.Gateways)
	if err != nil {
		return ctrl.Result{}, err
	}
	p.Status.Gateways = left
	if len(left) > 0 {
		if err := status.Patch(ctx, r.Client, orig, p); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: deleteRetry}, nil
	}
	return ctrl.Result{}, status.RemoveFinalizer(ctx, r.Client, p, Finalizer)
}

// withdrawStale deletes the provider at the gateways it was pushed to that
// no longer need it (no sandbox attaches it there any more, or the
// gateway's tenancy stopped admitting the namespace): revoked access also
// takes the credentials back, once no running sandbox has them attached
// (the gateway refuses to delete an attached provider; the sandbox's
// deletion or detach re-queues this provider). It reports whether a retry
// on a timer is due.
func (r *Reconciler) withdrawStale(ctx context.Context, p *openshellv1alpha1.OpenShellProvider, needed []*openshellv1alpha1.OpenShellGateway) (bool, error) {
	var keep, stale []openshellv1alpha1.ProviderGatewayStatus
	for _, e := range p.Status.Gateways {
		if slices.ContainsFunc(needed, func(gw *openshellv1alpha1.OpenShellGateway) bool { return gwconn.Key(gw) == e.Gateway }) {
			keep = append(keep, e)
		} else {
			stale = append(stale, e)
		}
	}
	if len(stale) == 0 {
		return false, nil
	}
	left, retry, err := r.withdraw(ctx, p, stale)
	if err != nil {
		return false, err
	}
	p.Status.Gateways = append(keep, left...)
	return retry, nil
}

// withdraw deletes the provider at each entry's gateway and returns the
// entries it could not delete yet (a gateway that is gone holds nothing),
// and whether any failed for a reason other than sandboxes still
// attaching it (worth a retry on a timer).
func (r *Reconciler) withdraw(ctx context.Context, p *openshellv1alpha1.OpenShellProvider, entries []openshellv1alpha1.ProviderGatewayStatus) (
	left []openshellv1alpha1.ProviderGatewayStatus, retry bool, err error) {
	for _, e := range entries {
		ns, name, _ := strings.Cut(e.Gateway, "/")
		gw := &openshellv1alpha1.OpenShellGateway{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, gw); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, false, err
		}
		conn, err := r.Gateways.Connect(ctx, gw)
		if err == nil {
			err = r.deleteAt(ctx, conn, p, e)
		}
		if err != nil {
			left = append(left, e)
			retry = retry || grpcstatus.Code(err) != codes.FailedPrecondition
			status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ProviderReasonAttachedAtGateway,
				"waiting to delete the provider at "+e.Gateway+": "+grpcstatus.Convert(err).Message())
		}
	}
	return left, retry, nil
}

// deleteAt deletes the provider of one status entry at its gateway. An
// unconfirmed entry (an intent whose push may never have happened) is
// deleted only if the gateway provider carries this provider's owner
// labels: another owner's provider of the same name is never touched.
func (r *Reconciler) deleteAt(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProvider, e openshellv1alpha1.ProviderGatewayStatus) error {
	r.compared.Forget(driftKey(p, e.Gateway))
	r.forgetRefreshes(p, e)
	if e.SecretResourceVersion == "" {
		got, err := conn.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: e.Name, WorkspaceScope: gatewayapi.Workspace(e.Workspace)})
		if grpcstatus.Code(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		_, nsUID, err := tenancy.ReadNamespace(ctx, r.Client, p.Namespace)
		if err != nil {
			return err
		}
		if !sandboxspec.OwnedBy(got.GetProvider().GetMetadata().GetLabels(), ownerLabels(p, nsUID)) {
			return nil
		}
	}
	_, err := conn.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: e.Name, WorkspaceScope: gatewayapi.Workspace(e.Workspace)})
	if grpcstatus.Code(err) == codes.NotFound {
		return nil // already gone (a new gateway database, or deleted by hand)
	}
	return err
}

// SetupWithManager registers the reconciler: sandbox changes re-queue the
// providers they attach; Secret changes (metadata only) re-queue the
// providers that reference them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellProvider{}).
		Named("openshellprovider").
		// Gateway calls: the same jittered backoff as sandboxes.
		WithOptions(controller.Options{RateLimiter: enqueue.Backoff(time.Second, 5*time.Minute)}).
		Watches(&openshellv1alpha1.OpenShellSandbox{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return providersOf(o.(*openshellv1alpha1.OpenShellSandbox))
		})).
		// Access decisions: a gateway's tenancy, a namespace's labels.
		// A replaced gateway pod (status.instance) may have lost them.
		Watches(&openshellv1alpha1.OpenShellGateway{}, handler.EnqueueRequestsFromMapFunc(r.providersOnGateway),
			builder.WithPredicates(predicate.Or[client.Object](index.SpecOrDeletionChanged, instanceChanged))).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellProviderList{}, client.InNamespace(o.GetName()))
		}), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		// A profile's import (or its removal) decides whether providers
		// of its type may be pushed; a platform profile serves every
		// namespace.
		Watches(&openshellv1alpha1.OpenShellProviderProfile{}, handler.EnqueueRequestsFromMapFunc(r.providersOfProfile), builder.WithPredicates(profileChanged)).
		WatchesRawSource(source.Kind(r.SecretMetadata, index.SecretMetadata(), handler.TypedEnqueueRequestsFromMapFunc(
			func(ctx context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
				return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellProviderList{},
					client.InNamespace(o.GetNamespace()), client.MatchingFields{index.ProviderSecret: o.GetName()})
			}))).
		Complete(traced.Reconciler("openshellprovider", status.RetryStale(r)))
}

// providersOf lists the providers a sandbox names or still has attached
// at its gateway. The attached ones count too: a provider dropped from
// spec.providers cannot be withdrawn while the gateway still attaches it
// (FailedPrecondition, not retried on a timer), and the event that frees
// it — the detach's status write, or the sandbox's deletion while its
// access is revoked — names it only in status.attachedProviders.
func providersOf(sb *openshellv1alpha1.OpenShellSandbox) []reconcile.Request {
	names := slices.Concat(sb.Spec.Providers, sb.Status.AttachedProviders)
	slices.Sort(names)
	names = slices.Compact(names)
	reqs := make([]reconcile.Request, 0, len(names))
	for _, name := range names {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: sb.Namespace, Name: name}})
	}
	return reqs
}

// providersOnGateway lists the providers attached by the sandboxes of a
// gateway, so a change of its tenancy pushes or withdraws them.
func (r *Reconciler) providersOnGateway(ctx context.Context, o client.Object) []reconcile.Request {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.SandboxGateway: client.ObjectKeyFromObject(o).String()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		for _, req := range providersOf(&list.Items[i]) {
			if !slices.Contains(reqs, req) {
				reqs = append(reqs, req)
			}
		}
	}
	return reqs
}

// instanceChanged passes a gateway whose serving pods were replaced, or
// whose platform catalog now holds other shipped profiles (a provider
// waiting with ProfileMissing is asked again at once).
var instanceChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*openshellv1alpha1.OpenShellGateway)
	n, ok2 := e.ObjectNew.(*openshellv1alpha1.OpenShellGateway)
	return ok1 && ok2 && (o.Status.Instance != n.Status.Instance ||
		!equality.Semantic.DeepEqual(o.Status.BuiltinProviderProfiles, n.Status.BuiltinProviderProfiles))
}}

// profileChanged passes a profile whose spec, deletion or imports changed:
// what decides whether its providers may be pushed, and where.
var profileChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*openshellv1alpha1.OpenShellProviderProfile)
	n, ok2 := e.ObjectNew.(*openshellv1alpha1.OpenShellProviderProfile)
	return ok1 && ok2 && (o.Generation != n.Generation || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
		!equality.Semantic.DeepEqual(o.Status.Gateways, n.Status.Gateways))
}}

// providersOfProfile lists the providers a profile serves: those of its
// type in its namespace, and, when a gateway of its namespace lists it for
// its platform catalog, those of its type everywhere.
func (r *Reconciler) providersOfProfile(ctx context.Context, o client.Object) []reconcile.Request {
	gws := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, gws, client.InNamespace(o.GetNamespace())); err == nil {
		for _, gw := range gws.Items {
			if slices.Contains(gw.Spec.ProviderProfiles, o.GetName()) {
				return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellProviderList{}, client.MatchingFields{index.ProviderType: o.GetName()})
			}
		}
	}
	return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellProviderList{}, client.InNamespace(o.GetNamespace()),
		client.MatchingFields{index.ProviderType: o.GetName()})
}
