package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/monitoring"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// Sweep timing.
const (
	// DefaultSweepPeriod is how often every served gateway is swept even
	// when nothing asked for it: it catches what a release before a restart,
	// or a create that reached the gateway after its object was gone (an
	// old leader's call still in flight), left behind.
	DefaultSweepPeriod = 10 * time.Minute
	// sweepRetry is how soon a sweep that could not reach its gateway is
	// tried again.
	sweepRetry = 5 * time.Second
	// sweepPage is the page size of ListSandboxes (the gateway caps it at 1000).
	sweepPage = 500
)

// Sweeper deletes, at the gateways the operator serves, the gateway
// sandboxes the operator created whose OpenShellSandbox is gone: what a
// force-release left behind, or a create that landed after its object went.
// A gateway sandbox is the operator's only when everything the operator
// puts on it agrees — its owner UID label, the namespace and name
// annotations, the name derived from them, and the workspace of that
// namespace's current incarnation in this cluster — so the sweep never
// touches a sandbox created by anyone else (a CLI user, another cluster's
// operator sharing the gateway). It is the only owner of its pending set.
type Sweeper struct {
	// Client reads gateways and namespaces from the cache; APIReader reads
	// OpenShellSandboxes live, so a sandbox created a moment ago is never
	// taken for gone.
	Client    client.Client
	APIReader client.Reader
	Gateways  *gwconn.Resolver
	Platform  tenancy.Platform
	Recorder  events.EventRecorder
	// Period is the unconditional sweep's period (0: DefaultSweepPeriod).
	Period time.Duration
	// MembershipNamespace is where the relay keeps its membership Leases
	// ("": no relay, workspace members are not audited).
	MembershipNamespace string

	mu      sync.Mutex
	pending map[client.ObjectKey]time.Time // gateway → since when it waits for a sweep
	wake    chan struct{}
}

// Mark asks for a sweep of the gateway as soon as it answers.
func (s *Sweeper) Mark(gw client.ObjectKey) {
	s.mu.Lock()
	if s.pending == nil {
		s.pending = map[client.ObjectKey]time.Time{}
	}
	if _, ok := s.pending[gw]; !ok {
		s.pending[gw] = time.Now()
	}
	wake := s.wakeChan()
	s.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

func (s *Sweeper) wakeChan() chan struct{} {
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	return s.wake
}

// NeedLeaderElection: only the leader deletes at gateways.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start sweeps every served gateway at once (a release before a restart
// is not remembered in memory), then every Period, and each marked gateway
// as soon as it is marked, retrying while it does not answer.
func (s *Sweeper) Start(ctx context.Context) error {
	period := s.Period
	if period <= 0 {
		period = DefaultSweepPeriod
	}
	s.mu.Lock()
	wake := s.wakeChan()
	s.mu.Unlock()
	s.markAll(ctx)
	full := time.NewTicker(period)
	defer full.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-full.C:
			s.markAll(ctx)
		case <-wake:
		case <-retry.C:
		}
		if s.sweepPending(ctx) {
			retry.Reset(sweepRetry)
		}
	}
}

// markAll marks every gateway the operator serves.
func (s *Sweeper) markAll(ctx context.Context) {
	list := &openshellv1alpha1.OpenShellGatewayList{}
	if err := s.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list gateways to sweep")
		return
	}
	for i := range list.Items {
		if why, err := s.Platform.Served(ctx, s.Client, &list.Items[i]); err == nil && why == "" {
			s.Mark(client.ObjectKeyFromObject(&list.Items[i]))
		}
	}
}

