package framework

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StartCertManager runs cert-manager's own controllers (bin/cert-manager-
// controller, built from cert-manager's module: the CA and self-signed
// issuers, the Certificate lifecycle and the request approver) against the
// control plane, which must serve the cert-manager CRDs. Stop the process
// when done; its log is in dir.
func StartCertManager(ctx context.Context, e *Env, dir string) (*Process, error) {
	bin, err := Binary("cert-manager-controller")
	if err != nil {
		return nil, err
	}
	kubeconfig, err := e.WriteKubeconfig(dir)
	if err != nil {
		return nil, err
	}
	// ClusterIssuers keep their Secrets here, as in a cert-manager install.
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cert-manager"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create the cert-manager namespace: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return StartProcess(dir, "cert-manager", bin, "--kubeconfig="+kubeconfig, "--cluster-resource-namespace=cert-manager")
}
