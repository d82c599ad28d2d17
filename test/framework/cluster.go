package framework

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KwokNodeAnnotation marks nodes that kwok manages.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// ClusterOptions configures a local e2e cluster.
type ClusterOptions struct {
	EnvOptions
	// Nodes is the number of fake kwok nodes; default 1.
	Nodes int
	// NoAgentSandboxController skips starting the Agent Sandbox controller.
	NoAgentSandboxController bool
	// PodNetwork routes the API server's calls to Services (webhooks named
	// by a Service, as OLM installs them) through Cluster.Network.
	PodNetwork bool
	// OperatorBinary builds the operator binary (OperatorBinary) before
	// the cluster starts, for packages that run the operator as a process.
	OperatorBinary bool
}

// Cluster is a local control plane that runs pods: kube-apiserver and etcd
// (envtest), kube-controller-manager, kube-scheduler, kwok with fake nodes,
// and the real Agent Sandbox controller.
type Cluster struct {
	*Env
	Dir            string
	KubeconfigPath string
	Processes      []*Process
	// Network is the pod network (ClusterOptions.PodNetwork).
	Network *PodNetwork
}

// StartCluster starts every component and returns once the nodes are Ready
// and schedulable. On error everything started so far is stopped.
func StartCluster(ctx context.Context, opts ClusterOptions) (_ *Cluster, retErr error) {
	if opts.AgentSandbox == "" {
		opts.AgentSandbox = AgentSandboxBetaOnly
	}
	if opts.Nodes == 0 {
		opts.Nodes = 1
	}
	bins := map[string]string{}
	for _, b := range []string{"kube-controller-manager", "kube-scheduler", "kwok", "agent-sandbox-controller"} {
		p, err := Binary(b)
		if err != nil {
			return nil, err
		}
		bins[b] = p
	}
	dir, err := os.MkdirTemp("", "openshell-e2e-")
	if err != nil {
		return nil, fmt.Errorf("create cluster dir: %w", err)
	}
	c := &Cluster{Dir: dir}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, c.Stop())
		}
	}()

	if opts.PodNetwork {
		if c.Network, err = StartPodNetwork(dir); err != nil {
			return nil, err
		}
		path, err := c.Network.WriteEgressConfig(dir)
		if err != nil {
			return nil, err
		}
		flags := map[string]string{"egress-selector-config-file": path}
		for k, v := range opts.APIServerFlags {
			flags[k] = v
		}
		opts.APIServerFlags = flags
	}
	if c.Env, err = StartEnv(opts.EnvOptions); err != nil {
		return nil, err
	}
	if c.KubeconfigPath, err = c.WriteKubeconfig(dir); err != nil {
		return nil, err
	}
	kc := "--kubeconfig=" + c.KubeconfigPath

	if err := c.start("kube-controller-manager", bins["kube-controller-manager"], kc,
		// No kubelets: node IPAM and lifecycle make no sense, and the token
		// controller needs a signing key we do not hand out.
		"--controllers=*,-nodeipam,-nodelifecycle,-serviceaccount-token",
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
		"--concurrent-gc-syncs=5"); err != nil {
		return nil, err
	}
	if err := c.start("kube-scheduler", bins["kube-scheduler"], kc, "--leader-elect=false", "--secure-port=0"); err != nil {
		return nil, err
	}
	kwokCfg, err := writeKwokConfig(dir)
	if err != nil {
		return nil, err
	}
	kwokPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	if err := c.start("kwok", bins["kwok"], kc, "--config="+kwokCfg,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
		"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort)); err != nil {
		return nil, err
	}
	if err := c.addNodes(ctx, opts.Nodes); err != nil {
		return nil, err
	}
	if !opts.NoAgentSandboxController {
		if err := c.start("agent-sandbox-controller", bins["agent-sandbox-controller"], kc,
			"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0"); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) start(name, bin string, args ...string) error {
	p, err := StartProcess(c.Dir, name, bin, args...)
	if err != nil {
		return err
	}
	c.Processes = append(c.Processes, p)
	return nil
}

