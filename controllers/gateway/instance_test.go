package gateway

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scheme"
)

func controlledPod(name string, uid types.UID, labels map[string]string, kind, owner string, ownerUID types.UID) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "platform", UID: uid, Labels: labels}}
	if kind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: kind, Name: owner, UID: ownerUID, Controller: ptr.To(true)}}
	}
	return p
}

// TestInstanceCountsOnlyTheWorkloadsPods: status.instance changes when a
// gateway pod is replaced, not when a pod that merely wears the gateway's
// labels comes or goes (one a 0.0.111 gateway creates for a tenant's
// sandbox in its own namespace, labelled as the tenant's token asked):
// each change re-pushes every tenant's providers.
func TestInstanceCountsOnlyTheWorkloadsPods(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "platform"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged}}
	labels := render.SelectorLabels(gw)
	withHash := map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: "5d8f"}
	for k, v := range labels {
		withHash[k] = v
	}
	fullname := render.NamesFor(gw).Fullname
	for name, tc := range map[string]struct {
		owner           workloadOwner
		gatewayPod      *corev1.Pod
		impostor        *corev1.Pod
		replacedGateway *corev1.Pod
	}{
		"StatefulSet": {
			owner:           workloadOwner{statefulSet: "sts-uid"},
			gatewayPod:      controlledPod("gw-0", "pod-1", labels, "StatefulSet", fullname, "sts-uid"),
			impostor:        controlledPod("tenant-sandbox", "pod-x", labels, "Sandbox", "agent", "sandbox-uid"),
			replacedGateway: controlledPod("gw-0", "pod-2", labels, "StatefulSet", fullname, "sts-uid"),
		},
		"StatefulSet, an impostor naming another StatefulSet": {
			owner:           workloadOwner{statefulSet: "sts-uid"},
			gatewayPod:      controlledPod("gw-0", "pod-1", labels, "StatefulSet", fullname, "sts-uid"),
			impostor:        controlledPod("other-0", "pod-x", labels, "StatefulSet", fullname, "other-uid"),
			replacedGateway: controlledPod("gw-0", "pod-2", labels, "StatefulSet", fullname, "sts-uid"),
		},
		"Deployment": {
			owner:           workloadOwner{deployment: fullname},
			gatewayPod:      controlledPod("gw-5d8f-a", "pod-1", withHash, "ReplicaSet", fullname+"-5d8f", "rs-uid"),
			impostor:        controlledPod("tenant-sandbox", "pod-x", withHash, "Sandbox", fullname+"-5d8f", "sandbox-uid"),
			replacedGateway: controlledPod("gw-5d8f-b", "pod-2", withHash, "ReplicaSet", fullname+"-5d8f", "rs-uid"),
		},
		"Deployment, an impostor without a controller": {
			owner:           workloadOwner{deployment: fullname},
			gatewayPod:      controlledPod("gw-5d8f-a", "pod-1", withHash, "ReplicaSet", fullname+"-5d8f", "rs-uid"),
			impostor:        controlledPod("tenant-sandbox", "pod-x", withHash, "", "", ""),
			replacedGateway: controlledPod("gw-5d8f-b", "pod-2", withHash, "ReplicaSet", fullname+"-5d8f", "rs-uid"),
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(tc.gatewayPod).Build()
			r := &Reconciler{Client: c}
			instance := func() string {
				t.Helper()
				got, err := r.instance(ctx, gw, tc.owner)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			before := instance()
			if err := c.Create(ctx, tc.impostor); err != nil {
				t.Fatal(err)
			}
			if got := instance(); got != before {
				t.Fatalf("a pod wearing the gateway's labels changed instance: %s → %s", before, got)
			}
			if err := c.Delete(ctx, tc.gatewayPod); err != nil {
				t.Fatal(err)
			}
			if err := c.Create(ctx, tc.replacedGateway); err != nil {
				t.Fatal(err)
			}
			if got := instance(); got == before {
				t.Fatalf("a replaced gateway pod left instance at %s", got)
			}
		})
	}
}

// TestACachedWorkloadBehindTheApplyIsRollingOut: right after the operator
// applies a new pod template, the cache may still hold the previous
// StatefulSet generation, rolled out and ready. It is read as rolling out
// until the cache holds the generation the apply made: a spec change that
// rolls the pods was once reported Available and not Progressing for that
// moment.
func TestACachedWorkloadBehindTheApplyIsRollingOut(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "platform"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged}}
	name := render.NamesFor(gw).Fullname
	for desc, tc := range map[string]struct {
		applied []client.Object
		ready   bool
	}{
		"the apply made a generation the cache lacks": {applied: []client.Object{
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gw.Namespace, Generation: 5}}}, ready: false},
		"the cache holds the applied generation": {applied: []client.Object{
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gw.Namespace, Generation: 4, UID: "old-uid"}}}, ready: true},
		"nothing was applied": {applied: []client.Object{
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gw.Namespace}}}, ready: true},
		"the apply made the object again, the cache holds the one deleted": {applied: []client.Object{
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gw.Namespace, Generation: 1, UID: "new-uid"}}}, ready: false},
		"another kind of the same name was applied": {applied: []client.Object{
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gw.Namespace, Generation: 9}}}, ready: true},
	} {
		t.Run(desc, func(t *testing.T) {
			ctx := context.Background()
			cached := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gw.Namespace, Generation: 4, UID: "old-uid"}}
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(cached).WithStatusSubresource(cached).Build()
			cached.Status = appsv1.StatefulSetStatus{ObservedGeneration: 4, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1}
			if err := c.Status().Update(ctx, cached); err != nil {
				t.Fatal(err)
			}
			r := &Reconciler{Client: c}
			got, err := r.observeWorkload(ctx, gw, tc.applied)
			if err != nil {
				t.Fatal(err)
			}
			if got.Ready != tc.ready {
				t.Fatalf("ready = %v, want %v (%s: %s)", got.Ready, tc.ready, got.Reason, got.Message)
			}
		})
	}
}