// sweepPending sweeps each marked gateway once and reports whether any
// is still marked (it did not answer).
func (s *Sweeper) sweepPending(ctx context.Context) bool {
	s.mu.Lock()
	keys := make(map[client.ObjectKey]time.Time, len(s.pending))
	for k, v := range s.pending {
		keys[k] = v
	}
	s.mu.Unlock()
	log := ctrl.LoggerFrom(ctx)
	left := false
	for key, since := range keys {
		gw := &openshellv1alpha1.OpenShellGateway{}
		err := s.Client.Get(ctx, key, gw)
		if err == nil && gw.DeletionTimestamp.IsZero() {
			var n int
			if n, err = s.Sweep(ctx, gw); err == nil && n > 0 {
				monitoring.OrphansSwept(key.String(), n, time.Since(since))
				s.Recorder.Eventf(gw, nil, corev1.EventTypeNormal, openshellv1alpha1.GatewayReasonOrphansSwept, "Sweep",
					"deleted %d gateway sandboxes whose OpenShellSandbox is gone, %s after the sweep was asked for", n, time.Since(since).Round(time.Millisecond))
			}
		} else if apierrors.IsNotFound(err) {
			err = nil // the gateway and its database are gone
		}
		if grpcstatus.Code(err) == codes.PermissionDenied {
			// The operator's identity at this (External) gateway is not its
			// platform admin, which listing every workspace needs: nothing
			// to sweep with, and asking again would not change that.
			// Said where the gateway's admin looks, once per mark: what a
			// release left there stays until someone with that role
			// deletes it.
			log.Info("cannot sweep gateway: listing all workspaces needs its admin role", "gateway", key, "error", err.Error())
			s.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, openshellv1alpha1.GatewayReasonSweepNotPermitted, "Sweep",
				"sandboxes were released without this gateway confirming their deletion, but the operator's identity here is not its "+
					"platform admin, so it cannot find and delete what they left: a gateway admin must delete the sandboxes labelled %s "+
					"whose OpenShellSandbox is gone, or grant the operator's client the admin role (%v)", sandboxspec.LabelOwnerUID, err)
			err = nil
		}
		if err != nil {
			log.V(1).Info("sweep not done yet", "gateway", key, "error", err.Error())
			left = true
			continue
		}
		s.mu.Lock()
		if s.pending[key].Equal(since) {
			delete(s.pending, key)
		}
		s.mu.Unlock()
	}
	return left
}

// Sweep deletes the operator's gateway sandboxes at gw whose
// OpenShellSandbox is gone and reports how many it deleted.
func (s *Sweeper) Sweep(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (int, error) {
	conn, err := s.Gateways.Connect(ctx, gw)
	if err != nil {
		return 0, err
	}
	deleted, workspaces := 0, map[string]bool{}
	err = listAll(ctx, conn, func(sb *openshellv1.Sandbox) error {
		orphan, err := s.orphaned(ctx, sb)
		if err != nil {
			return err
		}
		if !orphan {
			if s.drifted(ctx, conn, sb) {
				workspaces[sb.GetMetadata().GetWorkspace()] = true
			}
			return nil
		}
		md := sb.GetMetadata()
		if _, err := conn.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: md.GetName(), WorkspaceScope: gatewayapi.Workspace(md.GetWorkspace())}); err != nil &&
			grpcstatus.Code(err) != codes.NotFound {
			return fmt.Errorf("delete orphaned sandbox %s in workspace %s: %w", md.GetName(), md.GetWorkspace(), err)
		}
		deleted++
		return nil
	})
	if err != nil {
		return deleted, err
	}
	// Not a reason to sweep again soon: the next period audits again.
	audited, err := s.auditMembers(ctx, conn, gw, workspaces)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("auditing the workspace members failed; audited again at the next sweep", "gateway", gwconn.Key(gw), "error", err.Error())
	}
	if err := s.auditServices(ctx, conn, gw, audited); err != nil {
		ctrl.LoggerFrom(ctx).Info("auditing the services failed; audited again at the next sweep", "gateway", gwconn.Key(gw), "error", err.Error())
	}
	return deleted, nil
}

