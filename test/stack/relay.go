package stack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/relay"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// Relay is a running relay registered as the cluster's access.openshell.ai
// APIService.
type Relay struct {
	// Addr is the relay's own listener (127.0.0.1:port): a request sent
	// here directly does not come through the front proxy.
	Addr string
	// ExternalAddr is the relay's external port listener (127.0.0.1:port),
	// where the external ports Routes bring requests.
	ExternalAddr string
	// CA signs the relay's serving certificate.
	CA     *pki.KeyPair
	Server *relay.Server
	// stop drains and stops the relay, as a rolling update stops a
	// replica.
	stop func() error
}

// relayNamespace holds the relay's Service (an ExternalName to loopback:
// the API server resolves an APIService's ExternalName Service to that
// host, which stands in for the relay pod).
const relayService = "openshell-relay"

// StartRelay serves the relay on loopback for the stack's gateways and
// registers it: an ExternalName Service in ns naming localhost, an
// APIService with its CA, and waits until the API server reports it
// Available. One per cluster at a time (the APIService is cluster-wide).
func (s *Stack) StartRelay(ctx context.Context, cfg *rest.Config, ns string, log logr.Logger) (*Relay, error) {
	return s.StartRelayWith(ctx, cfg, ns, RelayOptions{Log: log})
}

// RelayOptions are what a test sets of a relay replica.
type RelayOptions struct {
	// Replica is the pod the replica says it runs in: it publishes its
	// sessions (none: it counts alone, as a replica without POD_NAME).
	Replica relayload.Replica
	// MaxSessionsPerUser is the per-user limit (0: the default).
	MaxSessionsPerUser int
	Log                logr.Logger
}

// StartRelayWith is StartRelay with a replica's options.
func (s *Stack) StartRelayWith(ctx context.Context, cfg *rest.Config, ns string, o RelayOptions) (*Relay, error) {
	r, err := s.serveRelay(cfg, ns, o)
	if err != nil {
		return nil, err
	}
	if err := register(ctx, s.kube, ns, r); err != nil {
		_ = r.stop()
		return nil, err
	}
	return r, nil
}

// StartRelayReplica serves another replica of the relay, not registered
// (the API server reaches only the first): its membership rechecks run
// against the same Leases, as a second pod's do.
func (s *Stack) StartRelayReplica(cfg *rest.Config, ns string, o RelayOptions) (*Relay, error) {
	return s.serveRelay(cfg, ns, o)
}

// serveRelay builds the relay as manager relay does, with the stack's
// issuer, and serves it on loopback with a certificate of its own CA.
func (s *Stack) serveRelay(cfg *rest.Config, ns string, o RelayOptions) (*Relay, error) {
	rctx, cancel := context.WithCancel(context.Background())
	built, err := operator.NewRelay(rctx, cfg, operator.RelayOptions{IssuerURL: s.issuerURL, IssuerNamespace: s.opts.GatewayNamespace,
		IssuerKeySecret: operator.OIDCKeySecret, MembershipRecheck: time.Second, Replica: o.Replica,
		MaxSessionsPerUser: o.MaxSessionsPerUser, Log: o.Log, DialGateway: s.mgrOpts.Controllers.DialGateway})
	if err != nil {
		cancel()
		return nil, err
	}
	now := time.Now()
	ca, err := pki.NewCA("relay-ca", time.Hour, now)
	if err != nil {
		cancel()
		return nil, err
	}
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: relayService, DNSNames: []string{relayService + "." + ns + ".svc"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Validity: time.Hour}, now)
	if err != nil {
		cancel()
		return nil, err
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		cancel()
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, err
	}
	ext, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		_ = lis.Close()
		return nil, err
	}
	served, extServed := make(chan error, 1), make(chan error, 1)
	serving := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	go func() {
		// No grace: a test's relay goes at once, as one told to reconnect.
		served <- built.Serve(rctx, lis, serving, operator.Drain{Timeout: 10 * time.Second})
	}()
	go func() {
		extServed <- built.ServeExternal(rctx, ext, serving, operator.Drain{Timeout: 10 * time.Second})
	}()
	return &Relay{Addr: lis.Addr().String(), ExternalAddr: ext.Addr().String(), CA: ca, Server: built.Server, stop: func() error {
		cancel()
		return errors.Join(<-served, <-extServed)
	}}, nil
}

// Stop unregisters and stops the relay.
func (r *Relay) Stop(ctx context.Context, c client.Client) error {
	as := apiService()
	err := c.Delete(ctx, as)
	if apierrors.IsNotFound(err) {
		err = nil
	}
	return errors.Join(err, r.stop())
}

// Drain stops the relay and leaves it registered, as a rolling update
// stops one replica: its open sessions end with a notice.
func (r *Relay) Drain() error { return r.stop() }

func apiService() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	u.SetName(relay.Version + "." + relay.Group)
	return u
}

// register creates the Service and APIService and waits for Available.
func register(ctx context.Context, c client.Client, ns string, r *Relay) error {
	_, port, _ := net.SplitHostPort(r.Addr)
	p, _ := strconv.Atoi(port)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: relayService, Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(p)}}}}
	if err := c.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the relay's Service: %w", err)
	}
	as := apiService()
	as.Object["spec"] = map[string]any{
		"group": relay.Group, "version": relay.Version, "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
		"caBundle": r.CA.CertPEM,
		"service":  map[string]any{"namespace": ns, "name": relayService, "port": int64(p)},
	}
	if err := c.Create(ctx, as); err != nil {
		return fmt.Errorf("create the relay's APIService: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last string
	err := framework.WaitFor(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		got := apiService()
		if err := c.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, raw := range conds {
			m, _ := raw.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprintf("%v: %v", m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		return false, nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("the relay's APIService is not Available (%s)", last), err)
	}
	return nil
}

// RelayCA returns a pool trusting the relay (direct requests in tests).
func (r *Relay) RelayCA() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(r.CA.CertPEM)
	return pool
}
