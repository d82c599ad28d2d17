// Package gwconn resolves how the operator reaches and authenticates to an
// OpenShellGateway: endpoint, CA and token source, for Managed gateways
// (in-cluster Service, the gateway CA, tokens from the operator's OIDC
// issuer) and External ones (spec.external, the given CA Secret, the
// client-credentials grant or the operator's issuer).
package gwconn

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/oidc"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

// Keys of an External gateway's credentials Secret.
const (
	KeyClientID     = "client-id"
	KeyClientSecret = "client-secret"
	KeyTokenURL     = "token-url"
)

// Resolver builds gateway clients.
type Resolver struct {
	// Client is the cached client (gateways, the operator's own Secrets).
	Client client.Client
	// APIReader reads Secrets the operator does not label (External CA and
	// credentials) without caching them.
	APIReader client.Reader
	Pool      *gatewayapi.Pool
	// Issuer is the operator's OIDC issuer; nil when not configured.
	Issuer *oidc.Issuer
	// TokenHTTPClient calls External identity providers' token endpoints
	// (nil: the default client and system roots).
	TokenHTTPClient *http.Client

	// CARefresh is how long an External gateway's CA, read from a Secret
	// the operator does not cache, is reused before it is read again
	// (default one minute). Without it every sandbox reconcile would GET
	// the Secret from the API server.
	CARefresh time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time

	mu     sync.Mutex
	tokens map[string]gatewayapi.TokenSource
	cas    map[string]cachedCA
	// workspaces are the workspaces verified at each gateway.
	workspaces workspaces
}

type cachedCA struct {
	pem  []byte
	read time.Time
}

// Key names a gateway in the pool.
func Key(gw *openshellv1alpha1.OpenShellGateway) string { return gw.Namespace + "/" + gw.Name }

// Connect returns a connected client for the gateway.
func (r *Resolver) Connect(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (*gatewayapi.Client, error) {
	t, err := r.target(ctx, gw)
	if err != nil {
		return nil, err
	}
	return r.Pool.Get(Key(gw), t)
}

// Forget drops the connection of a deleted gateway.
func (r *Resolver) Forget(gw *openshellv1alpha1.OpenShellGateway) {
	r.Pool.Forget(Key(gw))
	r.mu.Lock()
	delete(r.tokens, Key(gw))
	for id := range r.cas {
		if strings.HasPrefix(id, Key(gw)+"/") {
			delete(r.cas, id)
		}
	}
	r.mu.Unlock()
	r.workspaces.known.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), Key(gw)+"/") {
			r.workspaces.known.Delete(k)
		}
		return true
	})
}

func (r *Resolver) target(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (gatewayapi.Target, error) {
	if gw.Spec.Mode == openshellv1alpha1.GatewayModeExternal {
		ext := gw.Spec.External
		if ext == nil {
			return gatewayapi.Target{}, fmt.Errorf("spec.external is not set")
		}
		ca, err := r.externalCA(ctx, gw, ext.CASecretRef.Name, ext.CASecretRef.Key)
		if err != nil {
			return gatewayapi.Target{}, err
		}
		ts, err := r.tokenSource(ctx, gw)
		if err != nil {
			return gatewayapi.Target{}, err
		}
		return gatewayapi.Target{Endpoint: ext.Endpoint, ServerName: ext.ServerName, CAPEM: ca, Tokens: ts}, nil
	}
	ca, err := r.secretKey(ctx, r.Client, gw.Namespace, render.NamesFor(gw).ServerTLS, "ca.crt")
	if err != nil {
		return gatewayapi.Target{}, err
	}
	ts, err := r.tokenSource(ctx, gw)
	if err != nil {
		return gatewayapi.Target{}, err
	}
	return gatewayapi.Target{Endpoint: render.InternalEndpoint(gw), CAPEM: ca, Tokens: ts}, nil
}

// externalCA reads an External gateway's CA Secret at most once per
// CARefresh: a rotated CA takes effect within that time, and a failed read
// is never cached.
func (r *Resolver) externalCA(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, name, key string) ([]byte, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	refresh := r.CARefresh
	if refresh <= 0 {
		refresh = time.Minute
	}
	id := Key(gw) + "/" + name + "/" + key
	r.mu.Lock()
	c, ok := r.cas[id]
	r.mu.Unlock()
	if ok && now().Sub(c.read) < refresh {
		return c.pem, nil
	}
	pem, err := r.secretKey(ctx, r.APIReader, gw.Namespace, name, key)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.cas == nil {
		r.cas = map[string]cachedCA{}
	}
	r.cas[id] = cachedCA{pem: pem, read: now()}
	r.mu.Unlock()
	return pem, nil
}

func (r *Resolver) secretKey(ctx context.Context, reader client.Reader, ns, name, key string) ([]byte, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		return nil, fmt.Errorf("read Secret %s/%s: %w", ns, name, err)
	}
	v, ok := s.Data[key]
	if !ok || len(v) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no key %q", ns, name, key)
	}
	return v, nil
}

// tokenSource is the client-credentials grant when an External gateway
// names a credentials Secret, and the operator's own issuer otherwise.
func (r *Resolver) tokenSource(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (gatewayapi.TokenSource, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tokens == nil {
		r.tokens = map[string]gatewayapi.TokenSource{}
	}
	if ts, ok := r.tokens[Key(gw)]; ok {
		return ts, nil
	}
	var ts gatewayapi.TokenSource
	if ext := gw.Spec.External; ext != nil && ext.CredentialsSecretRef != nil {
		s := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: ext.CredentialsSecretRef.Name}, s); err != nil {
			return nil, fmt.Errorf("read credentials Secret %s: %w", ext.CredentialsSecretRef.Name, err)
		}
		for _, k := range []string{KeyClientID, KeyClientSecret, KeyTokenURL} {
			if len(s.Data[k]) == 0 {
				return nil, fmt.Errorf("credentials Secret %s has no key %q", ext.CredentialsSecretRef.Name, k)
			}
		}
		cc := clientcredentials.Config{ClientID: string(s.Data[KeyClientID]), ClientSecret: string(s.Data[KeyClientSecret]),
			TokenURL: string(s.Data[KeyTokenURL])}
		// ReuseTokenSource caches the token until shortly before it expires.
		tctx := context.Background()
		if r.TokenHTTPClient != nil {
			tctx = context.WithValue(tctx, oauth2.HTTPClient, r.TokenHTTPClient)
		}
		ts = oauth2Source{src: oauth2.ReuseTokenSource(nil, cc.TokenSource(tctx))}
	} else {
		if r.Issuer == nil {
			return nil, fmt.Errorf("the operator's OIDC issuer is not configured (--oidc-issuer-url) and the gateway names no credentials Secret")
		}
		ts = &oidc.TokenSource{Issuer: r.Issuer, Audience: oidc.Audience(gw.Namespace, gw.Name)}
	}
	r.tokens[Key(gw)] = ts
	return ts, nil
}

type oauth2Source struct{ src oauth2.TokenSource }

func (o oauth2Source) Token(context.Context) (string, error) {
	t, err := o.src.Token()
	if err != nil {
		return "", fmt.Errorf("client-credentials grant: %w", err)
	}
	return t.AccessToken, nil
}
