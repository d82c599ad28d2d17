package gateway

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/operatorenv"
)

// ProxyEnv is the cluster proxy for the gateway process (its outbound
// HTTPS, e.g. an external OIDC issuer). NO_PROXY also names what the
// gateway must reach directly whatever the cluster's list says: its own
// Service, the operator's issuer and the cluster's service domains.
func ProxyEnv(gw *openshellv1alpha1.OpenShellGateway, in Inputs) []corev1.EnvVar {
	if !in.Proxy.Set() {
		return nil
	}
	var env []corev1.EnvVar
	if in.Proxy.HTTPProxy != "" {
		env = append(env, corev1.EnvVar{Name: "HTTP_PROXY", Value: in.Proxy.HTTPProxy})
	}
	if in.Proxy.HTTPSProxy != "" {
		env = append(env, corev1.EnvVar{Name: "HTTPS_PROXY", Value: in.Proxy.HTTPSProxy})
	}
	direct := []string{}
	if s := strings.TrimSpace(in.Proxy.NoProxy); s != "" {
		direct = append(direct, s)
	}
	n := NamesFor(gw)
	direct = append(direct, n.Fullname+"."+gw.Namespace+".svc", ".svc", ".cluster.local")
	if in.OIDC != nil {
		if u, err := url.Parse(in.OIDC.Issuer); err == nil && u.Hostname() != "" {
			direct = append(direct, u.Hostname())
		}
	}
	return append(env, corev1.EnvVar{Name: "NO_PROXY", Value: strings.Join(direct, ",")})
}

// UpstreamProxy is the proxy URL the gateway's sandboxes may use, checked
// against the gateway's own rules for [drivers.kubernetes] https_proxy (an
// invalid value would stop the gateway from starting): an http:// URL with
// an explicit port and nothing but host and port. HTTPS_PROXY is preferred
// (sandbox egress is TLS through CONNECT), then HTTP_PROXY. Empty without a
// proxy; an error says why the cluster's proxy cannot be passed on.
func UpstreamProxy(p operatorenv.Proxy) (string, error) {
	raw := strings.TrimSpace(p.HTTPSProxy)
	if raw == "" {
		raw = strings.TrimSpace(p.HTTPProxy)
	}
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("cluster proxy %q is not a URL: %w", raw, err)
	case u.Scheme != "http":
		return "", fmt.Errorf("cluster proxy %q: sandboxes support only an http:// proxy", raw)
	case u.User != nil:
		return "", errors.New("cluster proxy has credentials in its URL: sandboxes take proxy credentials only from a Secret, which the operator does not configure yet")
	case u.Port() == "":
		return "", fmt.Errorf("cluster proxy %q has no explicit port", raw)
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("cluster proxy %q has a path, query or fragment", raw)
	}
	return u.Scheme + "://" + u.Host, nil
}
