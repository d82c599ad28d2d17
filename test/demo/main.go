// Command demo is `make demo`: it starts a local cluster (kube-apiserver,
// etcd, controller-manager, scheduler, kwok and the real Agent Sandbox
// controller), runs the operator and a test gateway registered as an
// External OpenShellGateway, applies the samples in a tenant namespace (a
// policy, a provider profile and a provider with its Secret, an image
// allowlist, one sandbox that runs and one whose image is not mirrored), prints their status, starts
// the relay and runs a command in the sandbox as a Sandbox Consumer through
// the Kubernetes API, and keeps running with the kubeconfig path printed
// until interrupted. DEMO_EXIT=1 exits after printing (CI).
package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

const (
	gatewayNS = "openshell-system"
	sandboxNS = "openshell-sandboxes"
	tenantNS  = "team-a"
	// sandboxName is the sample sandbox's; consumer uses it.
	sandboxName = "claude-agent"
	consumer    = "dave"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func run() error {
	framework.SetupLogging()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()

	step("Starting a local cluster: kube-apiserver, etcd, controller-manager, scheduler, kwok, Agent Sandbox controller")
	// With a front proxy: consumers reach the relay's aggregated API through it.
	cluster, err := framework.StartCluster(ctx, framework.ClusterOptions{EnvOptions: framework.EnvOptions{AgentSandbox: framework.AgentSandboxBetaOnly,
		FrontProxy: true}})
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping the cluster")
		_ = cluster.Stop()
	}()
	c := cluster.Client
	for _, ns := range []string{gatewayNS, sandboxNS, tenantNS} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}

	step("Starting the operator (with its OIDC issuer) and a test OpenShell gateway playing %s", gatewayline.DefaultManaged)
	// The release a Managed gateway runs by default: the operator reads it
	// from the gateway's Health and speaks its (0.1) wire.
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gatewayNS, SandboxNamespace: sandboxNS,
		GatewayVersion: gatewayline.DefaultManaged,
		ImagePolicy:    openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyEnforce, WhenNoPolicy: openshellv1alpha1.NoPolicyDeny}})
	if err != nil {
		return err
	}
	defer func() { _ = st.Stop() }()

	step("Applying the samples in namespace %s", tenantNS)
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "anthropic-credentials", Namespace: tenantNS},
		StringData: map[string]string{"ANTHROPIC_API_KEY": "sk-demo-not-a-real-key"}}); err != nil {
		return err
	}
	for _, s := range []struct {
		file string
		obj  client.Object
	}{
		{"openshell_v1alpha1_openshellpolicy.yaml", &openshellv1alpha1.OpenShellPolicy{}},
		// A 0.1 gateway ships no provider profiles: the provider's type
		// (claude-code) means nothing there until its profile is imported.
		{"openshell_v1alpha1_openshellproviderprofile.yaml", &openshellv1alpha1.OpenShellProviderProfile{}},
		{"openshell_v1alpha1_openshellprovider.yaml", &openshellv1alpha1.OpenShellProvider{}},
		{"openshell_v1alpha1_openshellimagepolicy.yaml", &openshellv1alpha1.OpenShellImagePolicy{}},
		{"openshell_v1alpha1_openshellsandbox.yaml", &openshellv1alpha1.OpenShellSandbox{}},
	} {
		if err := apply(ctx, c, s.file, s.obj); err != nil {
			return err
		}
		fmt.Printf("    %s/%s created\n", strings.TrimPrefix(fmt.Sprintf("%T", s.obj), "*v1alpha1."), s.obj.GetName())
	}
	rejected := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "unmirrored-agent", Namespace: tenantNS},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "openshell", Namespace: gatewayNS},
			Image: "docker.io/library/ubuntu:latest"}}
	if err := c.Create(ctx, rejected); err != nil {
		return err
	}
	fmt.Printf("    OpenShellSandbox/%s created (image not mirrored)\n", rejected.Name)

	step("Waiting for the sandboxes to settle")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err = framework.WaitFor(wctx, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		list := &openshellv1alpha1.OpenShellSandboxList{}
		if err := c.List(ctx, list, client.InNamespace(tenantNS)); err != nil {
			return false, err
		}
		settled := 0
		for _, s := range list.Items {
			if s.Status.Phase == openshellv1alpha1.SandboxPhaseReady || s.Status.Phase == openshellv1alpha1.SandboxPhaseRejected {
				settled++
			}
		}
		return settled == len(list.Items) && settled == 2, nil
	})
	if err := printStatus(ctx, c); err != nil {
		return err
	}
	if err != nil {
		return fmt.Errorf("sandboxes did not settle: %w", err)
	}

	step("Starting the relay; %s (role openshell-sandbox-user in %s) runs a command in %s through the Kubernetes API", consumer, tenantNS, sandboxName)
	r, err := st.StartRelay(ctx, cluster.Config, gatewayNS, logr.Discard())
	if err != nil {
		return err
	}
	defer func() { _ = r.Stop(context.Background(), c) }()
	if err := consumerExec(ctx, cluster, "echo", "hello from", sandboxName); err != nil {
		return err
	}
	fmt.Printf("\nDemo ready in %s.\n", time.Since(start).Round(time.Second))

	if os.Getenv("DEMO_EXIT") != "" {
		return nil
	}
	fmt.Printf("\nThe cluster keeps running. In another terminal:\n\n    export KUBECONFIG=%s\n    kubectl get openshell -A\n    kubectl -n %s get sandboxes.agents.x-k8s.io,pods\n"+
		"    go run ./cmd/kubectl-openshell exec -n %s %s --as=%s -- echo hi    # as kubectl openshell, with %s's RBAC\n\nPress Ctrl-C to stop.\n",
		cluster.KubeconfigPath, sandboxNS, tenantNS, sandboxName, consumer, consumer)
	<-ctx.Done()
	return nil
}

