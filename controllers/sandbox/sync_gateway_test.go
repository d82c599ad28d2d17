package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/sandboxcontrols"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/test/gatewaytest"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// gatewayFixture is the in-process test gateway (real gRPC over TLS, real
// token validation against the operator's OIDC issuer) and a reconciler
// talking to it: every branch of the sandbox state machine runs here in
// milliseconds, without a cluster.
type gatewayFixture struct {
	r   *Reconciler
	gw  *testgateway.Gateway
	obs observed
}

const fixtureNamespaceUID = "ns-uid-1"

func newGatewayFixture(t *testing.T) *gatewayFixture {
	t.Helper()
	env := gatewaytest.Start(t)
	r := &Reconciler{Client: env.Client, APIReader: env.Client, Recorder: events.NewFakeRecorder(100), Gateways: env.Resolver}
	return &gatewayFixture{r: r, gw: env.Gateway, obs: observed{gateway: env.Object, namespaceUID: fixtureNamespaceUID}}
}

// newV01Fixture is newGatewayFixture at a 0.1 gateway: 0.1.4, before
// 0.1.5's pod-label allowlist, which the fixture's gateway does not
// configure.
func newV01Fixture(t *testing.T) *gatewayFixture {
	t.Helper()
	f := newGatewayFixture(t)
	f.gw.ReportVersion("0.1.4")
	f.obs.gateway = f.obs.gateway.DeepCopy()
	f.obs.gateway.Status.Version = "0.1.4"
	return f
}

// sweeper is a Sweeper of the fixture's gateway, reading through its
// client and recording Events to rec.
func (f *gatewayFixture) sweeper(rec events.EventRecorder) *Sweeper {
	return &Sweeper{Client: f.r.Client, APIReader: f.r.Client, Gateways: f.r.Gateways, Recorder: rec,
		Platform: tenancy.Platform{OperatorNamespace: "platform"}}
}

