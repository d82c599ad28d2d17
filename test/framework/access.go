package framework

import (
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
)

// ExecURL is a sandbox's exec subresource URL at cfg's API server, with
// kubectl exec's parameters. The path is set, not appended: a host may end
// in "/", and a double slash is a path the API server does not route.
func ExecURL(cfg *rest.Config, ns, name string, stdin, tty bool, cmd []string) (*url.URL, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	u.Path = accessv1alpha1.Path(ns, name, accessv1alpha1.SubresourceExec)
	u.RawQuery = url.Values{"command": cmd, "stdout": {"true"}, "stderr": {fmt.Sprint(!tty)}, "stdin": {fmt.Sprint(stdin)},
		"tty": {fmt.Sprint(tty)}}.Encode()
	return u, nil
}

// RelayClient is a REST client for the relay's plain requests (log, token)
// as cfg's user.
func RelayClient(cfg *rest.Config) (*rest.RESTClient, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	return rest.UnversionedRESTClientFor(cfg)
}

// BuildKubectlPlugin builds kubectl-openshell from this repository into
// dir, as a consumer installs it on their PATH.
func BuildKubectlPlugin(dir string) error {
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-openshell"), "./cmd/kubectl-openshell")
	build.Dir = RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the plugin: %w\n%s", err, out)
	}
	return nil
}
