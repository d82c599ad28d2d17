package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/rbacchange"
	"github.com/openshell/openshell-operator/test/framework"
)

// RequestCost is what one kind of API request costs the control plane,
// measured one request at a time on an otherwise idle cluster (before the
// operator starts, so nothing reacts to the objects).
type RequestCost struct {
	Request string `json:"request"`
	N       int    `json:"n"`
	// CPU is the API server's and etcd's CPU time per request.
	APIServerCPU time.Duration `json:"apiServerCPU"`
	EtcdCPU      time.Duration `json:"etcdCPU"`
	P50          time.Duration `json:"p50"`
}

// The requests the operator path adds to the raw path.
const (
	costCreate      = "POST openshellsandboxes"
	costStatusPatch = "PATCH openshellsandboxes/status (merge, locked)"
	// costReview is the relay's membership recheck: one review per
	// membership per check, as the relay asks it (a consumer's exec).
	costReview = "POST subjectaccessreviews"
)

// measureRequestCosts times the two requests the operator path adds to
// the raw one (the tenant's create of an OpenShellSandbox and the one
// status write that reports it Ready, as a merge patch and as an update),
// next to a ConfigMap create for scale. They bound what any operator
// meeting the request target can cost the API server per sandbox.
func measureRequestCosts(ctx context.Context, c client.Client, n int) ([]RequestCost, error) {
	const ns = "bench-request-cost"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return nil, err
	}
	sandbox := func(i int) *openshellv1alpha1.OpenShellSandbox {
		return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cost-%d", i), Namespace: ns},
			Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "openshell", Namespace: "bench-gateway"},
				PolicyRef: &openshellv1alpha1.LocalObjectReference{Name: benchPolicy}}}
	}
	made := make([]*openshellv1alpha1.OpenShellSandbox, 2*n)
	steps := []struct {
		name  string
		setup func() error // before the measurement
		do    func(i int) error
	}{
		{"POST configmaps", nil, func(i int) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cost-%d", i), Namespace: ns},
				Data: map[string]string{"k": "v"}})
		}},
		{costCreate, nil, func(i int) error {
			for _, j := range []int{i, n + i} { // the status writes below need one object each
				made[j] = sandbox(j)
				if err := c.Create(ctx, made[j]); err != nil {
					return err
				}
			}
			return nil
		}},
		{costStatusPatch, nil, func(i int) error {
			sb := made[i]
			orig := sb.DeepCopy()
			readyStatus(sb)
			return c.Status().Patch(ctx, sb, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		}},
		{"PUT openshellsandboxes/status", nil, func(i int) error {
			sb := made[n+i]
			readyStatus(sb)
			return c.Status().Update(ctx, sb)
		}},
		{costReview, func() error { return grantExec(ctx, c, ns, reviewedUser) }, func(i int) error {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: reviewedUser, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: openshellv1alpha1.GroupVersion.Group, Version: openshellv1alpha1.GroupVersion.Version,
					Resource: "openshellsandboxes", Subresource: "exec", Verb: "create", Namespace: ns, Name: made[i].Name}}}
			if err := c.Create(ctx, sar); err != nil {
				return err
			}
			if !sar.Status.Allowed {
				return fmt.Errorf("the review was not allowed: %s", sar.Status.Reason)
			}
			return nil
		}},
	}
	var out []RequestCost
	for _, s := range steps {
		if s.setup != nil {
			if err := s.setup(); err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
		}
		before, err := framework.ChildrenUsage()
		if err != nil {
			return nil, err
		}
		lat := make([]time.Duration, 0, n)
		for i := 0; i < n; i++ {
			t := time.Now()
			if err := s.do(i); err != nil {
				return nil, fmt.Errorf("%s %d: %w", s.name, i, err)
			}
			lat = append(lat, time.Since(t))
		}
		after, err := framework.ChildrenUsage()
		if err != nil {
			return nil, err
		}
		per := n
		if s.name == costCreate {
			per = 2 * n
		}
		slices.Sort(lat)
		out = append(out, RequestCost{Request: s.name, N: per, P50: lat[len(lat)/2],
			APIServerCPU: (after["kube-apiserver"].CPU - before["kube-apiserver"].CPU) / time.Duration(per),
			EtcdCPU:      (after["etcd"].CPU - before["etcd"].CPU) / time.Duration(per)})
	}
	return out, deleteNamespaces(ctx, c, []string{ns})
}