// sync runs one reconcile's gateway step and fails the test on an error.
// The sandbox and its status are stored first, as the reconcile's status
// write would have left them.
func (f *gatewayFixture) sync(t *testing.T, sb *openshellv1alpha1.OpenShellSandbox) {
	t.Helper()
	if _, err := f.run(t, sb); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// run stores the sandbox and runs sync, returning what it returned.
func (f *gatewayFixture) run(t *testing.T, sb *openshellv1alpha1.OpenShellSandbox) (ctrl.Result, error) {
	t.Helper()
	ctx := context.Background()
	stored := sb.DeepCopy()
	if err := f.r.Client.Get(ctx, client.ObjectKeyFromObject(sb), stored); apierrors.IsNotFound(err) {
		stored = sb.DeepCopy()
		if err := f.r.Client.Create(ctx, stored); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	stored.Status = sb.Status
	if err := f.r.Client.Status().Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	sb.ResourceVersion = stored.ResourceVersion
	res, _, err := f.r.sync(ctx, sb.DeepCopy(), sb, f.obs)
	return res, err
}

func (f *gatewayFixture) workspace() string {
	return sandboxspec.WorkspaceName("team-a", fixtureNamespaceUID)
}

func reason(sb *openshellv1alpha1.OpenShellSandbox, typ string) string {
	if c := meta.FindStatusCondition(sb.Status.Conditions, typ); c != nil {
		return c.Reason
	}
	return ""
}

func TestStateMachineAgainstTheGateway(t *testing.T) {
	t.Run("create, then steady state makes no create", func(t *testing.T) {
		f := newGatewayFixture(t)
		sb := sandboxWith(nil)
		f.sync(t, sb)
		if sb.Status.SandboxID == "" || sb.Status.Phase != openshellv1alpha1.SandboxPhaseProvisioning {
			t.Fatalf("after create: id %q phase %s %+v", sb.Status.SandboxID, sb.Status.Phase, sb.Status.Conditions)
		}
		if reason(sb, openshellv1alpha1.ConditionSynced) != openshellv1alpha1.SandboxReasonInSync {
			t.Errorf("Synced reason %q", reason(sb, openshellv1alpha1.ConditionSynced))
		}
		if names := f.gw.SandboxNames(f.workspace()); len(names) != 1 || names[0] != sandboxspec.SandboxName("team-a", "agent") {
			t.Fatalf("gateway sandboxes %v", names)
		}
		f.sync(t, sb)
		if n := f.gw.Calls()["CreateSandbox"]; n != 1 {
			t.Errorf("CreateSandbox called %d times, want 1", n)
		}
	})
	t.Run("the first report of a create waits for the sandbox to settle", func(t *testing.T) {
		f := newGatewayFixture(t)
		ctx := context.Background()
		sb := sandboxWith(nil)
		g := sb.DeepCopy()
		if err := f.r.Client.Create(ctx, g); err != nil {
			t.Fatal(err)
		}
		sb.ResourceVersion = g.ResourceVersion
		res, held, err := f.r.sync(ctx, sb.DeepCopy(), sb, f.obs)
		if err != nil || !held || res.RequeueAfter != settleWindow {
			t.Fatalf("held %v, requeue %s, err %v: want the write held for %s", held, res.RequeueAfter, err, settleWindow)
		}
		// The next reconcile starts from the cache, where status is still
		// empty: what the create answered comes back from memory, so it
		// neither creates again nor loses the sandbox ID.
		next := g.DeepCopy()
		if !f.r.settling.restore(next) || next.Status.SandboxID != sb.Status.SandboxID || next.Status.Workspace != f.workspace() ||
			next.Status.AppliedSpecHash != sb.Status.AppliedSpecHash {
			t.Fatalf("restored %+v, want the create's %+v", next.Status, sb.Status)
		}
		res, held, err = f.r.sync(ctx, g.DeepCopy(), next, f.obs)
		if err != nil || held {
			t.Fatalf("held again (%v) or err %v: a restored create is written", held, err)
		}
		if n := f.gw.Calls()["CreateSandbox"]; n != 1 {
			t.Errorf("CreateSandbox called %d times, want 1", n)
		}
		// Once status records it, the entry is done with; another
		// incarnation (a new UID under the same name) never gets it.
		other := g.DeepCopy()
		other.UID = "uid-reborn"
		f.r.settling.hold(sb)
		if f.r.settling.restore(other) || f.r.settling.restore(next) {
			t.Error("restored into another incarnation, or after status recorded the sandbox")
		}
	})
	t.Run("adopt our own sandbox after a lost status write", func(t *testing.T) {
		f := newGatewayFixture(t)
		sb := sandboxWith(nil)
		// The workspace exists with our labels, and so does "our" sandbox.
		f.sync(t, sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) { s.Name, s.UID = "other", "uid-other" }))
		f.gw.SeedSandbox(f.workspace(), sandboxspec.SandboxName("team-a", "agent"), map[string]string{sandboxspec.LabelOwnerUID: string(sb.UID)})
		f.sync(t, sb)
		if sb.Status.SandboxID == "" || sb.Status.Phase != openshellv1alpha1.SandboxPhaseReady {
			t.Fatalf("not adopted: id %q phase %s %+v", sb.Status.SandboxID, sb.Status.Phase, sb.Status.Conditions)
		}
	})
	t.Run("an adopted sandbox is charged what the gateway runs", func(t *testing.T) {
		f := newGatewayFixture(t)
		three := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) { s.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 3} })
		f.sync(t, three)
		// Its status lost, and its spec lowered meanwhile: the gateway
		// still runs it with three GPUs.
		one := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) { s.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 1} })
		f.sync(t, one)
		if one.Status.SandboxID != three.Status.SandboxID {
			t.Fatalf("not adopted: id %q, created %q", one.Status.SandboxID, three.Status.SandboxID)
		}
		if a := one.Status.AppliedResources; a == nil || a.Devices != 3 {
			t.Fatalf("appliedResources %+v, want the 3 GPUs the gateway runs", a)
		}
		if devices, _ := sandboxcontrols.Charge(one); devices != 3 {
			t.Errorf("charged %d GPUs, want 3", devices)
		}
	})
	t.Run("an adopted sandbox created from the same spec is kept, on either line", func(t *testing.T) {
		for _, version := range []string{"", "0.1.5"} {
			f := newGatewayFixture(t)
			if version != "" {
				f.gw.ReportVersion(version)
				f.obs.gateway = f.obs.gateway.DeepCopy()
				f.obs.gateway.Status.Version = version
			}
			spec := func(s *openshellv1alpha1.OpenShellSandbox) {
				s.Spec.Command = []string{"agent", "--serve"}
				s.Spec.LogLevel = "debug"
				s.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 2}
				s.Spec.Env = []openshellv1alpha1.SandboxEnvVar{{Name: "MODE", Value: ptr.To("fast")}} // not given back
				s.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1536Mi")}}
			}
			first := sandboxWith(spec)
			f.sync(t, first)
			again := sandboxWith(spec)
			f.sync(t, again)
			if again.Status.SandboxID != first.Status.SandboxID || again.Status.AppliedSpecHash != first.Status.AppliedSpecHash {
				t.Fatalf("line %q: adopted %q with hash %q, want %q with %q: the gateway's stored spec reads as another",
					version, again.Status.SandboxID, again.Status.AppliedSpecHash, first.Status.SandboxID, first.Status.AppliedSpecHash)
			}
		}
	})
	t.Run("an adopted sandbox created from an earlier spec is recreated", func(t *testing.T) {
		f := newGatewayFixture(t)
		first := sandboxWith(nil)
		f.sync(t, first)
		// Its status lost, and its image changed meanwhile: the gateway
		// still runs the first image, and the next reconciles replace it.
		now := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) { s.Spec.Image = "registry.example.com/agent@sha256:4567" })
		f.sync(t, now)
		if now.Status.SandboxID != first.Status.SandboxID || now.Status.AppliedSpecHash != "" {
			t.Fatalf("adopted %q with applied hash %q: want the first sandbox, its spec unknown", now.Status.SandboxID, now.Status.AppliedSpecHash)
		}
		for i := 0; i < 5 && now.Status.AppliedSpecHash == ""; i++ {
			f.sync(t, now)
		}
		if now.Status.SandboxID == first.Status.SandboxID || now.Status.AppliedSpecHash == "" {
			t.Fatalf("not recreated: id %q (first %q), applied hash %q", now.Status.SandboxID, first.Status.SandboxID, now.Status.AppliedSpecHash)
		}
		got, err := f.gw.GetSandbox(context.Background(), &openshellv1.GetSandboxRequest{Name: sandboxspec.SandboxName("team-a", "agent"), Workspace: f.workspace()})
		if err != nil || got.GetSandbox().GetSpec().GetTemplate().GetImage() != now.Spec.Image {
			t.Fatalf("the gateway runs %v (%v), want %s", got.GetSandbox().GetSpec().GetTemplate().GetImage(), err, now.Spec.Image)
		}
	})
	t.Run("a sandbox of our name that is not ours is a NameConflict", func(t *testing.T) {
		f := newGatewayFixture(t)
		f.sync(t, sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) { s.Name, s.UID = "other", "uid-other" }))
		f.gw.SeedSandbox(f.workspace(), sandboxspec.SandboxName("team-a", "agent"), map[string]string{sandboxspec.LabelOwnerUID: "someone-else"})
		sb := sandboxWith(nil)
		f.sync(t, sb)
		if sb.Status.Phase != openshellv1alpha1.SandboxPhaseError || reason(sb, openshellv1alpha1.ConditionReady) != openshellv1alpha1.SandboxReasonNameConflict {
			t.Fatalf("phase %s, Ready reason %q", sb.Status.Phase, reason(sb, openshellv1alpha1.ConditionReady))
		}
		if sb.Status.SandboxID != "" {
			t.Error("adopted a sandbox that is not ours")
		}
	})
	t.Run("an immutable change recreates", func(t *testing.T) {
		f := newGatewayFixture(t)
		sb := sandboxWith(nil)
		f.sync(t, sb)
		sb.Spec.Image = "registry.example.com/agent:2"
		f.sync(t, sb)
		if sb.Status.SandboxID != "" || reason(sb, openshellv1alpha1.ConditionSynced) != openshellv1alpha1.SandboxReasonRecreating {
			t.Fatalf("after the image change: id %q, Synced %q", sb.Status.SandboxID, reason(sb, openshellv1alpha1.ConditionSynced))
		}
		if f.gw.Calls()["DeleteSandbox"] != 1 {
			t.Errorf("DeleteSandbox calls %d, want 1", f.gw.Calls()["DeleteSandbox"])
		}
		f.sync(t, sb)
		if sb.Status.SandboxID == "" || sb.Status.AppliedSpecHash != sandboxspec.ImmutableHash(sb) {
			t.Fatalf("not created anew: id %q", sb.Status.SandboxID)
		}
	})
	t.Run("a sandbox refused for a precondition is RejectedByGateway and asked again later, not at once", func(t *testing.T) {
		f := newGatewayFixture(t)
		sb := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) { s.Spec.Providers = []string{"missing"} })
		res, err := f.run(t, sb)
		if err != nil || res.RequeueAfter != preconditionRetry {
			t.Fatalf("want no error and a requeue after %s, got %v, %v", preconditionRetry, res, err)
		}
		if sb.Status.Phase != openshellv1alpha1.SandboxPhaseError || reason(sb, openshellv1alpha1.ConditionSynced) != openshellv1alpha1.SandboxReasonRejectedByGateway {
			t.Fatalf("phase %s, Synced %q", sb.Status.Phase, reason(sb, openshellv1alpha1.ConditionSynced))
		}
	})
	t.Run("on 0.1 a create carries a request_id, and a retry after a refusal none", func(t *testing.T) {
		f := newGatewayFixture(t)
		f.gw.ReportVersion("0.1.4") // before 0.1.5's template-label allowlist: refused for the provider
		sb := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) { s.Spec.Providers = []string{"missing"} })
		if _, err := f.run(t, sb); err != nil {
			t.Fatal(err)
		}
		if _, err := f.run(t, sb); err != nil {
			t.Fatal(err)
		}
		keys := f.gw.RequestKeys()
		if len(keys) != 2 || keys[0] == "" || keys[1] != "" {
			t.Fatalf("request_id of the first create and of its retry after the refusal = %q, want a key, then none (calls %v)", keys, f.gw.LineCalls())
		}
	})
	t.Run("a sandbox the gateway lost is forgotten and created again", func(t *testing.T) {
		f := newGatewayFixture(t)
		sb := sandboxWith(nil)
		f.sync(t, sb)
		sb.Status.Phase = openshellv1alpha1.SandboxPhaseReady // as the stream would have reported
		if _, err := f.gw.DeleteSandbox(context.Background(), &openshellv1.DeleteSandboxRequest{Name: sb.Status.GatewaySandboxName, Workspace: sb.Status.Workspace}); err != nil {
			t.Fatal(err)
		}
		f.sync(t, sb)
		if sb.Status.SandboxID != "" || sb.Status.AppliedSpecHash != "" {
			t.Fatalf("lost sandbox not forgotten: %+v", sb.Status)
		}
		f.sync(t, sb)
		if sb.Status.SandboxID == "" || f.gw.Calls()["CreateSandbox"] != 2 {
			t.Fatalf("not created again: id %q, creates %d", sb.Status.SandboxID, f.gw.Calls()["CreateSandbox"])
		}
	})
	t.Run("a name that holds another incarnation now is taken up again, not reported as the first", func(t *testing.T) {
		f := newGatewayFixture(t)
		sb := sandboxWith(nil)
		f.sync(t, sb)
		first := sb.Status.SandboxID
		sb.Status.Phase = openshellv1alpha1.SandboxPhaseReady
		// The first is lost and the name holds a second one of this
		// object's (a create made from a cache that lagged the status write).
		if _, err := f.gw.DeleteSandbox(context.Background(), &openshellv1.DeleteSandboxRequest{Name: sb.Status.GatewaySandboxName, Workspace: sb.Status.Workspace}); err != nil {
			t.Fatal(err)
		}
		f.gw.SeedSandbox(f.workspace(), sb.Status.GatewaySandboxName, map[string]string{sandboxspec.LabelOwnerUID: string(sb.UID)})
		f.sync(t, sb)
		if sb.Status.SandboxID != "" || sb.Status.ReplacedSandboxID != first {
			t.Fatalf("another incarnation's report taken for %s: %+v", first, sb.Status)
		}
		f.sync(t, sb)
		if id := sb.Status.SandboxID; id == "" || id == first || sb.Status.Phase != openshellv1alpha1.SandboxPhaseReady {
			t.Fatalf("the second incarnation not adopted: %+v", sb.Status)
		}
		if names := f.gw.SandboxNames(f.workspace()); len(names) != 1 {
			t.Fatalf("gateway sandboxes %v, want the one", names)
		}
	})
	t.Run("a policy edit applies in place", func(t *testing.T) {
		f := newGatewayFixture(t)
		pol := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "restricted", Namespace: "team-a"}}
		f.obs.policy = pol
		sb := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) {
			s.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "restricted"}
		})
		f.sync(t, sb)
		id, before := sb.Status.SandboxID, sb.Status.AppliedPolicyHash
		port := int32(443)
		pol.Spec.NetworkPolicies = []openshellv1alpha1.NetworkPolicyRule{{Name: "github",
			Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "api.github.com", Port: &port}}}}
		f.sync(t, sb)
		if sb.Status.SandboxID != id || sb.Status.AppliedPolicyHash == before || sb.Status.PolicyVersion == 0 {
			t.Fatalf("policy not applied in place: id %q→%q, hash %q→%q, version %d", id, sb.Status.SandboxID, before, sb.Status.AppliedPolicyHash, sb.Status.PolicyVersion)
		}
		if f.gw.Calls()["UpdateConfig"] != 1 || f.gw.Calls()["CreateSandbox"] != 1 {
			t.Errorf("calls %v", f.gw.Calls())
		}
	})
	t.Run("providers attach and detach in place", func(t *testing.T) {
		f := newGatewayFixture(t)
		sb := sandboxWith(nil)
		f.sync(t, sb)
		for _, name := range []string{"anthropic", "github"} {
			if _, err := f.gw.CreateProvider(context.Background(), &openshellv1.CreateProviderRequest{Workspace: f.workspace(),
				Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: name}, Type: name, Credentials: map[string]string{"K": "v"}}}); err != nil {
				t.Fatal(err)
			}
		}
		sb.Spec.Providers = []string{"github", "anthropic"}
		f.sync(t, sb)
		if got := sb.Status.AttachedProviders; len(got) != 2 || got[0] != "anthropic" || f.gw.Calls()["AttachSandboxProvider"] != 2 {
			t.Fatalf("attached %v, attach calls %d", got, f.gw.Calls()["AttachSandboxProvider"])
		}
		sb.Spec.Providers = []string{"github"}
		f.sync(t, sb)
		if got := sb.Status.AttachedProviders; len(got) != 1 || got[0] != "github" || f.gw.Calls()["DetachSandboxProvider"] != 1 {
			t.Fatalf("attached %v, detach calls %d", got, f.gw.Calls()["DetachSandboxProvider"])
		}
		if f.gw.Calls()["CreateSandbox"] != 1 {
			t.Error("a provider change recreated the sandbox")
		}
	})
	t.Run("an unreachable gateway is an error for the workqueue and leaves the phase", func(t *testing.T) {
		f := newGatewayFixture(t)
		sb := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) { s.Generation = 1 })
		f.sync(t, sb)
		if sb.Status.ObservedGeneration != 1 {
			t.Fatalf("observedGeneration %d after a successful sync, want 1", sb.Status.ObservedGeneration)
		}
		f.gw.SetUnavailable(true)
		sb.Generation = 2 // a spec change the gateway cannot take yet
		sb.Status.Phase = openshellv1alpha1.SandboxPhaseReady
		// The error goes back to the workqueue, which backs off (and counts it).
		if _, err := f.run(t, sb); err == nil {
			t.Fatal("want the gateway failure returned to the workqueue")
		}
		if sb.Status.Phase != openshellv1alpha1.SandboxPhaseReady || reason(sb, openshellv1alpha1.ConditionGatewayReachable) != openshellv1alpha1.SandboxReasonUnavailable {
			t.Fatalf("phase %s, GatewayReachable %q", sb.Status.Phase, reason(sb, openshellv1alpha1.ConditionGatewayReachable))
		}
		if sb.Status.ObservedGeneration != 1 {
			t.Errorf("observedGeneration %d while the gateway could not take generation 2", sb.Status.ObservedGeneration)
		}
	})
}

