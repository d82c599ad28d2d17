package relay

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
)

// Where the kube-apiserver publishes its front-proxy settings (its
// --requestheader-* flags) for aggregated servers; reading it needs the
// built-in Role extension-apiserver-authentication-reader in kube-system.
const (
	authConfigMapNamespace = "kube-system"
	authConfigMapName      = "extension-apiserver-authentication"
	// caSyncTimeout bounds the wait for the CA's first read.
	caSyncTimeout = 30 * time.Second
)

// FrontProxy authenticates requests the kube-apiserver forwards: the
// client certificate must chain to its request-header CA and name one of
// its allowed front-proxy clients, and only then are the X-Remote-* headers
// (as the cluster names them) believed. Both settings are followed as the
// cluster rotates them, until ctx ends. It fails when the cluster has no
// front proxy configured (nothing could be trusted).
func FrontProxy(ctx context.Context, kube kubernetes.Interface) (authenticator.Request, error) {
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("request-header-ca", authConfigMapNamespace, authConfigMapName,
		"requestheader-client-ca-file", kube)
	if err != nil {
		return nil, fmt.Errorf("front-proxy CA: %w", err)
	}
	headers := headerrequest.NewRequestHeaderAuthRequestController(authConfigMapName, authConfigMapNamespace, kube,
		"requestheader-username-headers", "requestheader-uid-headers", "requestheader-group-headers",
		"requestheader-extra-headers-prefix", "requestheader-allowed-names")
	if err := headers.RunOnce(ctx); err != nil {
		return nil, fmt.Errorf("read the front-proxy headers from %s/%s: %w", authConfigMapNamespace, authConfigMapName, err)
	}
	go headers.Run(ctx, 1)
	// The CA controller reads through its own informer: it has the
	// bundle once that has synced.
	go ca.Run(ctx, 1)
	wctx, cancel := context.WithTimeout(ctx, caSyncTimeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(wctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(ca.CurrentCABundleContent()) > 0, nil
	}); err != nil {
		return nil, fmt.Errorf("the cluster publishes no requestheader-client-ca-file in %s/%s within %s: the kube-apiserver has no front proxy "+
			"(--requestheader-client-ca-file), so no request could be trusted", authConfigMapNamespace, authConfigMapName, caSyncTimeout)
	}
	authn := headerrequest.NewDynamicVerifyOptionsSecure(ca.VerifyOptions, sliceFunc(headers.AllowedClientNames),
		sliceFunc(headers.UsernameHeaders), sliceFunc(headers.UIDHeaders), sliceFunc(headers.GroupHeaders),
		sliceFunc(headers.ExtraHeaderPrefixes))
	return namedProxiesOnly{authn: authn, names: headers.AllowedClientNames}, nil
}

// namedProxiesOnly refuses every request while the cluster names no
// allowed front-proxy client: Kubernetes then lets any certificate of the
// request-header CA assert any user, and where that CA also signs other
// clients (kubelets, users) one of them could call the relay as
// system:masters. Fail closed instead.
type namedProxiesOnly struct {
	authn authenticator.Request
	names func() []string
}

func (n namedProxiesOnly) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if len(n.names()) == 0 {
		return nil, false, fmt.Errorf("the cluster names no requestheader-allowed-names in %s/%s: the relay trusts no front proxy "+
			"(set --requestheader-allowed-names on the kube-apiserver)", authConfigMapNamespace, authConfigMapName)
	}
	return n.authn.AuthenticateRequest(r)
}

// sliceFunc adapts a method to headerrequest.StringSliceProvider.
type sliceFunc func() []string

func (f sliceFunc) Value() []string { return f() }
