package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/openshell/openshell-operator/internal/oidc"
)

// issuerServer loads (or creates, or rotates) the OIDC signing keys and
// serves discovery and JWKS over TLS on every replica, leader or not:
// gateways may reach any of them.
type issuerServer struct {
	issuer *oidc.Issuer
	addr   string
	tls    *tls.Config
	// tlsOpt makes the server follow the cluster's TLS profile.
	tlsOpt func(*tls.Config)
	// tlsSecret holds the self-issued serving certificate when tls is nil.
	tlsSecret string
	client    client.Client
	// serving is the current self-issued certificate; now is the clock.
	serving atomic.Pointer[tls.Certificate]
	now     func() time.Time
	// keyRefresh is how often the keys are reloaded, certCheck how often
	// the self-issued certificate is checked (OIDCOptions).
	keyRefresh, certCheck time.Duration
}

// NeedLeaderElection is false: followers serve the JWKS too.
func (s *issuerServer) NeedLeaderElection() bool { return false }

func (s *issuerServer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("oidc-issuer")
	if err := s.loadWithRetry(ctx); err != nil {
		return err
	}
	selfIssued := s.tls == nil
	if selfIssued {
		if err := s.renewServingCert(ctx); err != nil {
			return err
		}
		// The certificate is looked up per handshake, so a renewal takes
		// effect without a restart (a pod may run longer than a leaf lives).
		s.tls = &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.serving.Load(), nil
		}}
	}
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen for the OIDC issuer: %w", err)
	}
	// Discovery and JWKS are small: bound every phase of a request, and
	// serve HTTP/1.1 only, like the metrics and webhook servers.
	http1Only(s.tls)
	if s.tlsOpt != nil {
		s.tlsOpt(s.tls)
	}
	srv := &http.Server{Handler: s.issuer.Handler(), TLSConfig: s.tls, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	go func() {
		keys := time.NewTicker(orDefault(s.keyRefresh, time.Minute))
		defer keys.Stop()
		var certs <-chan time.Time
		if selfIssued {
			t := time.NewTicker(orDefault(s.certCheck, 10*time.Minute))
			defer t.Stop()
			certs = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-keys.C:
				// Every replica loads; only the leader rotates (keyRotator).
				if err := s.issuer.Load(ctx); err != nil && !errors.Is(err, oidc.ErrNoKeys) {
					log.Error(err, "Refreshing OIDC signing keys")
				}
			case <-certs:
				if err := s.renewServingCert(ctx); err != nil {
					log.Error(err, "Renewing the OIDC serving certificate")
				}
			}
		}
	}()
	log.Info("Serving OIDC discovery and JWKS", "issuer", s.issuer.URL, "address", lis.Addr().String())
	if err := srv.ServeTLS(lis, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// renewServingCert keeps the self-issued serving certificate current (the
// shared two-thirds-life plan in internal/pki) and publishes it and its CA.
func (s *issuerServer) renewServingCert(ctx context.Context) error {
	u, err := url.Parse(s.issuer.URL)
	if err != nil {
		return fmt.Errorf("parse issuer URL: %w", err)
	}
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	cert, ca, err := oidc.EnsureServingCert(ctx, s.client, s.issuer.SecretNamespace, s.tlsSecret, []string{u.Hostname()}, now())
	if err != nil {
		return err
	}
	s.serving.Store(&cert)
	s.issuer.SetCA(ca)
	return nil
}

// loadWithRetry waits for the client to be usable; keys that do not exist
// yet are not an error (the leader creates them, the ticker loads them).
func (s *issuerServer) loadWithRetry(ctx context.Context) error {
	var err error
	for i := 0; i < 30; i++ {
		if err = s.issuer.Load(ctx); err == nil || errors.Is(err, oidc.ErrNoKeys) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("load OIDC signing keys: %w", err)
}

// keyRotator creates and rotates the OIDC signing keys, on the leader only:
// replicas that each rotated would race and, until they reloaded, serve
// different key sets. The next key is published a rotation ahead, so
// followers that load a minute late still verify the leader's tokens.
type keyRotator struct {
	issuer   *oidc.Issuer
	interval time.Duration
}

// NeedLeaderElection is true: only the leader writes the key Secret.
func (k *keyRotator) NeedLeaderElection() bool { return true }

func (k *keyRotator) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("oidc-key-rotation")
	for {
		next := orDefault(k.interval, time.Minute)
		if err := k.issuer.Sync(ctx); err != nil {
			log.Error(err, "Rotating OIDC signing keys")
			if !k.issuer.HasKeys() {
				next = time.Second // nothing to sign with yet: try again soon
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(next):
		}
	}
}