// A gateway whose bulkhead is full refuses a new sandbox's create; its
// first status write waits for a slot instead of reporting Pending.
func TestABusyGatewayHoldsANewSandboxsFirstReport(t *testing.T) {
	f := newGatewayFixture(t)
	f.r.Gateways.Pool.MaxInFlight = 1
	entered, release := make(chan struct{}), make(chan struct{})
	f.gw.Trace(func(event, name string) {
		if event == testgateway.TraceCreateReceived && strings.HasPrefix(name, "first") {
			close(entered)
			<-release // holds the only slot
		}
	})
	ctx := context.Background()
	first := sandboxWith(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Name, sb.UID = "first", "uid-first" })
	done := make(chan error, 1)
	go func() {
		_, _, err := f.r.sync(ctx, first.DeepCopy(), first, f.obs)
		done <- err
	}()
	<-entered
	second := sandboxWith(func(sb *openshellv1alpha1.OpenShellSandbox) {
		sb.Name, sb.UID, sb.CreationTimestamp = "second", "uid-second", metav1.Now()
	})
	res, held, err := f.r.sync(ctx, second.DeepCopy(), second, f.obs)
	close(release)
	if err != nil || !held || res.RequeueAfter < busyRetry {
		t.Errorf("sync = %+v, held %v, err %v: want the write held and a retry within %s..%s", res, held, err, busyRetry, 2*busyRetry)
	}
	if err := <-done; err != nil {
		t.Errorf("the first sandbox's create: %v", err)
	}
}

