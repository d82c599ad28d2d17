package framework

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// PodNetwork stands in for the network between the API server and pods,
// which kwok's pods do not have: the API server sends its "cluster" egress
// (calls to webhooks and aggregated APIs named by a Service) through it as
// an HTTP CONNECT proxy (an EgressSelectorConfiguration, as clusters that
// reach pods through Konnectivity do), and a test routes a Service's
// address to the local process that plays the pod behind it. An unrouted
// address has no pod behind it: the connection is refused.
type PodNetwork struct {
	lis    net.Listener
	srv    *http.Server
	mu     sync.Mutex
	routes map[string]string
	// tunnels counts the CONNECTs served, by requested address.
	tunnels map[string]int
}

// StartPodNetwork listens on a Unix socket in dir (the API server's TCP
// egress transport insists on TLS client certificates; its Unix socket
// transport does not).
func StartPodNetwork(dir string) (*PodNetwork, error) {
	lis, err := net.Listen("unix", filepath.Join(dir, "pod-network.sock"))
	if err != nil {
		return nil, err
	}
	return serveConnect(lis), nil
}

// StartHTTPProxy starts the same CONNECT proxy on a loopback TCP port, to
// play a cluster's egress (corporate) proxy: the addresses routed to it
// may be names nothing else resolves, so a connection that arrives proves
// it went through the proxy.
func StartHTTPProxy() (*PodNetwork, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return serveConnect(lis), nil
}

func serveConnect(lis net.Listener) *PodNetwork {
	p := &PodNetwork{lis: lis, routes: map[string]string{}, tunnels: map[string]int{}}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.connect), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(lis) }()
	return p
}

// URL is the proxy's http:// URL (TCP proxies only).
func (p *PodNetwork) URL() string { return "http://" + p.lis.Addr().String() }

// Tunnels is how many CONNECTs to addr the proxy served.
func (p *PodNetwork) Tunnels(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tunnels[addr]
}

// Route sends connections for addr (host:port, e.g. a Service's ClusterIP
// and port) to the local address to.
func (p *PodNetwork) Route(addr, to string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[addr] = to
}

// WriteEgressConfig writes the kube-apiserver --egress-selector-config-file
// that sends cluster traffic through this network.
func (p *PodNetwork) WriteEgressConfig(dir string) (string, error) {
	path := filepath.Join(dir, "egress-selector.yaml")
	cfg := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, p.lis.Addr().String())
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// Stop closes the listener.
func (p *PodNetwork) Stop() { _ = p.srv.Close() }

func (p *PodNetwork) connect(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	p.mu.Lock()
	target, ok := p.routes[r.Host]
	if ok {
		p.tunnels[r.Host]++
	}
	p.mu.Unlock()
	if !ok {
		http.Error(w, "no pod behind "+r.Host, http.StatusBadGateway)
		return
	}
	out, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = out.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	in, buf, err := hj.Hijack()
	if err != nil {
		_ = out.Close()
		return
	}
	_, _ = in.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	// The hijacked reader may hold bytes the client sent after CONNECT.
	go splice(in, buf.Reader, out)
}
