// Command kubectl-openshell is the kubectl plugin of Sandbox Consumers:
// `kubectl openshell exec|logs|port-forward|token` use an OpenShellSandbox through the
// relay's access.openshell.ai API with the caller's own kubeconfig, so
// kubectl's authentication, contexts, namespaces and impersonation flags
// work as they do for pods. Exit codes are the command's, as with kubectl
// exec.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	uexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
)

func main() {
	flags := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:           "kubectl openshell",
		Short:         "Use OpenShell sandboxes with your Kubernetes identity",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	flags.AddFlags(root.PersistentFlags())
	root.AddCommand(execCommand(flags), logsCommand(flags), tokenCommand(flags), portForwardCommand(flags))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	var exit uexec.CodeExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		os.Exit(exit.Code)
	default:
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// target is the REST config and namespace the flags select.
func target(flags *genericclioptions.ConfigFlags) (*rest.Config, string, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	return cfg, ns, nil
}

// subresourcePath is the relay's path for a subresource of a sandbox.
func subresourcePath(ns, name, sub string) string {
	return accessv1alpha1.Path(url.PathEscape(ns), url.PathEscape(name), sub)
}

// subresourceURL is a sandbox's subresource on the API server at host,
// which may be served under a path, with or without a trailing slash
// (kubectl accepts "https://api.example:6443/"; the joined "//apis/..."
// would be a 404 of the server's own).
func subresourceURL(host *url.URL, ns, name, sub string) *url.URL {
	return &url.URL{Scheme: host.Scheme, Host: host.Host, Path: strings.TrimSuffix(host.Path, "/") + subresourcePath(ns, name, sub)}
}

// restClient is a client for the relay's plain requests (logs, token)
// and the namespace the flags select.
func restClient(flags *genericclioptions.ConfigFlags) (*rest.RESTClient, string, error) {
	cfg, ns, err := target(flags)
	if err != nil {
		return nil, "", err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.UnversionedRESTClientFor(cfg)
	return rc, ns, err
}

func execCommand(flags *genericclioptions.ConfigFlags) *cobra.Command {
	var stdin, tty bool
	c := &cobra.Command{
		Use:   "exec SANDBOX [-i] [-t] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox",
		Example: `  kubectl openshell exec agent -- ls /sandbox
  kubectl openshell exec -it agent -- bash`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("name the sandbox, then the command after --: kubectl openshell exec SANDBOX -- COMMAND")
			}
			cfg, ns, err := target(flags)
			if err != nil {
				return err
			}
			return runExec(cmd.Context(), cfg, ns, args[0], args[1:], stdin, tty)
		},
	}
	c.Flags().BoolVarP(&stdin, "stdin", "i", false, "Pass stdin to the command")
	c.Flags().BoolVarP(&tty, "tty", "t", false, "Stdin is a TTY")
	return c
}

// newExecutor speaks WebSocket (v5.channel.k8s.io) first and SPDY where
// the upgrade is refused (an older relay, a proxy that drops WebSocket),
// as kubectl exec does: an idle WebSocket session costs the relay a
// fraction of an SPDY one's memory (docs/performance.md).
func newExecutor(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

func runExec(ctx context.Context, cfg *rest.Config, ns, name string, cmd []string, stdin, tty bool) error {
	host, err := url.Parse(cfg.Host)
	if err != nil {
		return err
	}
	in := os.Stdin
	if tty && (!stdin || !term.IsTerminal(int(in.Fd()))) {
		fmt.Fprintln(os.Stderr, "Unable to use a TTY - input is not a terminal or the right kind of file")
		tty = false
	}
	q := url.Values{"command": cmd, "stdout": {"true"}, "stderr": {strconv.FormatBool(!tty)},
		"stdin": {strconv.FormatBool(stdin)}, "tty": {strconv.FormatBool(tty)}}
	u := subresourceURL(host, ns, name, accessv1alpha1.SubresourceExec)
	u.RawQuery = q.Encode()
	ex, err := newExecutor(cfg, u)
	if err != nil {
		return err
	}
	opts := remotecommand.StreamOptions{Stdout: os.Stdout, Tty: tty}
	if stdin {
		opts.Stdin = in
	}
	if !tty {
		opts.Stderr = os.Stderr
		return ex.StreamWithContext(ctx, opts)
	}
	// A terminal: raw mode for the session, its size now and on every
	// SIGWINCH.
	old, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return err
	}
	defer func() { _ = term.Restore(int(in.Fd()), old) }()
	sizes := newSizeQueue(ctx, int(in.Fd()))
	opts.TerminalSizeQueue = sizes
	return ex.StreamWithContext(ctx, opts)
}

