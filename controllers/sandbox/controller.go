// Package sandbox reconciles OpenShellSandbox objects: observe → validate
// (preflight, gateway, policy, providers, env Secrets, image policy) →
// create at the gateway, apply policy and provider changes in place,
// recreate on immutable changes → follow the gateway's phase → report.
package sandbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxcontrols"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// Backoff of failed gateway calls (per sandbox).
const (
	retryBase = time.Second
	retryMax  = 5 * time.Minute
)

// MaxConcurrentReconciles bounds parallel sandbox reconciles.
const MaxConcurrentReconciles = 8

// Finalizer deletes the sandbox at the gateway before the object goes.
const Finalizer = openshellv1alpha1.SandboxFinalizer

// Delete: a finished sandbox whose spec.ttlSecondsAfterFinished passed (expire).
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes,verbs=list;watch;patch;delete,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes/status,verbs=patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes/finalizers,verbs=update,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways;openshellimagepolicies;openshellpolicies;openshellproviders,verbs=list;watch,namespace=system
// Deletion waits for the gateway's agents.x-k8s.io Sandbox to be gone,
// where the install mode lets the operator see it.
// It watches them by metadata, so that one deleted by hand re-queues its sandbox.
// +kubebuilder:rbac:groups=agents.x-k8s.io,resources=sandboxes,verbs=list;watch,namespace=system

// Reconciler reconciles OpenShellSandbox.
type Reconciler struct {
	Client client.Client
	// SecretMetadata is a metadata-only cache of Secrets: a change of one
	// env reads is seen (EnvSecretsCurrent) without holding any value
	// (nil: not watched).
	SecretMetadata cache.Cache
	// APIReader reads tenant Secrets (env secretKeyRef) without caching them.
	APIReader client.Reader
	Preflight *preflight.Store
	Policies  *imagepolicy.Cache
	Recorder  events.EventRecorder
	Gateways  *gwconn.Resolver
	// Platform decides which gateways a namespace may use.
	Platform tenancy.Platform
	// WatchedNamespaces are the namespaces the operator's cache holds
	// (none: all of them). Workspace mode Operator needs all: its paired
	// namespaces are created at run time.
	WatchedNamespaces []string
	// Sweeper is told of every force-release, so that what it leaves at
	// the gateway is deleted once the gateway answers (nil: no sweep).
	Sweeper *Sweeper
	// ForceReleaseAfter is how long the gateway must have been unreachable
	// for the sandbox before force-release is honoured (0: the default).
	ForceReleaseAfter time.Duration

	settling settlingCreates
	budget   budgetLedger
	upstream upstreamWatch
	written  status.OwnWrites
}

// observed is what one reconcile read from the cluster.
type observed struct {
	preflight      preflight.Result
	preflightKnown bool
	// gateway is nil when it does not exist.
	gateway *openshellv1alpha1.OpenShellGateway
	// namespace is the sandbox's namespace; namespaceUID names its
	// incarnation (and so its workspace at the gateway).
	namespace    tenancy.Namespace
	namespaceUID types.UID
	// gatewayAccess is why the namespace may not use the gateway ("" if it may).
	gatewayAccess string
	image         imagepolicy.Decision
	enforce       openshellv1alpha1.ImagePolicyEnforcement
	// policy is nil when none is referenced or it is missing; without
	// spec.policyRef it is the namespace's default, if there is one.
	policy *openshellv1alpha1.OpenShellPolicy
	// defaultPolicies names the namespace's default policies, read only
	// when spec.policyRef is empty.
	defaultPolicies []string
	// budgetPeers are the namespace's sandboxes on the same gateway charged
	// before this one, chosen under the budget ledger's lock
	// (evaluateCharged) when the gateway has a namespace budget.
	budgetPeers       []openshellv1alpha1.OpenShellSandbox
	providers         []*openshellv1alpha1.OpenShellProvider
	missingProviders  []string
	unsyncedProviders []string
	// providersBehind are not pushed to the gateway's current pods
	// (status.instance): a create waits for them.
	providersBehind []string
	// env holds resolved values; envRefusal names what could not be read
	// (never a value).
	env        map[string]string
	envRefusal *refusal
	// envVersions are the resourceVersions of the Secrets env read, by name.
	envVersions map[string]string
	// pullSecrets are the pull Secrets the namespace's image policies name.
	pullSecrets []string
	// paired is, on a gateway in workspace mode Operator, why the
	// namespace's paired namespace cannot take sandboxes yet (nil: it can).
	paired *refusal
	// template is why the sandbox waits for its template (nil: it need not).
	template *refusal
}

