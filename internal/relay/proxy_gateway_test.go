package relay_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestProxyReachesTheSandboxsService: through the relay, over real gRPC
// and TLS to the test gateway, a request reaches the HTTP service inside
// the sandbox as its client sent it, less the caller's credentials; the
// answer comes back guarded for the cluster API's origin; an upgrade
// carries bytes both ways; a port nothing listens on answers 503 with the
// gateway's reason.
func TestProxyReachesTheSandboxsService(t *testing.T) {
	g := NewWithT(t)
	e := startBench(t)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the test relay's own certificate
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	base := e.cfg.Host + "/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/proxy/"

	for i := range 2 { // a second request on the kept-alive connection is a session of its own
		req, err := http.NewRequest(http.MethodPost, base+strconv.Itoa(testgateway.HTTPPort)+"/api/run%2Fnow?x=1", strings.NewReader("payload "+strconv.Itoa(i)))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer cluster-token")
		req.Header.Set("Cookie", "console=1")
		req.Header.Set("X-Agent", "kept")
		resp, err := hc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.Body.Close()).To(Succeed())
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
		var seen testgateway.SandboxRequest
		g.Expect(json.Unmarshal(body, &seen)).To(Succeed())
		g.Expect(seen.Method).To(Equal(http.MethodPost))
		g.Expect(seen.URI).To(Equal("/api/run%2Fnow?x=1"), "the path as the client sent it")
		g.Expect(seen.Host).To(Equal("127.0.0.1:" + strconv.Itoa(testgateway.HTTPPort)))
		g.Expect(seen.Body).To(Equal("payload " + strconv.Itoa(i)))
		g.Expect(seen.Header).To(HaveKeyWithValue("X-Agent", []string{"kept"}))
		g.Expect(seen.Header).NotTo(HaveKey("Authorization"))
		g.Expect(seen.Header).NotTo(HaveKey("Cookie"))
		g.Expect(resp.Header.Get("Content-Security-Policy")).To(Equal("sandbox allow-same-origin"))
		g.Expect(resp.Header.Values("Set-Cookie")).To(BeEmpty(), "the service set a cookie")
		g.Expect(resp.Header.Get("Access-Control-Allow-Origin")).To(BeEmpty(), "the service granted every origin")
		g.Expect(resp.Header.Get("Clear-Site-Data")).To(BeEmpty(), "the service cleared the origin's data")
		g.Expect(resp.Header.Get("Refresh")).To(BeEmpty(), "the service sent the browser elsewhere")
	}

	t.Run("a redirect stays within the sandbox's port", func(t *testing.T) {
		g := NewWithT(t)
		noFollow := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		port := base + strconv.Itoa(testgateway.HTTPPort)
		for to, want := range map[string]string{
			"/login": strings.TrimPrefix(port, e.cfg.Host) + "/login",
			"http://localhost:8001/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/other/proxy/8000/act": "",
		} {
			resp, err := noFollow.Get(port + "/?redirect=" + url.QueryEscape(to))
			g.Expect(err).NotTo(HaveOccurred())
			_ = resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(http.StatusFound))
			g.Expect(resp.Header.Get("Location")).To(Equal(want), to)
		}
	})

	t.Run("an upgrade carries bytes both ways", func(t *testing.T) {
		g := NewWithT(t)
		u, err := url.Parse(base)
		g.Expect(err).NotTo(HaveOccurred())
		conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // as above
		g.Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		_, err = io.WriteString(conn, "GET "+u.Path+strconv.Itoa(testgateway.HTTPPort)+"/stream HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: "+
			testgateway.UpgradeProtocol+"\r\n\r\n")
		g.Expect(err).NotTo(HaveOccurred())
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.StatusCode).To(Equal(http.StatusSwitchingProtocols))
		for _, msg := range []string{"ping", strings.Repeat("x", 100<<10)} {
			_, err = io.WriteString(conn, msg)
			g.Expect(err).NotTo(HaveOccurred())
			got := make([]byte, len(msg))
			_, err = io.ReadFull(br, got)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(msg))
		}
	})

	t.Run("no informational answer or trailer reaches the client", func(t *testing.T) {
		g := NewWithT(t)
		port := base + strconv.Itoa(testgateway.HTTPPort)
		var hints []int
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			hints = append(hints, code)
			return nil
		}})
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, port+testgateway.HintsPath, nil)
		g.Expect(err).NotTo(HaveOccurred())
		resp, err := hc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		g.Expect(hints).To(BeEmpty(), "a 103 reached the client")
		resp, err = hc.Get(port + testgateway.TrailersPath)
		g.Expect(err).NotTo(HaveOccurred())
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		g.Expect(resp.Trailer).To(BeEmpty(), "a trailer reached the client")
	})

	t.Run("a client that goes frees its session at once", func(t *testing.T) {
		// The limit is the server's, set before its first request.
		g := NewWithT(t)
		one := startBench(t)
		one.srv.MaxSessionsPerUser = 1
		hang := one.cfg.Host + "/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/proxy/" +
			strconv.Itoa(testgateway.HTTPPort) + testgateway.HangPath
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hang, nil)
		g.Expect(err).NotTo(HaveOccurred())
		done := make(chan error, 1)
		go func() {
			resp, err := hc.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			done <- err
		}()
		// The hung request holds the user's one slot once its stream is
		// open (no other request competes for the slot before then)...
		g.Eventually(func() int { return one.env.Gateway.Calls()["ForwardTcp"] }).WithTimeout(10 * time.Second).Should(Equal(1))
		g.Expect(getStatus(g, hc, one.cfg.Host+"/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/proxy/"+
			strconv.Itoa(testgateway.HTTPPort)+"/")).To(Equal(http.StatusTooManyRequests))
		// ...until its client goes.
		cancel()
		g.Expect(<-done).To(HaveOccurred())
		g.Eventually(func() int {
			return getStatus(g, hc, one.cfg.Host+"/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/proxy/"+
				strconv.Itoa(testgateway.HTTPPort)+"/")
		}).WithTimeout(10 * time.Second).Should(Equal(http.StatusOK))
	})

	t.Run("a port nothing listens on", func(t *testing.T) {
		g := NewWithT(t)
		resp, err := hc.Get(base + "8001/")
		g.Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusServiceUnavailable))
		g.Expect(string(body)).To(And(ContainSubstring("port 8001 in sandbox agent"), ContainSubstring("connection refused")))
	})
}

func getStatus(g Gomega, hc *http.Client, u string) int {
	resp, err := hc.Get(u)
	g.Expect(err).NotTo(HaveOccurred())
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// BenchmarkProxyRoundTrip: one small GET through the relay's proxy to the
// sandbox's HTTP service (a session, an owner check and a ForwardTcp
// stream each), on a kept-alive connection to the relay as the
// kube-apiserver's proxy holds one; reports the p50 and p99 and the
// relay's allocations per request (with -benchmem: the client's too).
func BenchmarkProxyRoundTrip(b *testing.B) {
	e := startBench(b)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the test relay's own certificate
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	u := e.cfg.Host + "/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/proxy/" + strconv.Itoa(testgateway.HTTPPort) + "/healthz"
	get := func() {
		resp, err := hc.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	get()
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		get()
		took = append(took, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64(pct(took, 50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(pct(took, 99).Microseconds()), "p99-µs")
}