// reviewedUser is the consumer whose exec the reviews ask about.
const reviewedUser = "bench-consumer"

// grantExec lets user exec into the namespace's sandboxes, as a tenant
// admin's RoleBinding of openshell-sandbox-user does (the review walks the
// cluster's bindings, then the namespace's, to that one).
func grantExec(ctx context.Context, c client.Client, ns, user string) error {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-exec", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{openshellv1alpha1.GroupVersion.Group}, Resources: []string{"openshellsandboxes/exec"}, Verbs: []string{"create"}}}}
	if err := c.Create(ctx, role); err != nil {
		return err
	}
	return c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-exec", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}})
}

// readyStatus is the status the operator writes when a sandbox with a
// policy and no providers becomes Ready (its shape and message lengths as
// the operator writes them).
func readyStatus(sb *openshellv1alpha1.OpenShellSandbox) {
	now := metav1.Now()
	st := &sb.Status
	st.Phase, st.ObservedGeneration = openshellv1alpha1.SandboxPhaseReady, sb.Generation
	st.SandboxID, st.GatewaySandboxName, st.Workspace = "18707659-d737-4055-9577-3e1793592801", sb.Name+"-20ef50e0", "ws-662cc77045b4a07b"
	st.Gateway, st.AppliedSpecHash, st.AppliedPolicyHash = "bench-gateway/openshell", "1501b2893a466beee99174372855fe96", "e80e472ce17cc2e9d8411d5e4178d4f5"
	st.AgentSandbox = &openshellv1alpha1.AgentSandboxReference{APIVersion: "agents.x-k8s.io/v1beta1", Name: st.Workspace + "--" + st.GatewaySandboxName}
	for _, c := range [][3]string{
		{openshellv1alpha1.ConditionImageAllowed, "DefaultImage", "no image set: the gateway's default sandbox image is used (digest-pinned in the operator's relatedImages)"},
		{"PolicyResolved", "Resolved", "OpenShellPolicy bench-policy resolved"},
		{"ProvidersResolved", "Resolved", "0 providers resolved"},
		{"Accepted", "Accepted", "prerequisites are met; Agent Sandbox v1beta1 will be used"},
		{openshellv1alpha1.ConditionSynced, "InSync", "the gateway holds the current spec, policy and providers"},
		{openshellv1alpha1.ConditionReady, "SandboxReady", "the agent runs under its policy"},
		{"PolicyLoaded", "Loaded", "the supervisor enforces policy version 1"},
		{openshellv1alpha1.ConditionGatewayReachable, "Reachable", "the gateway answered"},
	} {
		st.Conditions = append(st.Conditions, metav1.Condition{Type: c[0], Status: metav1.ConditionTrue, Reason: c[1], Message: c[2],
			ObservedGeneration: sb.Generation, LastTransitionTime: now})
	}
}

// floors are what the two requests alone imply for the latency and
// throughput targets, whatever the operator does around them.
type floors struct {
	// latency is the create's and the status write's p50 on an idle API
	// server: the least the operator path can add to create→Ready.
	latency time.Duration
	// requestCPU is their control-plane CPU; rawCPU and operatorCPU are
	// each path's CPU per sandbox, all components (the largest N run).
	requestCPU, rawCPU, operatorCPU time.Duration
	n                               int
}

func requestFloors(costs []RequestCost, results []Result) (floors, bool) {
	var fl floors
	found := 0
	for _, c := range costs {
		if c.Request == costCreate || c.Request == costStatusPatch {
			fl.latency += c.P50
			fl.requestCPU += c.APIServerCPU + c.EtcdCPU
			found++
		}
	}
	if found != 2 {
		return fl, false
	}
	total := func(r Result) (d time.Duration) {
		for _, c := range r.CPU {
			d += c
		}
		return d / time.Duration(max(r.N, 1))
	}
	for _, r := range results {
		if r.N < fl.n {
			continue
		}
		switch r.Path {
		case "raw":
			fl.n, fl.rawCPU, fl.operatorCPU = r.N, total(r), 0
		case "operator":
			if r.N == fl.n {
				fl.operatorCPU = total(r)
			}
		}
	}
	return fl, true
}