// Process returns the named component.
func (c *Cluster) Process(name string) *Process {
	for _, p := range c.Processes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Restart stops the named component and starts it again with the same
// arguments, as a pod restart would: it comes back with empty caches.
func (c *Cluster) Restart(name string) error {
	for i, p := range c.Processes {
		if p.Name != name {
			continue
		}
		if err := p.Stop(10 * time.Second); err != nil {
			return err
		}
		np, err := StartProcessEnv(c.Dir, name, p.cmd.Path, p.env, p.cmd.Args[1:]...)
		if err != nil {
			return err
		}
		c.Processes[i] = np
		return nil
	}
	return fmt.Errorf("no component %q", name)
}

// CheckProcesses returns an error naming any component that has exited,
// with the end of its log.
func (c *Cluster) CheckProcesses() error {
	var errs []error
	for _, p := range c.Processes {
		if done, err := p.Exited(); done {
			errs = append(errs, fmt.Errorf("%s exited (%v):\n%s", p.Name, err, p.Tail(2000)))
		}
	}
	return errors.Join(errs...)
}

// Stop stops every component in reverse start order and removes the folder.
// Logs are kept when OPENSHELL_KEEP_E2E is set.
func (c *Cluster) Stop() error {
	if c == nil {
		return nil
	}
	var errs []error
	for i := len(c.Processes) - 1; i >= 0; i-- {
		errs = append(errs, c.Processes[i].Stop(10*time.Second))
	}
	c.Processes = nil
	errs = append(errs, c.Env.Stop())
	if c.Network != nil {
		c.Network.Stop()
	}
	if os.Getenv("OPENSHELL_KEEP_E2E") == "" {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}

func writeKwokConfig(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(UpstreamDir("kwok-stages"), "*.yaml"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("kwok stages missing in %s: run `make tools` first", UpstreamDir("kwok-stages"))
	}
	var docs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("read kwok stage: %w", err)
		}
		docs = append(docs, strings.TrimSpace(string(b)))
	}
	p := filepath.Join(dir, "kwok.yaml")
	return p, os.WriteFile(p, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o600)
}

// addNodes creates fake nodes for kwok, waits until kwok reports them Ready,
// and lifts the not-ready taint that the node lifecycle controller (off
// here: there are no kubelets) would otherwise remove.
func (c *Cluster) addNodes(ctx context.Context, n int) error {
	for i := range n {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("kwok-node-%d", i),
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
			Labels:      map[string]string{"type": "kwok", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
		}}
		if err := c.Client.Create(ctx, node); err != nil {
			return fmt.Errorf("create node %s: %w", node.Name, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := WaitFor(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			if err := c.CheckProcesses(); err != nil {
				return false, err
			}
			cur := &corev1.Node{}
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(node), cur); err != nil {
				return false, err
			}
			if !nodeReady(cur) {
				return false, nil
			}
			var kept []corev1.Taint
			for _, t := range cur.Spec.Taints {
				if t.Key != corev1.TaintNodeNotReady {
					kept = append(kept, t)
				}
			}
			if len(kept) == len(cur.Spec.Taints) {
				return true, nil
			}
			cur.Spec.Taints = kept
			return false, c.Client.Update(ctx, cur)
		})
		cancel()
		if err != nil {
			return fmt.Errorf("node %s never became Ready and schedulable: %w", node.Name, err)
		}
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// FreePort picks a loopback port that is free now, for a server the caller
// starts later. It picks below the kernel's ephemeral range (where every
// process's outgoing connections take their local ports): a port from that
// range could be taken by any connection between the pick and the bind,
// which was seen as "bind: address already in use" for the e2e tenancy
// suite's webhook server.
func FreePort() (int, error) {
	// Below the ephemeral range and the default NodePort range (30000+).
	lo, hi := 18000, 29999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			start, err1 := strconv.Atoi(f[0])
			end, err2 := strconv.Atoi(f[1])
			switch {
			case err1 != nil || err2 != nil:
			case start <= hi && start > 7024:
				lo, hi = start-6000, start-1
			case start <= hi && end < 59535:
				lo, hi = end+1, end+6000 // the range starts low: pick above it
			case start <= hi:
				lo, hi = 0, 0 // no room outside it: let the kernel pick
			}
		}
	}
	for range 200 {
		if hi == 0 {
			break
		}
		p := lo + rand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// CheckProcessesMessage is CheckProcesses as text for assertion messages.
func (c *Cluster) CheckProcessesMessage() string {
	if err := c.CheckProcesses(); err != nil {
		return err.Error()
	}
	return "all cluster components are running"
}
