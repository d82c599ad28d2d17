package framework

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

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
	var out []client.Object
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		// Validating and mutating webhooks share the fields changed here.
		hooks, _, err := unstructured.NestedSlice(u.Object, "webhooks")
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		for i, h := range hooks {
			hook, ok := h.(map[string]any)
			path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
			if !ok || path == "" {
				return nil, fmt.Errorf("%s %s: webhook %d has no service path", u.GetKind(), u.GetName(), i)
			}
			hook["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://127.0.0.1:%d%s", s.Port, path),
				"caBundle": base64.StdEncoding.EncodeToString(s.CAPEM)}
			delete(hook, "namespaceSelector")
			if namespaces != nil {
				sel, err := runtime.DefaultUnstructuredConverter.ToUnstructured(namespaces)
				if err != nil {
					return nil, err
				}
				hook["namespaceSelector"] = sel
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, hooks, "webhooks"); err != nil {
			return nil, err
		}
		u.SetName(name)
		out = append(out, u)
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
