package stack

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/pelletier/go-toml/v2"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// ManagedGateway is a Managed OpenShellGateway whose pod a test gateway
// plays: the operator installs the gateway as usual (kwok runs its pod,
// which does nothing), and its connections to the gateway's Service are
// routed to a test gateway serving the certificate the operator issued
// for that Service, trusting the operator's OIDC issuer. The test gateway
// plays the release the test says the pods run.
type ManagedGateway struct {
	// Gateway is the test gateway playing the pod now.
	Gateway *testgateway.Gateway
	Object  *openshellv1alpha1.OpenShellGateway

	pod    ManagedPod
	client client.Client
	opts   testgateway.Options
}

// ManagedPod is what playing a Managed gateway's pod needs from where the
// operator runs: in this process (Stack.PlayManagedGateway) or as the pod
// OLM created (test/quickstart).
type ManagedPod struct {
	// Config is the cluster's admin config: the test gateway impersonates
	// the gateway's ServiceAccount with it.
	Config *rest.Config
	// IssuerURL and IssuerCA are the operator's OIDC issuer, which the
	// gateway trusts for workspace tokens.
	IssuerURL string
	IssuerCA  []byte
	// JWKSTTL is how long the test gateway caches the issuer's key set
	// (default: the gateway's one hour).
	JWKSTTL time.Duration
	// Images are the operator's operand images (its RELATED_IMAGE_*): the
	// gateway's default sandbox image and its supervisor.
	Images operatorenv.Releases
	// Route sends the operator's connections to a Service address
	// (host:port) to a local address, as the pod network would.
	Route func(service, local string)
	// Started is told of each test gateway started, for the caller to stop.
	Started func(*testgateway.Gateway)
}

// AddManagedGateway creates a Managed gateway ns/name running version ("":
// the operator's default) and, once the operator has issued its serving
// certificate, starts the test gateway that plays its pod. ns must be a
// platform namespace the stack serves (Manager.Controllers.Platform) other
// than the stack's own, where Managed gateways are refused; the test
// provides the gateway's volume.
func (s *Stack) AddManagedGateway(ctx context.Context, c client.Client, ns, name, version string) (*ManagedGateway, error) {
	if s.procOpts != nil || !s.opts.PlayManagedGateways {
		return nil, fmt.Errorf("a Managed gateway's pod is played only for an operator run in this process, with Options.PlayManagedGateways")
	}
	obj := &openshellv1alpha1.OpenShellGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged,
			Managed:         &openshellv1alpha1.ManagedGatewaySpec{Version: version},
			ImagePolicy:     s.opts.ImagePolicy,
			Tenancy:         openshellv1alpha1.GatewayTenancy{AllowedNamespaces: openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}},
			SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(false)}},
	}
	if err := c.Create(ctx, obj); err != nil {
		return nil, fmt.Errorf("create managed gateway: %w", err)
	}
	s.gateways = append(s.gateways, client.ObjectKeyFromObject(obj))
	return s.PlayManagedGateway(ctx, c, obj, version)
}

// PlayManagedGateway starts the test gateway that plays the pod of obj, a
// Managed gateway someone else created (a page's YAML), for the operator
// this stack runs in this process; see PlayManaged.
func (s *Stack) PlayManagedGateway(ctx context.Context, c client.Client, obj *openshellv1alpha1.OpenShellGateway, version string) (*ManagedGateway, error) {
	if s.procOpts != nil || !s.opts.PlayManagedGateways {
		return nil, fmt.Errorf("a Managed gateway's pod is played only for an operator run in this process, with Options.PlayManagedGateways")
	}
	images := s.mgrOpts.Controllers.Images
	return PlayManaged(ctx, c, obj, ManagedPod{Config: s.gwCfg, IssuerURL: s.issuerURL, IssuerCA: s.CA.CertPEM, JWKSTTL: s.opts.JWKSTTL,
		Images: images, Route: s.route, Started: func(gw *testgateway.Gateway) { s.extra = append(s.extra, gw) }}, version)
}