// sizeQueue reports the terminal's size at start and after each SIGWINCH.
type sizeQueue struct {
	ch chan remotecommand.TerminalSize
}

func newSizeQueue(ctx context.Context, fd int) *sizeQueue {
	q := &sizeQueue{ch: make(chan remotecommand.TerminalSize, 1)}
	send := func() {
		if w, h, err := term.GetSize(fd); err == nil {
			select {
			case q.ch <- remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}:
			default:
			}
		}
	}
	send()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(winch)
		for {
			select {
			case <-ctx.Done():
				close(q.ch)
				return
			case <-winch:
				send()
			}
		}
	}()
	return q
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q.ch
	if !ok {
		return nil
	}
	return &s
}

func logsCommand(flags *genericclioptions.ConfigFlags) *cobra.Command {
	var follow bool
	var tail int
	c := &cobra.Command{
		Use:     "logs SANDBOX [-f] [--tail=N]",
		Short:   "Print a sandbox's logs",
		Example: `  kubectl openshell logs -f agent`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rc, ns, err := restClient(flags)
			if err != nil {
				return err
			}
			req := rc.Get().AbsPath(subresourcePath(ns, args[0], accessv1alpha1.SubresourceLog)).Param("follow", strconv.FormatBool(follow))
			if tail >= 0 {
				req = req.Param("tailLines", strconv.Itoa(tail))
			}
			stream, err := req.Stream(cmd.Context())
			if err != nil {
				return err
			}
			defer stream.Close()
			_, err = io.Copy(os.Stdout, stream)
			if cmd.Context().Err() != nil {
				return nil // Ctrl-C ends a follow, as kubectl logs -f
			}
			return err
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "Keep printing new lines")
	c.Flags().IntVar(&tail, "tail", -1, "Lines of recent log to print (default: the relay's, 100)")
	return c
}

func tokenCommand(flags *genericclioptions.ConfigFlags) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "token SANDBOX [-o json|token]",
		Short: "Exchange your identity for a gateway token (SDK and CLI access to the sandbox's workspace)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rc, ns, err := restClient(flags)
			if err != nil {
				return err
			}
			b, err := rc.Post().AbsPath(subresourcePath(ns, args[0], accessv1alpha1.SubresourceToken)).DoRaw(cmd.Context())
			if err != nil {
				return err
			}
			if output == "token" {
				tok := &accessv1alpha1.SandboxToken{}
				if err := json.Unmarshal(b, tok); err != nil {
					return err
				}
				fmt.Println(tok.Token)
				return nil
			}
			_, err = os.Stdout.Write(append(b, '\n'))
			return err
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "json", "json (the SandboxToken) or token (the bearer token only)")
	return c
}

func portForwardCommand(flags *genericclioptions.ConfigFlags) *cobra.Command {
	var addresses []string
	c := &cobra.Command{
		Use:   "port-forward SANDBOX [LOCAL_PORT:]REMOTE_PORT...",
		Short: "Forward local ports to ports inside a sandbox",
		Example: `  kubectl openshell port-forward agent 8888:8888
  kubectl openshell port-forward agent :8080     # a free local port`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, ns, err := target(flags)
			if err != nil {
				return err
			}
			host, err := url.Parse(cfg.Host)
			if err != nil {
				return err
			}
			u := subresourceURL(host, ns, args[0], accessv1alpha1.SubresourcePortForward)
			transport, upgrader, err := spdy.RoundTripperFor(cfg)
			if err != nil {
				return err
			}
			dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
			ready := make(chan struct{})
			fw, err := portforward.NewOnAddresses(dialer, addresses, args[1:], cmd.Context().Done(), ready, os.Stdout, os.Stderr)
			if err != nil {
				return err
			}
			if err := fw.ForwardPorts(); err != nil && cmd.Context().Err() == nil {
				return err
			}
			return nil
		},
	}
	c.Flags().StringSliceVar(&addresses, "address", []string{"localhost"}, "Addresses to listen on (comma separated)")
	return c
}