// consumerExec binds the consumer to openshell-sandbox-user in the tenant
// namespace (the roles config/tenancy ships) and runs cmd in the sample
// sandbox as them, through the relay's exec subresource, as kubectl
// openshell exec does; it prints what ran and its output.
func consumerExec(ctx context.Context, cluster *framework.Cluster, cmd ...string) error {
	c := cluster.Client
	if err := framework.ApplyManifests(ctx, c, filepath.Join(framework.RepoRoot(), "config", "tenancy", "openshell_sandbox_user_role.yaml")); err != nil {
		return err
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: consumer + "-sandbox-user", Namespace: tenantNS},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: consumer}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "openshell-sandbox-user"}}); err != nil {
		return err
	}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: consumer, Groups: []string{"system:authenticated"}}
	u, err := framework.ExecURL(cfg, tenantNS, sandboxName, false, false, cmd)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The API server authorizes from its informers: the new binding may
	// take a moment to count. Stdout and stderr each have a buffer of
	// their own: the client copies them concurrently, and a bytes.Buffer
	// is not safe for that (sharing one lost the output of one exec in
	// three).
	var last error
	var errOut bytes.Buffer
	err = framework.WaitFor(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
		if err != nil {
			return false, err
		}
		out.Reset()
		errOut.Reset()
		last = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%s's exec in %s: %w (last: %v, stderr %q)", consumer, sandboxName, err, last, errOut.String())
	}
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Println()
	fmt.Fprintln(w, "CONSUMER\tCOMMAND (kubectl openshell exec, through the Kubernetes API)\tOUTPUT")
	fmt.Fprintf(w, "%s\t%s\t%s\n", consumer, strings.Join(cmd, " "), strings.TrimSpace(out.String()))
	return w.Flush()
}

func apply(ctx context.Context, c client.Client, file string, obj client.Object) error {
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config", "samples", file))
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	obj.SetNamespace(tenantNS)
	if sb, ok := obj.(*openshellv1alpha1.OpenShellSandbox); ok {
		sb.Spec.GatewayRef = openshellv1alpha1.GatewayReference{Name: "openshell", Namespace: gatewayNS}
	}
	return c.Create(ctx, obj)
}

func printStatus(ctx context.Context, c client.Client) error {
	gws := &openshellv1alpha1.OpenShellGatewayList{}
	if err := c.List(ctx, gws); err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Println()
	fmt.Fprintln(w, "GATEWAY\tMODE\tPHASE\tVERSION\tENDPOINT")
	for _, g := range gws.Items {
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t%s\n", g.Namespace, g.Name, g.Spec.Mode, g.Status.Phase, g.Status.Version, g.Status.Endpoint)
	}
	_ = w.Flush()
	fmt.Println()
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := c.List(ctx, list, client.InNamespace(tenantNS)); err != nil {
		return err
	}
	fmt.Fprintln(w, "SANDBOX\tPHASE\tSANDBOX ID\tAGENT SANDBOX\tREASON\tMESSAGE")
	for _, s := range list.Items {
		reason, msg := "", ""
		if cnd := meta.FindStatusCondition(s.Status.Conditions, openshellv1alpha1.ConditionReady); cnd != nil {
			reason, msg = cnd.Reason, cnd.Message
		}
		if s.Status.Phase == openshellv1alpha1.SandboxPhaseRejected {
			if cnd := meta.FindStatusCondition(s.Status.Conditions, openshellv1alpha1.ConditionAccepted); cnd != nil {
				reason, msg = cnd.Reason, cnd.Message
			}
		}
		agent := ""
		if s.Status.AgentSandbox != nil {
			agent = strings.TrimPrefix(s.Status.AgentSandbox.Namespace+"/"+s.Status.AgentSandbox.Name, "/")
		}
		if len(msg) > 110 {
			msg = msg[:107] + "..."
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Status.Phase, s.Status.SandboxID, agent, reason, msg)
	}
	_ = w.Flush()
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(sandboxNS)); err != nil {
		return err
	}
	fmt.Println()
	fmt.Fprintln(w, "POD\tNODE\tPHASE\tCONTAINERS")
	for _, p := range pods.Items {
		var names []string
		for _, ct := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			names = append(names, ct.Name)
		}
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, strings.Join(names, ","))
	}
	return w.Flush()
}