// PlayManaged starts the test gateway that plays the pod of obj, a Managed
// gateway, running version ("": what the operator renders for it), once
// the operator has issued its serving certificate and granted its
// ServiceAccount what that release needs. Its finalizer is the creator's
// to see to.
func PlayManaged(ctx context.Context, c client.Client, obj *openshellv1alpha1.OpenShellGateway, pod ManagedPod, version string) (*ManagedGateway, error) {
	ns := obj.Namespace
	cert, err := servingCert(ctx, c, obj)
	if err != nil {
		return nil, err
	}
	n := render.NamesFor(obj)
	kube, err := asGatewayAccount(pod.Config, c.Scheme(), obj)
	if err != nil {
		return nil, err
	}
	allowed, err := renderedPodLabels(ctx, c, obj)
	if err != nil {
		return nil, err
	}
	m := &ManagedGateway{Object: obj, pod: pod, client: c, opts: testgateway.Options{
		Cert: cert,
		OIDC: testgateway.OIDC{Issuer: pod.IssuerURL, Audience: oidc.Audience(ns, obj.Name), CAPEM: pod.IssuerCA,
			RolesClaim: oidc.RolesClaim, AdminRole: oidc.AdminRole, JWKSTTL: pod.JWKSTTL},
		Kube: kube, Namespace: n.SandboxNamespace, GatewayID: n.GatewayID,
		DefaultImage: pod.Images.Default.Sandbox, SupervisorImage: pod.Images.Default.Supervisor,
		ClientTLSSecret: n.ClientTLS, ServiceAccount: n.SandboxSA,
		// What the operator rendered into the gateway's config.
		AllowedPodLabels: allowed,
	}}
	if render.OperatorMode(obj) {
		m.opts.WorkspaceMode = testgateway.WorkspaceModeOperator
		m.opts.Allowlist = mountedAllowlist(c, obj)
	}
	if version == "" {
		version = render.DesiredVersion(obj)
	}
	if _, err := m.Replace(ctx, version); err != nil {
		return nil, err
	}
	return m, nil
}

// Replace stops the test gateway playing the pod, if any, and starts a new
// one with empty state reporting version: a pod that restarted on another
// release, or one whose database was lost.
func (m *ManagedGateway) Replace(ctx context.Context, version string) (*testgateway.Gateway, error) {
	m.Stop()
	if err := m.waitForGrants(ctx, version); err != nil {
		return nil, err
	}
	gw, err := testgateway.Start(ctx, m.opts)
	if err != nil {
		return nil, fmt.Errorf("start the test gateway for %s/%s: %w", m.Object.Namespace, m.Object.Name, err)
	}
	gw.ReportVersion(version)
	m.Gateway = gw
	if m.pod.Started != nil {
		m.pod.Started(gw)
	}
	u, err := url.Parse(render.InternalEndpoint(m.Object))
	if err != nil {
		return nil, err
	}
	served, _ := url.Parse(gw.Endpoint())
	m.pod.Route(u.Host, served.Host)
	return gw, nil
}

// Stop stops the test gateway playing the pod, as the pod's deletion does.
func (m *ManagedGateway) Stop() {
	if m.Gateway != nil {
		m.Gateway.Stop()
		m.Gateway = nil
	}
}

// asGatewayAccount is a client with the identity of the gateway's own
// ServiceAccount: the test gateway playing a Managed gateway's pod makes
// every Kubernetes request with exactly the RBAC the operator granted that
// gateway, so a grant the runtime needs and the operator forgot fails the
// test.
func asGatewayAccount(admin *rest.Config, scheme *runtime.Scheme, obj *openshellv1alpha1.OpenShellGateway) (client.WithWatch, error) {
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceaccount.MakeUsername(obj.Namespace, render.NamesFor(obj).Fullname),
		Groups: append(serviceaccount.MakeGroupNames(obj.Namespace), user.AllAuthenticated)}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// waitForGrants waits until the operator has granted the gateway's