// TestIssuerNotSigningYetIsNotUnreachable: just after a start, before the
// operator's issuer has its keys, a sandbox's sync reports nothing (no
// GatewayReachable=False, no error to back off on) and looks again soon.
func TestIssuerNotSigningYetIsNotUnreachable(t *testing.T) {
	f := newGatewayFixture(t)
	idle := &oidc.Issuer{Client: f.r.Client, SecretNamespace: "platform", SecretName: "not-loaded"}
	f.r.Gateways = &gwconn.Resolver{Client: f.r.Client, APIReader: f.r.Client, Pool: gatewayapi.NewPool(), Issuer: idle}
	sb := sandboxWith(nil)
	res, err := f.run(t, sb)
	if err != nil || res.RequeueAfter < busyRetry {
		t.Fatalf("sync = %+v, %v: want a quiet retry within %s..%s", res, err, busyRetry, 2*busyRetry)
	}
	if c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionGatewayReachable); c != nil {
		t.Fatalf("reported %+v while the operator could not sign a token", c)
	}
}

// TestDeletionWhileTheIssuerStartsIsBusy: the same state during a
// deletion is busy, not unreachable, so it can never start the
// force-release clock (GatewayReachable=False) or release.
func TestDeletionWhileTheIssuerStartsIsBusy(t *testing.T) {
	f := newGatewayFixture(t)
	ctx := context.Background()
	for _, ns := range []string{"platform", "team-a"} {
		if err := f.r.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	gw := f.obs.gateway.DeepCopy()
	gw.ResourceVersion = ""
	if err := f.r.Client.Create(ctx, gw); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	f.r.Platform = tenancy.Platform{OperatorNamespace: "platform"}
	idle := &oidc.Issuer{Client: f.r.Client, SecretNamespace: "platform", SecretName: "not-loaded"}
	f.r.Gateways = &gwconn.Resolver{Client: f.r.Client, APIReader: f.r.Client, Pool: gatewayapi.NewPool(), Issuer: idle}
	sb := sandboxWith(func(sb *openshellv1alpha1.OpenShellSandbox) {
		sb.Spec.GatewayRef = openshellv1alpha1.GatewayReference{Name: gw.Name, Namespace: gw.Namespace}
	})
	l := f.r.deleteAtGateway(ctx, sb)
	if !errors.Is(l.err, gwconn.ErrIssuerNotReady) || decideDeletion(sb, l, time.Now(), time.Minute) != deletionBusy {
		t.Fatalf("lookup while the issuer starts = %+v: want ErrIssuerNotReady, a busy deletion", l)
	}
}
