package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ReconcileCount sums controller_runtime_reconcile_total for one controller
// (all results), or for every controller when controller is empty. Tests
// and benchmarks use it to see whether anything reconciled, not only
// whether anything was written.
func ReconcileCount(controller string) float64 {
	return sumCounter("controller_runtime_reconcile_total", controller)
}

// ReconcileErrors sums controller_runtime_reconcile_errors_total for one
// controller: reconciles that returned an error (a status patch conflict,
// say), which a reconciler that reads its own writes correctly never has
// on the normal path.
func ReconcileErrors(controller string) float64 {
	return sumCounter("controller_runtime_reconcile_errors_total", controller)
}

// sumCounter sums a counter over the series of one controller (all when
// controller is empty).
func sumCounter(name, controller string) float64 {
	mfs, _ := metrics.Registry.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if controller == "" || hasLabel(m.GetLabel(), "controller", controller) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func hasLabel[L interface {
	GetName() string
	GetValue() string
}](labels []L, name, value string) bool {
	for _, l := range labels {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// GatewayCalls counts this process's calls to the gateway at endpoint
// (https://host:port) by gRPC code, from
// openshell_operator_gateway_requests_total.
func GatewayCalls(endpoint string) map[string]float64 {
	host := strings.TrimPrefix(endpoint, "https://")
	out := map[string]float64{}
	mfs, _ := metrics.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "openshell_operator_gateway_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabel(m.GetLabel(), "gateway", host) {
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// APIServerRequests reads apiserver_request_total from the API server and
// sums it by "VERB resource[/subresource]", every client together.
func APIServerRequests(ctx context.Context, cfg *rest.Config) (map[string]int, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read API server metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("parse API server metrics: %w", err)
	}
	out := map[string]int{}
	for _, m := range mfs["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += int(m.GetCounter().GetValue())
	}
	return out, nil
}

// MetricsReader creates a ServiceAccount in ns allowed to get /metrics
// (as the bundle allows OpenShift's Prometheus) and returns a token of
// it: what Prometheus presents to an authenticated metrics endpoint.
func MetricsReader(ctx context.Context, t testing.TB, c client.Client, ns string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: ns}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
	return ServiceAccountToken(ctx, t, c, sa)
}

// ServiceAccountToken is a ten-minute token of sa.
func ServiceAccountToken(ctx context.Context, t testing.TB, c client.Client, sa *corev1.ServiceAccount) string {
	t.Helper()
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// Scrape gets url (an authenticated metrics endpoint) with token as its
// bearer. The endpoint's certificate is not verified: a self-signed one
// where no service CA issued it; the authentication is what is under test.
func Scrape(ctx context.Context, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test only
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