// drifted re-queues the OpenShellSandbox of a gateway sandbox the operator
// created whose attached providers or enforced policy differ from what the
// operator set (a Tenant Admin's gateway token changed them directly): its
// reconcile reads it and puts spec.providers and the policy back. The sweep's one list
// per gateway is what bounds how long such a change lasts (Period),
// without a read per sandbox; it writes nothing itself. It reports
// whether the sandbox is one of the operator's.
func (s *Sweeper) drifted(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1.Sandbox) bool {
	md := sb.GetMetadata()
	key := types.NamespacedName{Namespace: md.GetAnnotations()[sandboxspec.AnnotationNamespace], Name: md.GetAnnotations()[sandboxspec.AnnotationName]}
	obj := &openshellv1alpha1.OpenShellSandbox{}
	if key.Namespace == "" || key.Name == "" || s.Client.Get(ctx, key, obj) != nil ||
		string(obj.UID) != md.GetLabels()[sandboxspec.LabelOwnerUID] || obj.Status.SandboxID != md.GetId() {
		return false
	}
	if providersDrift(conn.Line, obj, sb) != "" || policyDrift(obj, sb) != "" {
		s.Gateways.Followers().Requeue(key)
	}
	return true
}

// listAll pages through every sandbox of every workspace.
func listAll(ctx context.Context, conn *gatewayapi.Client, each func(*openshellv1.Sandbox) error) error {
	return pages(0, func(token string) (string, error) {
		resp, err := conn.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{WorkspaceScope: gatewayapi.AllWorkspaces(),
			PageSize: sweepPage, PageToken: token})
		if err != nil {
			return "", fmt.Errorf("list sandboxes: %w", err)
		}
		for _, sb := range resp.GetSandboxes() {
			if err := each(sb); err != nil {
				return "", err
			}
		}
		return resp.GetNextPageToken(), nil
	})
}

// pages reads a list the gateway pages: page is given each page token it
// hands back, from the first (""), until one comes back empty, page
// fails, or maxPages pages were read (0: no bound).
func pages(maxPages int, page func(token string) (next string, err error)) error {
	token := ""
	for n := 1; ; n++ {
		next, err := page(token)
		if err != nil || next == "" || n == maxPages {
			return err
		}
		token = next
	}
}

// orphaned says whether a gateway sandbox is one the operator created (see
// Sweeper) whose object is gone: no OpenShellSandbox of its name, or one of
// another incarnation. A sandbox already deleting is left to the gateway.
func (s *Sweeper) orphaned(ctx context.Context, sb *openshellv1.Sandbox) (bool, error) {
	md := sb.GetMetadata()
	owner, ns, name := md.GetLabels()[sandboxspec.LabelOwnerUID], md.GetAnnotations()[sandboxspec.AnnotationNamespace], md.GetAnnotations()[sandboxspec.AnnotationName]
	if owner == "" || ns == "" || name == "" || md.GetName() != sandboxspec.SandboxName(ns, name) ||
		sb.GetStatus().GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING {
		return false, nil
	}
	nsObj, err := index.GetNamespace(ctx, s.Client, ns)
	if apierrors.IsNotFound(err) {
		// A namespace this cluster does not have: its workspace cannot be
		// proved the operator's (another cluster may share the gateway).
		return false, nil
	} else if err != nil {
		return false, err
	}
	if md.GetWorkspace() != sandboxspec.WorkspaceName(ns, nsObj.UID) {
		return false, nil
	}
	// Read live, by the list the operator may make: the CSV grants no get
	// on OpenShellSandboxes (the cache serves every other read), and a
	// name field selector is authorized as list.
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(openshellv1alpha1.GroupVersion.WithKind("OpenShellSandboxList"))
	switch err := s.APIReader.List(ctx, list, client.InNamespace(ns), client.MatchingFields{"metadata.name": name}); {
	case apierrors.IsForbidden(err):
		// A namespace outside this install mode: its sandbox cannot be
		// proved gone, so it is not this operator's to sweep.
		return false, nil
	case err != nil:
		return false, fmt.Errorf("list OpenShellSandbox %s/%s: %w", ns, name, err)
	}
	return len(list.Items) == 0 || list.Items[0].UID != types.UID(owner), nil
}