// Reconcile validates the sandbox, drives it at the gateway and reports.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sb, err := r.fetch(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx, behind, done := r.written.Begin(ctx, req.NamespacedName, sb.ResourceVersion)
	if behind {
		// The cache predates this reconciler's last write: acting on it
		// would act twice (status.OwnWrites). Its arrival re-queues the sandbox;
		// the requeue only bounds a cache that never catches up.
		ctrl.LoggerFrom(ctx).V(1).Info("waiting for the cache to show this reconciler's last write", "cached", sb.ResourceVersion)
		return ctrl.Result{RequeueAfter: status.StaleRetry}, nil
	}
	defer func() { done(sb.ResourceVersion) }()
	return r.reconcileCurrent(ctx, sb)
}

// reconcileCurrent acts on a sandbox whose cached copy is at least as new
// as this reconciler's last write to it.
func (r *Reconciler) reconcileCurrent(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (res ctrl.Result, retErr error) {
	if !sb.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, sb)
	}
	raw := sb.Spec.DeepCopy()
	sandboxcontrols.OverlayTemplate(&sb.Spec, sb.Status.Template) // the spec it was created with
	sandboxcontrols.Overlay(&sb.Spec, sb.Status.Defaults)
	if left, due := ttlLeft(sb, time.Now()); due && left <= 0 {
		return r.expire(ctx, sb)
	}
	if _, known := r.Preflight.Get(); !known {
		// Before the first cluster probe there is nothing new to say; the
		// probe re-queues every sandbox (and a restart writes nothing).
		return ctrl.Result{}, nil
	}
	orig := sb.DeepCopy()
	waits, err := r.takeInherited(ctx, sb, raw)
	if err != nil {
		return ctrl.Result{}, err
	}
	// A create whose status write is waiting to settle is restored into the
	// working copy only, so this reconcile's write records it.
	r.settling.restore(sb)
	held := false
	defer func() {
		if held {
			return // the write waits: for the sandbox to settle, or for a gateway slot
		}
		// The event follows the write: one that conflicts was computed
		// from a stale read and announces nothing.
		if err := status.Patch(ctx, r.Client, orig, sb); err != nil {
			retErr, res = err, ctrl.Result{}
		} else if orig.Status.Phase != sb.Status.Phase {
			r.recordPhase(orig.Status.Phase, sb)
		}
	}()
	obs, err := r.observe(ctx, sb)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs.template = waits
	ok, err := r.evaluateCharged(ctx, sb, obs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ok {
		return heldBack(sb, obs), nil
	}
	// The admission webhook sets the finalizer; where none runs it takes a
	// write of its own (status is patched by the deferred call).
	if _, err := status.AddFinalizer(ctx, r.Client, orig, sb, Finalizer); err != nil {
		return ctrl.Result{}, err
	}
	res, held, err = r.sync(ctx, orig, sb, obs)
	if left, due := ttlLeft(sb, time.Now()); due && err == nil && (res.RequeueAfter == 0 || left < res.RequeueAfter) {
		res.RequeueAfter = max(left, time.Millisecond) // look again when it expires
	}
	return res, err
}

// takeInherited records, for a sandbox not yet created at the gateway,
// what its template gives it and then the namespace defaults its own spec
// (raw) and the template leave room for, and makes them the working
// copy's: they follow the template and the namespace's default policy
// until the create, and stay what they were then. It returns why the
// sandbox waits for its template (nil: it need not).
func (r *Reconciler) takeInherited(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, raw *openshellv1alpha1.OpenShellSandboxSpec) (*refusal, error) {
	if sb.Status.SandboxID != "" {
		return nil, nil
	}
	waits, err := r.takeTemplate(ctx, sb, raw)
	if err != nil {
		return nil, err
	}
	list := &openshellv1alpha1.OpenShellPolicyList{}
	if err := r.Client.List(ctx, list, client.InNamespace(sb.Namespace)); err != nil {
		return nil, fmt.Errorf("list policies of namespace %s: %w", sb.Namespace, err)
	}
	def, _ := sandboxcontrols.NamespaceDefaults(list.Items)
	sb.Status.Defaults = sandboxcontrols.TakeDefaults(raw, def)
	if d := sb.Status.Defaults; d != nil && raw.TemplateRef != nil {
		// The gateway runs a template's workload as the template has it:
		// default resources would be judged and charged, never applied.
		d.Resources = nil
	}
	sb.Spec = *raw.DeepCopy()
	sandboxcontrols.Overlay(&sb.Spec, sb.Status.Defaults)
	return waits, nil
}

