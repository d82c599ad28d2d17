package framework

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ProvideGatewayVolume makes a Managed gateway's SQLite volume and the
// claim of its first pod (the StatefulSet uses a claim of its name that
// exists), and waits until kube-controller-manager has bound them, as a
// storage provisioner would. Bound before the pod exists: a pod the
// scheduler first tries while its claim is unbound was seen to wait over
// two minutes for a retry when the suites share the cores.
func ProvideGatewayVolume(ctx context.Context, t testing.TB, c client.Client, ns, gateway string) {
	t.Helper()
	// The claim first, then the volume naming it: the binder, seeing the
	// volume, finds the claim it names already known.
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "openshell-data-" + gateway + "-0", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := c.Create(ctx, pvc); err != nil {
		t.Fatalf("create the gateway's claim: %v", err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + ns},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/pv-" + ns}},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: pvc.Name,
				UID: pvc.UID},
		},
	}
	if err := c.Create(ctx, pv); err != nil {
		t.Fatalf("create volume: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pv) })
	gomega.NewWithT(t).Eventually(func(g gomega.Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)).To(gomega.Succeed())
		g.Expect(pvc.Status.Phase).To(gomega.Equal(corev1.ClaimBound))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(gomega.Succeed(), "the gateway's claim was not bound")
}
