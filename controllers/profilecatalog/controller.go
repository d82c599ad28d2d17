// Package profilecatalog imports the provider profiles the operator ships
// (internal/profilecatalog) into the platform catalog of each OpenShell
// 0.1 gateway that wants them (spec.builtinProviderProfiles), so that a
// provider of a shipped type works on a fresh gateway without anyone
// writing a profile. It records what it holds in the gateway's
// status.builtinProviderProfiles, which it alone writes, and calls the
// gateway only when that record no longer matches: another catalog (an
// operator upgrade), other pods (status.instance; a new database has an
// empty catalog) or another wanted set. Steady state makes no call and no
// write.
//
// A profile of the same id that the operator did not import as shipped
// (a gateway admin's, or one of spec.providerProfiles) is never
// overwritten or deleted: it is listed as skipped. Shipped profiles are
// defaults: a tenant's OpenShellProviderProfile of the same id still
// serves that tenant's providers, from its workspace catalog.
package profilecatalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/profilecatalog"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// Annotations on a profile the operator imported as shipped: the mark
// that it is the operator's (so it may be updated and withdrawn), and the
// hash of the content imported (so an unchanged profile is not written).
const (
	AnnotationCatalog     = "openshell.ai/profile-catalog"
	AnnotationContentHash = "openshell.ai/profile-catalog-hash"
	catalogOwner          = "openshell-operator"
)

// retry is how soon a failed import is tried again.
const retry = 10 * time.Second

// Reconciler imports the shipped profiles into gateways.
type Reconciler struct {
	Client   client.Client
	Gateways *gwconn.Resolver
	Recorder events.EventRecorder
	Platform tenancy.Platform
	// Catalog is what the operator ships (profilecatalog.Load()).
	Catalog *profilecatalog.Catalog
}

// Reconcile brings one gateway's platform catalog to the shipped profiles
// it wants.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Client.Get(ctx, req.NamespacedName, gw); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Observe: only a served gateway that runs (a version in status; for a
	// Managed one, ready pods) on a line with a profile catalog.
	if !gw.DeletionTimestamp.IsZero() || gw.Status.Version == "" ||
		(gw.Spec.Mode != openshellv1alpha1.GatewayModeExternal && gw.Status.Instance == "") {
		return ctrl.Result{}, nil
	}
	if msg, err := r.Platform.Served(ctx, r.Client, gw); err != nil || msg != "" {
		return ctrl.Result{}, err
	}
	line, err := r.Gateways.Line(ctx, gw)
	if err != nil || !gatewayline.ImportsProfiles(line) {
		return ctrl.Result{}, err
	}
	wanted := r.Catalog.Wanted(gw)
	if current(gw.Status.BuiltinProviderProfiles, r.Catalog.Version, gw.Status.Instance, wanted) {
		return ctrl.Result{}, nil
	}

	// Apply: import, update or withdraw at the gateway.
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		return ctrl.Result{}, err
	}
	prev := gw.Status.BuiltinProviderProfiles
	next, failures := r.sync(ctx, conn, prev, wanted)
	next.Catalog, next.GatewayInstance = r.Catalog.Version, gw.Status.Instance

	// Report: one status write, then an event when the set held changed
	// (a write that conflicts, from a stale read, announces nothing).
	orig := gw.DeepCopy()
	gw.Status.BuiltinProviderProfiles = next
	if err := status.Patch(ctx, r.Client, orig, gw); err != nil {
		return ctrl.Result{}, err
	}
	if prev == nil || !slices.Equal(prev.Imported, next.Imported) {
		r.Recorder.Eventf(gw, nil, corev1.EventTypeNormal, openshellv1alpha1.GatewayReasonBuiltinProfilesImported, "Import",
			"the platform catalog holds %d of the operator's provider profiles (%s)", len(next.Imported), strings.Join(next.Imported, ", "))
	}
	if failures {
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	return ctrl.Result{}, nil
}

// current says whether the record describes this catalog, at these pods,
// for this wanted set, with nothing left to retry.
func current(st *openshellv1alpha1.BuiltinProfilesStatus, catalog, instance string, wanted []string) bool {
	if st == nil {
		return len(wanted) == 0
	}
	held := append(slices.Clone(st.Imported), st.Skipped...)
	slices.Sort(held)
	return st.Catalog == catalog && st.GatewayInstance == instance && st.Message == "" && slices.Equal(held, wanted)
}

