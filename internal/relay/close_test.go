package relay_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/rest"
	utilexec "k8s.io/client-go/util/exec"
)

// endless is stdin that never ends and never waits: a client still typing
// (or pinging) when the command ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

// behindAggregator is cfg for the relay behind the kube-apiserver's own
// proxy for upgraded connections (apimachinery's UpgradeAwareHandler, as
// the aggregator runs it): when either direction of the proxied
// connection ends, it closes both.
func (e *benchEnv) behindAggregator(t testing.TB) *rest.Config {
	backend, err := url.Parse(e.cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	h := proxy.NewUpgradeAwareHandler(backend, &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, false, false, errorResponder{t})
	h.UseRequestLocation = true
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return &rest.Config{Host: front.URL}
}

type errorResponder struct{ t testing.TB }

func (r errorResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	r.t.Logf("proxy: %v", err)
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// TestExitCodeSurvivesTheAggregator: a command's exit reaches a client
// that is still sending when the relay ends the session. The relay writes
// the exit status and closes; if it closed at once, the aggregator's
// client-to-relay copy could fail first and the aggregator would close the
// client's connection before the status got there: client-go reads an
// empty status as success.
func TestExitCodeSurvivesTheAggregator(t *testing.T) {
	e := startBench(t)
	e.cfg = e.behindAggregator(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 40 {
		_, err := e.execRelay(ctx, endless{}, "exit", "7")
		var exit utilexec.ExitError
		if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
			t.Fatalf("exec %d ended with %v, want exit code 7", i, err)
		}
	}
}
