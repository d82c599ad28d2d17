package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
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
	// tlsSecret holds the self-issued serving certificate when tls is nil.
	tlsSecret string
	client    client.Client
}

// NeedLeaderElection is false: followers serve the JWKS too.
func (s *issuerServer) NeedLeaderElection() bool { return false }

func (s *issuerServer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("oidc-issuer")
	if err := s.syncWithRetry(ctx); err != nil {
		return err
	}
	if s.tls == nil {
		u, err := url.Parse(s.issuer.URL)
		if err != nil {
			return fmt.Errorf("parse issuer URL: %w", err)
		}
		cert, ca, err := oidc.EnsureServingCert(ctx, s.client, s.issuer.SecretNamespace, s.tlsSecret, []string{u.Hostname()}, time.Now())
		if err != nil {
			return err
		}
		s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s.issuer.SetCA(ca)
	}
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen for the OIDC issuer: %w", err)
	}
	srv := &http.Server{Handler: s.issuer.Handler(), TLSConfig: s.tls, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	go func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.issuer.Sync(ctx); err != nil {
					log.Error(err, "Refreshing OIDC signing keys")
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

// syncWithRetry waits for the cache-backed client to be usable.
func (s *issuerServer) syncWithRetry(ctx context.Context) error {
	var err error
	for i := 0; i < 30; i++ {
		if err = s.issuer.Sync(ctx); err == nil {
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