// heldBack settles a sandbox a gate holds back. That is not an error: nothing
// is retried until a watched input (CRD, gateway, policy, provider, image
// policy, spec) changes. That decision is the whole of acting on this
// generation; otherwise sync records it once the gateway holds it
// (status.observedGeneration means "fully acted on" in every kind). A
// paired namespace on its way is looked at again shortly (the gateway's
// allowlist has no event of its own here).
func heldBack(sb *openshellv1alpha1.OpenShellSandbox, obs observed) ctrl.Result {
	sb.Status.ObservedGeneration = sb.Generation
	switch {
	case obs.paired == nil:
	case obs.paired.reason == openshellv1alpha1.SandboxReasonWorkspaceNamespacePending:
		return ctrl.Result{RequeueAfter: pairedPoll}
	case obs.paired.reason == openshellv1alpha1.SandboxReasonWorkspaceNamespaceConflict:
		// A cluster admin removes the namespace in the way, or the other
		// gateway's sandboxes go: no event of the sandbox's says so.
		return ctrl.Result{RequeueAfter: conflictPoll}
	}
	return ctrl.Result{}
}

// fetch reads the sandbox. One that is gone (deleted without its
// finalizer, where no webhook set it) forgets its budget ledger entry.
func (r *Reconciler) fetch(ctx context.Context, key client.ObjectKey) (*openshellv1alpha1.OpenShellSandbox, error) {
	sb := &openshellv1alpha1.OpenShellSandbox{}
	err := r.Client.Get(ctx, key, sb)
	if apierrors.IsNotFound(err) {
		r.budget.forget(key)
		r.written.Forget(key) // its delete event may have come before the last write was recorded
	}
	return sb, err
}

// ttlLeft says how long a finished sandbox with spec.ttlSecondsAfterFinished
// has until it is deleted (due is false when nothing is due).
func ttlLeft(sb *openshellv1alpha1.OpenShellSandbox, now time.Time) (left time.Duration, due bool) {
	ttl, done := sb.Spec.TTLSecondsAfterFinished, sb.Status.CompletionTime
	if ttl == nil || done == nil {
		return 0, false
	}
	return done.Add(time.Duration(*ttl) * time.Second).Sub(now), true
}

// expire deletes a finished sandbox whose ttlSecondsAfterFinished passed,
// as it was judged (a spec edit since is a conflict, and judged again);
// the deletion then runs as any other, the gateway sandbox first.
func (r *Reconciler) expire(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (ctrl.Result, error) {
	r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, openshellv1alpha1.SandboxReasonExpired, "Delete",
		"the agent exited at %s and ttlSecondsAfterFinished (%ds) has passed: deleting the sandbox",
		sb.Status.CompletionTime.UTC().Format(time.RFC3339), *sb.Spec.TTLSecondsAfterFinished)
	err := r.Client.Delete(ctx, sb, client.Preconditions{UID: &sb.UID, ResourceVersion: &sb.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("delete the expired sandbox: %w", err)
	}
	return ctrl.Result{}, nil
}

// observePolicy reads the policy spec.policyRef names, or without one the
// namespace's default policy and the names of every default.
func (r *Reconciler) observePolicy(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (*openshellv1alpha1.OpenShellPolicy, []string, error) {
	if ref := sb.Spec.PolicyRef; ref != nil {
		p := &openshellv1alpha1.OpenShellPolicy{}
		switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: ref.Name}, p); {
		case err == nil && p.DeletionTimestamp.IsZero():
			return p, nil, nil
		case err != nil && !apierrors.IsNotFound(err):
			return nil, nil, fmt.Errorf("get policy %s: %w", ref.Name, err)
		}
		return nil, nil, nil
	}
	list := &openshellv1alpha1.OpenShellPolicyList{}
	if err := r.Client.List(ctx, list, client.InNamespace(sb.Namespace)); err != nil {
		return nil, nil, fmt.Errorf("list policies of namespace %s: %w", sb.Namespace, err)
	}
	p, defaults := sandboxcontrols.NamespaceDefaults(list.Items)
	return p, defaults, nil
}