// sync imports each wanted profile, updates the operator's where its
// content changed, and withdraws the operator's that are no longer wanted.
func (r *Reconciler) sync(ctx context.Context, conn *gatewayapi.Client, prev *openshellv1alpha1.BuiltinProfilesStatus,
	wanted []string) (*openshellv1alpha1.BuiltinProfilesStatus, bool) {
	next := &openshellv1alpha1.BuiltinProfilesStatus{}
	var errs []string
	for _, id := range wanted {
		held, err := r.put(ctx, conn, r.Catalog.Get(id))
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: %s", id, message(err)))
			if prev != nil && slices.Contains(prev.Imported, id) {
				next.Imported = append(next.Imported, id) // still ours at the gateway
			}
		case held:
			next.Imported = append(next.Imported, id)
		default:
			next.Skipped = append(next.Skipped, id)
		}
	}
	if prev != nil {
		for _, id := range prev.Imported {
			if slices.Contains(wanted, id) {
				continue
			}
			if err := withdraw(ctx, conn, id); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %s", id, message(err)))
				next.Imported = append(next.Imported, id)
			}
		}
	}
	slices.Sort(next.Imported)
	next.Message = strings.Join(errs, "; ")
	return next, len(errs) > 0
}

// put makes the platform catalog hold the shipped profile p, unless it
// holds someone else's profile of that id (held false).
func (r *Reconciler) put(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProviderProfile) (bool, error) {
	want := sandboxspec.Profile(p, nil)
	hash := sandboxspec.Hash(want)
	want.Annotations = map[string]string{AnnotationCatalog: catalogOwner, AnnotationContentHash: hash}
	item := &openshellv1.ProviderProfileImportItem{Profile: want, Source: "openshell-operator:catalog/" + p.Name}
	got, err := conn.GetProviderProfile(ctx, &openshellv1.GetProviderProfileRequest{Id: p.Name})
	switch grpcstatus.Code(err) {
	case codes.NotFound:
		resp, err := conn.ImportProviderProfiles(ctx, &openshellv1.ImportProviderProfilesRequest{Profiles: []*openshellv1.ProviderProfileImportItem{item}})
		if err != nil {
			return false, err
		}
		if !resp.GetImported() || hasErrors(resp.GetDiagnostics()) {
			return false, rejected(resp.GetDiagnostics())
		}
		return true, nil
	case codes.OK:
	default:
		return false, err
	}
	have := got.GetProfile().GetAnnotations()
	if have[AnnotationCatalog] != catalogOwner {
		return false, nil
	}
	if have[AnnotationContentHash] == hash {
		return true, nil
	}
	resp, err := conn.UpdateProviderProfiles(ctx, &openshellv1.UpdateProviderProfilesRequest{Profile: item, Id: p.Name,
		ExpectedResourceVersion: got.GetProfile().GetResourceVersion()})
	if err != nil {
		return true, err
	}
	if hasErrors(resp.GetDiagnostics()) {
		return true, rejected(resp.GetDiagnostics())
	}
	return true, nil
}

// withdraw deletes the operator's shipped profile id, and nobody else's.
func withdraw(ctx context.Context, conn *gatewayapi.Client, id string) error {
	got, err := conn.GetProviderProfile(ctx, &openshellv1.GetProviderProfileRequest{Id: id})
	if grpcstatus.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if got.GetProfile().GetAnnotations()[AnnotationCatalog] != catalogOwner {
		return nil
	}
	_, err = conn.DeleteProviderProfile(ctx, &openshellv1.DeleteProviderProfileRequest{Id: id, AllowMissing: true})
	return err
}

func hasErrors(diags []*openshellv1.ProviderProfileDiagnostic) bool {
	return slices.ContainsFunc(diags, func(d *openshellv1.ProviderProfileDiagnostic) bool {
		return strings.EqualFold(d.GetSeverity(), "error")
	})
}

func rejected(diags []*openshellv1.ProviderProfileDiagnostic) error {
	var msgs []string
	for _, d := range diags {
		if strings.EqualFold(d.GetSeverity(), "error") {
			msgs = append(msgs, strings.TrimPrefix(d.GetField()+": "+d.GetMessage(), ": "))
		}
	}
	if len(msgs) == 0 {
		msgs = append(msgs, "not imported, no diagnostics given")
	}
	return errors.New("the gateway refused it: " + strings.Join(msgs, "; "))
}

// message is an error's text without gRPC's framing.
func message(err error) string {
	if s, ok := grpcstatus.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

// SetupWithManager registers the reconciler: a gateway's spec, release,
// pods or record changing re-queues it; nothing else does.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellGateway{}, builder.WithPredicates(catalogInputsChanged)).
		Named("profilecatalog").
		WithOptions(controller.Options{RateLimiter: enqueue.Backoff(time.Second, 5*time.Minute)}).
		Complete(traced.Reconciler("shippedprofiles", status.RetryStale(r)))
}

// catalogInputsChanged passes what decides the import: the spec, the
// release and pods, and the record itself (a write that lost a race).
var catalogInputsChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*openshellv1alpha1.OpenShellGateway)
	n, ok2 := e.ObjectNew.(*openshellv1alpha1.OpenShellGateway)
	return ok1 && ok2 && (o.Generation != n.Generation || o.Status.Instance != n.Status.Instance || o.Status.Version != n.Status.Version ||
		!equality.Semantic.DeepEqual(o.Status.BuiltinProviderProfiles, n.Status.BuiltinProviderProfiles))
}}
