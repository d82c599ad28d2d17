package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/pki"
)

// WebhookServing is a serving certificate for the operator's webhook server
// on loopback, and a free port for it.
type WebhookServing struct {
	CertDir string
	CAPEM   []byte
	Port    int
}

// ServeWebhooksOnLoopback issues a certificate for 127.0.0.1 into dir.
func ServeWebhooksOnLoopback(dir string) (WebhookServing, error) {
	now := time.Now()
	ca, err := pki.NewCA("webhook-test-ca", 24*time.Hour, now)
	if err != nil {
		return WebhookServing{}, err
	}
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "webhook", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Validity: 24 * time.Hour}, now)
	if err != nil {
		return WebhookServing{}, err
	}
	for name, b := range map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return WebhookServing{}, err
		}
	}
	port, err := FreePort()
	if err != nil {
		return WebhookServing{}, err
	}
	return WebhookServing{CertDir: dir, CAPEM: ca.CertPEM, Port: port}, nil
}

// WebhookConfigurations are the operator's webhook configurations
// (config/webhook: the validating ones and the finalizer's mutating one),
// named name, pointing at the loopback server s, for the namespaces the
// selector matches (nil: all).
func WebhookConfigurations(name string, s WebhookServing, namespaces *metav1.LabelSelector) ([]client.Object, error) {
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "config", "webhook", "manifests.yaml"))
	if err != nil {
		return nil, err
	}
	at := func(cc *admissionregistrationv1.WebhookClientConfig, sel **metav1.LabelSelector) {
		url := fmt.Sprintf("https://127.0.0.1:%d%s", s.Port, *cc.Service.Path)
		*cc = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: s.CAPEM}
		*sel = namespaces
	}
	var out []client.Object
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		switch u.GetKind() {
		case "ValidatingWebhookConfiguration":
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, vwc); err != nil {
				return nil, err
			}
			for i := range vwc.Webhooks {
				at(&vwc.Webhooks[i].ClientConfig, &vwc.Webhooks[i].NamespaceSelector)
			}
			vwc.Name = name
			out = append(out, vwc)
		case "MutatingWebhookConfiguration":
			mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, mwc); err != nil {
				return nil, err
			}
			for i := range mwc.Webhooks {
				at(&mwc.Webhooks[i].ClientConfig, &mwc.Webhooks[i].NamespaceSelector)
			}
			mwc.Name = name
			out = append(out, mwc)
		}
	}
}

// InstallWebhooks creates the configurations WebhookConfigurations returns.
func InstallWebhooks(ctx context.Context, c client.Client, name string, s WebhookServing, namespaces *metav1.LabelSelector) ([]client.Object, error) {
	objs, err := WebhookConfigurations(name, s, namespaces)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("install webhook configuration %s: %w", name, err)
		}
	}
	return objs, nil
}