func (r *Reconciler) observe(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (observed, error) {
	var obs observed
	obs.preflight, obs.preflightKnown = r.Preflight.Get()
	var err error
	if obs.namespace, obs.namespaceUID, err = tenancy.ReadNamespace(ctx, r.Client, sb.Namespace); err != nil {
		return obs, err
	}
	gw := &openshellv1alpha1.OpenShellGateway{}
	switch err := r.Client.Get(ctx, sb.GatewayKey(), gw); {
	case err == nil:
		obs.gateway = gw
		if obs.gatewayAccess, err = r.Platform.Access(ctx, r.Client, gw, obs.namespace); err != nil {
			return obs, err
		}
	case !apierrors.IsNotFound(err):
		return obs, fmt.Errorf("get gateway %s: %w", sb.GatewayKey(), err)
	}
	d, enf, err := r.Policies.Check(ctx, r.Client, sb, obs.gateway)
	if err != nil {
		return obs, err
	}
	obs.image, obs.enforce = d, enf
	if obs.policy, obs.defaultPolicies, err = r.observePolicy(ctx, sb); err != nil {
		return obs, err
	}
	for _, name := range sb.Spec.Providers {
		p := &openshellv1alpha1.OpenShellProvider{}
		switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: name}, p); {
		case err == nil:
			obs.providers = append(obs.providers, p)
		case apierrors.IsNotFound(err):
			obs.missingProviders = append(obs.missingProviders, name)
		default:
			return obs, fmt.Errorf("get provider %s: %w", name, err)
		}
	}
	if obs.gateway != nil {
		obs.unsyncedProviders = unsynced(obs.providers, obs.gateway, "")
		obs.providersBehind = unsynced(obs.providers, obs.gateway, obs.gateway.Status.Instance)
	}
	obs.env, obs.envVersions, obs.envRefusal = r.resolveEnv(ctx, sb)
	if obs.pullSecrets, err = index.PullSecrets(ctx, r.Client, sb.Namespace); err != nil {
		return obs, err
	}
	if obs.gateway != nil && render.OperatorMode(obs.gateway) {
		if obs.paired, err = r.observePaired(ctx, obs.gateway, sb.Namespace, obs.namespaceUID); err != nil {
			return obs, err
		}
	}
	return obs, nil
}

// resolveEnv reads env values, Secrets included, from the sandbox's own
// namespace only, one Secret at a time: only the values env names are kept,
// never a whole Secret beyond its read. Errors name the Secret and key,
// never a value. versions are the read Secrets' resourceVersions.
func (r *Reconciler) resolveEnv(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (env, versions map[string]string, _ *refusal) {
	env = map[string]string{}
	refs := map[string][]openshellv1alpha1.SandboxEnvVar{} // Secret name → the env vars it feeds
	var order []string
	size := 0
	for _, e := range sb.Spec.Env {
		switch {
		case e.Value != nil:
			env[e.Name] = *e.Value
			size += len(e.Name) + len(*e.Value)
		case e.ValueFrom != nil:
			name := e.ValueFrom.SecretKeyRef.Name
			if _, ok := refs[name]; !ok {
				order = append(order, name)
			}
			refs[name] = append(refs[name], e)
		}
	}
	if len(order) > sandboxspec.MaxEnvSecrets {
		return nil, nil, envTooLarge(fmt.Sprintf("env reads %d Secrets, more than the %d one sandbox may: put the values in fewer Secrets", len(order), sandboxspec.MaxEnvSecrets))
	}
	for _, name := range order {
		s := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: name}, s); err != nil {
			e := refs[name][0]
			if apierrors.IsNotFound(err) {
				return nil, nil, secretUnreadable(fmt.Sprintf("env %s: Secret %s not found in namespace %s", e.Name, name, sb.Namespace))
			}
			return nil, nil, secretUnreadable(fmt.Sprintf("env %s: cannot read Secret %s: %v", e.Name, name, apierrors.ReasonForError(err)))
		}
		if versions == nil {
			versions = map[string]string{}
		}
		versions[name] = s.ResourceVersion
		for _, e := range refs[name] {
			v, ok := s.Data[e.ValueFrom.SecretKeyRef.Key]
			if !ok {
				return nil, nil, secretUnreadable(fmt.Sprintf("env %s: Secret %s has no key %q", e.Name, name, e.ValueFrom.SecretKeyRef.Key))
			}
			env[e.Name] = string(v)
			size += len(e.Name) + len(v)
		}
		if size > sandboxspec.MaxEnvBytes {
			return nil, nil, envTooLarge(fmt.Sprintf("env values total more than the gateway's %d KiB (reached with Secret %s): reference smaller values", sandboxspec.MaxEnvBytes>>10, name))
		}
	}
	return env, versions, nil
}