func printRequestCosts(f *os.File, costs []RequestCost, results []Result) {
	if len(costs) == 0 {
		return
	}
	fmt.Fprintln(f, "\nWhat one request costs the control plane (one at a time, idle cluster, no webhooks; CPU per request)")
	fmt.Fprintln(f)
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "request\tn\tkube-apiserver CPU\tetcd CPU\tp50\t")
	for _, r := range costs {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t\n", r.Request, r.N, r.APIServerCPU.Round(10*time.Microsecond),
			r.EtcdCPU.Round(10*time.Microsecond), r.P50.Round(10*time.Microsecond))
	}
	_ = w.Flush()
	printRecheckCost(f, costs)
	fl, ok := requestFloors(costs, results)
	if !ok {
		return
	}
	fmt.Fprintf(f, "\n  the operator path's two requests alone: p50 %s added to create→Ready (target ≤ 10ms), %s of control-plane CPU\n",
		fl.latency.Round(100*time.Microsecond), fl.requestCPU.Round(100*time.Microsecond))
	if fl.rawCPU > 0 && fl.operatorCPU > 0 {
		fmt.Fprintf(f, "  CPU per sandbox, every component (N=%d): raw %s, operator path %s (ratio %.2f); raw + the two requests: %s (ratio %.2f)\n",
			fl.n, fl.rawCPU.Round(100*time.Microsecond), fl.operatorCPU.Round(100*time.Microsecond), float64(fl.rawCPU)/float64(fl.operatorCPU),
			(fl.rawCPU + fl.requestCPU).Round(100*time.Microsecond), float64(fl.rawCPU)/float64(fl.rawCPU+fl.requestCPU))
		fmt.Fprintln(f, "  (where the cores bound both paths, that ratio bounds saturated operator/raw for any operator making those two requests)")
	}
}

// The relay's recheck load that printRecheckCost figures: memberships and
// open sessions, on the relay's default two replicas.
const (
	recheckMemberships = 1000
	recheckSessions    = 1000
	recheckReplicas    = 2
)

// recheckRates are the reviews per second the relay's rechecks ask of the
// kube-apiserver: on the timers alone (every replica rechecks every
// membership every 2 s, each session is rechecked every 5 s by its
// replica), and in steady state now that an answer holds until RBAC
// changes or it is maxAge old (internal/rbacchange). Pure.
func recheckRates(memberships, sessions, replicas int, maxAge time.Duration) (timers, steady float64) {
	timers = float64(replicas*memberships)/2 + float64(sessions)/5
	steady = float64(replicas*memberships+sessions) / maxAge.Seconds()
	return timers, steady
}

// printRecheckCost says what the relay's rechecks cost the kube-apiserver
// at scale, from what one review costs it.
func printRecheckCost(f *os.File, costs []RequestCost) {
	i := slices.IndexFunc(costs, func(c RequestCost) bool { return c.Request == costReview })
	if i < 0 {
		return
	}
	per := costs[i].APIServerCPU
	timers, steady := recheckRates(recheckMemberships, recheckSessions, recheckReplicas, rbacchange.DefaultMaxAge)
	cores := func(rate float64) string {
		return fmt.Sprintf("%.0f reviews/s, %.1f%% of a core", rate, 100*rate*per.Seconds())
	}
	fmt.Fprintf(f, "\n  the relay's rechecks (%d memberships and %d open sessions on %d replicas; one review costs the kube-apiserver %s):\n",
		recheckMemberships, recheckSessions, recheckReplicas, per.Round(10*time.Microsecond))
	fmt.Fprintf(f, "    on timers alone (every 2 s and 5 s): %s; asked again only after an RBAC change or every %s: %s in steady state\n",
		cores(timers), rbacchange.DefaultMaxAge, cores(steady))
}