// ServiceAccount what the pod of version needs in its sandbox namespace
// (the operator binds it as it installs or upgrades the gateway; the pod
// would not start before).
func (m *ManagedGateway) waitForGrants(ctx context.Context, version string) error {
	n := render.NamesFor(m.Object)
	checks := []authorizationv1.ResourceAttributes{{Namespace: n.SandboxNamespace, Verb: "watch", Group: "agents.x-k8s.io", Resource: "sandboxes"}}
	switch l, err := gatewayline.Of(version); {
	case render.OperatorMode(m.Object):
		// Its runtime is granted per paired namespace, as tenants come.
		checks = append(checks, authorizationv1.ResourceAttributes{Verb: "watch", Group: "agents.x-k8s.io", Resource: "sandboxes"})
	case err == nil && l == gatewayline.V01:
		checks = append(checks, authorizationv1.ResourceAttributes{Namespace: n.SandboxNamespace, Verb: "create", Resource: "pods"})
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, attrs := range checks {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   serviceaccount.MakeUsername(m.Object.Namespace, n.Fullname),
				Groups: append(serviceaccount.MakeGroupNames(m.Object.Namespace), user.AllAuthenticated), ResourceAttributes: &attrs}}
			if err := m.client.Create(ctx, sar); err != nil {
				return false, err
			}
			if !sar.Status.Allowed {
				return false, nil
			}
		}
		return true, nil
	})
}

// servingCert waits for the certificate the operator (its built-in PKI, or
// cert-manager) issued for the gateway's Service.
func servingCert(ctx context.Context, c client.Client, gw *openshellv1alpha1.OpenShellGateway) (tls.Certificate, error) {
	var cert tls.Certificate
	key := client.ObjectKey{Namespace: gw.Namespace, Name: render.NamesFor(gw).ServerTLS}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		s := &corev1.Secret{}
		if err := c.Get(ctx, key, s); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		var err error
		cert, err = tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		return err == nil, nil
	})
	if err != nil {
		return cert, fmt.Errorf("wait for the serving certificate %s: %w", key, err)
	}
	return cert, nil
}

// route sends the operator's connections to a Service address (host:port)
// to a local address.
func (s *Stack) route(service, local string) {
	s.routesMu.Lock()
	defer s.routesMu.Unlock()
	if s.routes == nil {
		s.routes = map[string]string{}
	}
	s.routes[service] = local
}

// dialGateway opens the operator's gateway connections: routed Service
// addresses go to the process playing the pod, anything else to the
// address itself (External gateways listen on loopback).
func (s *Stack) dialGateway(ctx context.Context, addr string) (net.Conn, error) {
	s.routesMu.Lock()
	if local, ok := s.routes[addr]; ok {
		addr = local
	}
	s.routesMu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// mountedAllowlist reads an Operator mode gateway's allowlist as its pod
// sees the mounted file: the ConfigMap's content, read with the kubelet's
// rights (not the gateway's).
func mountedAllowlist(c client.Client, obj *openshellv1alpha1.OpenShellGateway) func(context.Context) ([]string, error) {
	key := client.ObjectKey{Namespace: obj.Namespace, Name: render.NamesFor(obj).Workspaces}
	return func(ctx context.Context) ([]string, error) {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, key, cm); err != nil {
			return nil, err
		}
		return render.WorkspacesIn(cm)
	}
}

// renderedPodLabels are the allowed_pod_labels of the configuration the
// operator rendered for obj, as the gateway's pod reads them at start (the
// operator's own keys where the config is of a release without them).
func renderedPodLabels(ctx context.Context, c client.Client, obj *openshellv1alpha1.OpenShellGateway) ([]string, error) {
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: obj.Namespace, Name: render.NamesFor(obj).Config}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, cm)
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		return nil, fmt.Errorf("wait for the rendered gateway config %s: %w", key, err)
	}
	var doc struct {
		OpenShell struct {
			Drivers struct {
				Kubernetes struct {
					AllowedPodLabels []string `toml:"allowed_pod_labels"`
				} `toml:"kubernetes"`
			} `toml:"drivers"`
		} `toml:"openshell"`
	}
	if err := toml.Unmarshal([]byte(cm.Data[render.ConfigFile]), &doc); err != nil {
		return nil, fmt.Errorf("decode the rendered gateway config: %w", err)
	}
	if l := doc.OpenShell.Drivers.Kubernetes.AllowedPodLabels; l != nil {
		return l, nil
	}
	return sandboxspec.OperatorPodLabels, nil
}