func secretUnreadable(msg string) *refusal {
	return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonSecretNotFound, message: msg}
}

func envTooLarge(msg string) *refusal {
	return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonEnvTooLarge, message: msg}
}

// recordPhase emits an event when the phase changes, except for the normal
// progress through Pending and Provisioning to Ready (status says it, with
// the gateway sandbox's names): each event is an API write, and sandboxes
// come in bursts. Ready after a failure is an event.
func (r *Reconciler) recordPhase(from openshellv1alpha1.SandboxPhase, sb *openshellv1alpha1.OpenShellSandbox) {
	switch sb.Status.Phase {
	case openshellv1alpha1.SandboxPhaseProvisioning:
		return
	case openshellv1alpha1.SandboxPhaseReady:
		if from == "" || from == openshellv1alpha1.SandboxPhasePending || from == openshellv1alpha1.SandboxPhaseProvisioning {
			return
		}
	}
	c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionReady)
	typ, reason, note := corev1.EventTypeNormal, "Phase"+string(sb.Status.Phase), "sandbox is "+string(sb.Status.Phase)
	if c != nil {
		note += ": " + c.Message
	}
	switch sb.Status.Phase {
	case openshellv1alpha1.SandboxPhaseRejected, openshellv1alpha1.SandboxPhaseError:
		typ = corev1.EventTypeWarning
		if c != nil {
			reason = c.Reason
		}
	case openshellv1alpha1.SandboxPhasePending:
		if c != nil && c.Reason == openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing {
			typ, reason = corev1.EventTypeWarning, c.Reason
		}
	}
	r.Recorder.Eventf(sb, nil, typ, reason, "Reconcile", "%s", note)
}

// SetupWithManager registers the reconciler and its indexes and watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	c, err := ctrl.NewControllerManagedBy(mgr).
		// Status and finalizer writes (ours) do not need another reconcile.
		For(&openshellv1alpha1.OpenShellSandbox{}, builder.WithPredicates(index.SpecOrDeletionChanged)).
		Named("openshellsandbox").
		// Reconciles wait on gateway round trips: run several at once. A
		// failed gateway call is retried with per-sandbox exponential
		// backoff from one second up to five minutes (jittered, and a dead
		// gateway's circuit breaker fails its calls fast); a gateway's status
		// change (its health check) re-queues its sandboxes at once.
		WithOptions(controller.Options{MaxConcurrentReconciles: MaxConcurrentReconciles,
			RateLimiter: enqueue.Backoff(retryBase, retryMax)}).
		Watches(&openshellv1alpha1.OpenShellGateway{}, handler.EnqueueRequestsFromMapFunc(r.byIndex(index.SandboxGateway, func(o client.Object) string {
			return client.ObjectKeyFromObject(o).String()
		}))).
		// A policy's status (its usage count) changes with every sandbox
		// that starts or stops using it; only its spec and deletion matter
		// here. Without the filter, creating N sandboxes on one policy ran
		// O(N²) reconciles.
		// A namespace default (spec.default, on the old or the new object)
		// concerns every sandbox of the namespace that names no policy.
		Watches(&openshellv1alpha1.OpenShellPolicy{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if p, ok := o.(*openshellv1alpha1.OpenShellPolicy); ok && p.Spec.Default {
				return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxList{}, client.InNamespace(o.GetNamespace()))
			}
			return r.byIndex(index.SandboxPolicy, client.Object.GetName)(ctx, o)
		}), builder.WithPredicates(index.SpecOrDeletionChanged)).
		Watches(&openshellv1alpha1.OpenShellProvider{}, handler.EnqueueRequestsFromMapFunc(r.byIndex(index.SandboxProviders, client.Object.GetName))).
		// A template's spec, or its arrival at a gateway (status), decides
		// what a sandbox not yet created takes and whether it may go.
		Watches(&openshellv1alpha1.OpenShellSandboxTemplate{}, handler.EnqueueRequestsFromMapFunc(r.byIndex(index.SandboxTemplate, client.Object.GetName))).
		// A sandbox refused for its namespace's budget is looked at again
		// when a peer's charge may have dropped; nothing else would wake it.
		Watches(&openshellv1alpha1.OpenShellSandbox{}, handler.EnqueueRequestsFromMapFunc(r.budgetWaiters), builder.WithPredicates(chargeMayHaveDropped)).
		// A Sandbox that went before the cache named its sandbox (upstream.go),
		// and a reconcile that waited for the cache to show its last write.
		Watches(&openshellv1alpha1.OpenShellSandbox{}, handler.EnqueueRequestsFromMapFunc(r.claimed), builder.WithPredicates(namesNewSandboxID)).
		Watches(&openshellv1alpha1.OpenShellSandbox{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(r.written.Predicate())).
		Watches(&openshellv1alpha1.OpenShellImagePolicy{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxList{}, client.InNamespace(o.GetNamespace()))
		})).
		// Namespace labels decide gateway access (spec.tenancy selectors).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxList{}, client.InNamespace(o.GetName()))
		}), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesRawSource(source.Channel(r.Gateways.Followers().Events(), &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(r.upstream.syncedEvents(), handler.EnqueueRequestsFromMapFunc(r.resyncLocated))).
		WatchesRawSource(source.Channel(r.Preflight.Subscribe(), handler.EnqueueRequestsFromMapFunc(
			enqueue.All(r.Client, func() client.ObjectList { return &openshellv1alpha1.OpenShellSandboxList{} })))).
		Build(traced.Reconciler("openshellsandbox", status.RetryStale(r)))
	if err != nil {
		return err
	}
	if err := r.watchEnvSecrets(c); err != nil {
		return err
	}
	return r.startUpstreamWatch(mgr, c)
}

// watchEnvSecrets re-queues the sandboxes whose env reads a Secret that
// changed (the running sandbox has old values: EnvSecretsCurrent), from the
// metadata-only Secret cache when there is one.
func (r *Reconciler) watchEnvSecrets(c controller.Controller) error {
	if r.SecretMetadata == nil {
		return nil
	}
	err := c.Watch(source.Kind(r.SecretMetadata, index.SecretMetadata(), handler.TypedEnqueueRequestsFromMapFunc(
		func(ctx context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
			return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxList{},
				client.InNamespace(o.GetNamespace()), client.MatchingFields{index.SandboxEnvSecrets: o.GetName()})
		})))
	if err != nil {
		return fmt.Errorf("watch env Secrets: %w", err)
	}
	return nil
}

// budgetWaiters re-queues the sandboxes of o's namespace that its budget
// refused, o aside.
func (r *Reconciler) budgetWaiters(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxList{}, client.InNamespace(o.GetNamespace()),
		client.MatchingFields{index.SandboxWaitsForBudget: "true"})
	return slices.DeleteFunc(reqs, func(req reconcile.Request) bool { return req.Name == o.GetName() })
}

// chargeMayHaveDropped passes the events after which a sandbox may charge
// its namespace's budget less: its deletion, a spec edit, and a change of
// its phase or of what it was created with (a run finished, an edit
// applied).
var chargeMayHaveDropped = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*openshellv1alpha1.OpenShellSandbox)
		n, ok2 := e.ObjectNew.(*openshellv1alpha1.OpenShellSandbox)
		if !ok1 || !ok2 {
			return false
		}
		return o.Generation != n.Generation || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) || o.Status.Phase != n.Status.Phase ||
			!equality.Semantic.DeepEqual(o.Status.AppliedResources, n.Status.AppliedResources)
	},
}

// byIndex re-queues the sandboxes whose index field equals key(o); for
// namespaced references (policy, provider) only in o's namespace.
func (r *Reconciler) byIndex(idx string, key func(client.Object) string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		opts := []client.ListOption{client.MatchingFields{idx: key(o)}}
		if idx != index.SandboxGateway {
			opts = append(opts, client.InNamespace(o.GetNamespace()))
		}
		return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxList{}, opts...)
	}
}
