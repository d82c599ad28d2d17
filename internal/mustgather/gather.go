// Package mustgather collects what support needs to diagnose the operator
// across tenant namespaces, in the layout `oc adm must-gather` expects: every
// openshell.ai object, the Agent Sandbox objects, the operator's and the
// gateways' pods with their logs, the objects the operator created for its
// gateways, events where any of those live, the sandbox SCC, and the
// operator's RBAC and OLM objects. Secret values never leave the cluster:
// a Secret is written with its keys and sizes only.
//
// The operator image runs it as /usr/bin/gather (the CSV's
// operators.openshift.io/must-gather-image names the operator image), so
// there is no separate image to mirror. It is written against client-go's
// dynamic client rather than shelling out to `oc adm inspect`: the image
// is a single static binary without a shell.
package mustgather

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scc"
)

// Groups whose every served resource is collected in full.
var fullGroups = []string{"openshell.ai", "agents.x-k8s.io", "extensions.agents.x-k8s.io"}

const (
	// operatorName is the operator's app.kubernetes.io/name (its pods) and
	// the prefix of its OLM objects.
	operatorName       = "openshell-operator"
	defaultLogTailLine = 5000
)

// Options tune a collection.
type Options struct {
	// Dir receives the collection.
	Dir string
	// LogTailLines bounds each container log (default 5000).
	LogTailLines int64
}

// Gatherer collects from one cluster.
type Gatherer struct {
	dyn  dynamic.Interface
	disc discovery.DiscoveryInterface
	kube kubernetes.Interface
	opts Options
	// namespaces where something was collected; their events follow.
	namespaces map[string]bool
	// problems are collection errors, written to errors.txt: a partial
	// collection is still worth having.
	problems []string
}

// New builds a Gatherer for cfg.
func New(cfg *rest.Config, opts Options) (*Gatherer, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if opts.LogTailLines == 0 {
		opts.LogTailLines = defaultLogTailLine
	}
	return &Gatherer{dyn: dyn, disc: kube.Discovery(), kube: kube, opts: opts, namespaces: map[string]bool{}}, nil
}

// Run collects everything; it fails only when nothing can be written.
func (g *Gatherer) Run(ctx context.Context) error {
	if err := os.MkdirAll(g.opts.Dir, 0o755); err != nil {
		return err
	}
	for _, group := range fullGroups {
		g.collectGroup(ctx, group)
	}
	ours := metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedByValue}
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "services"}, {Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "serviceaccounts"},
		{Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "persistentvolumeclaims"},
		{Group: "apps", Version: "v1", Resource: "statefulsets"}, {Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}, {Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		{Group: "route.openshift.io", Version: "v1", Resource: "routes"},
		{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}, {Group: "cert-manager.io", Version: "v1", Resource: "issuers"},
		{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"},
		{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"},
	} {
		g.collect(ctx, gvr, ours)
	}
	// The operator's and the gateways' pods, with logs.
	for _, app := range []string{operatorName, render.AppName} {
		g.collectPods(ctx, metav1.ListOptions{LabelSelector: render.LabelName + "=" + app})
	}
	// Cluster-scoped context: the CRDs, the SCC, the operator's RBAC, OLM.
	g.collectNamed(ctx, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		func(name string) bool {
			return slices.ContainsFunc(fullGroups, func(grp string) bool { return strings.HasSuffix(name, "."+grp) })
		})
	g.collectNamed(ctx, schema.GroupVersionResource{Group: "security.openshift.io", Version: "v1", Resource: "securitycontextconstraints"},
		func(name string) bool { return name == scc.Name })
	for _, res := range []string{"clusterroles", "clusterrolebindings"} {
		g.collectNamed(ctx, schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: res},
			func(name string) bool { return strings.Contains(name, "openshell") })
	}
	olm := func(version, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "operators.coreos.com", Version: version, Resource: resource}
	}
	isOurs := func(name string) bool { return strings.HasPrefix(name, operatorName) }
	g.collectNamed(ctx, olm("v1alpha1", "clusterserviceversions"), isOurs)
	g.collectNamed(ctx, olm("v1alpha1", "subscriptions"), isOurs)
	g.collectNamed(ctx, olm("v1alpha1", "installplans"), func(string) bool { return true })
	g.collectNamed(ctx, olm("v1", "operatorgroups"), func(string) bool { return true })
	g.collectNamed(ctx, olm("v2", "operatorconditions"), isOurs)
	g.collectEvents(ctx)
	return g.writeProblems()
}

// collectGroup collects every served resource of group, all namespaces.
func (g *Gatherer) collectGroup(ctx context.Context, group string) {
	groups, err := g.disc.ServerGroups()
	if err != nil {
		g.problem("discover API groups: %v", err)
		return
	}
	for _, grp := range groups.Groups {
		if grp.Name != group {
			continue
		}
		list, err := g.disc.ServerResourcesForGroupVersion(grp.PreferredVersion.GroupVersion)
		if err != nil {
			g.problem("discover %s: %v", grp.PreferredVersion.GroupVersion, err)
			return
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			g.collect(ctx, schema.GroupVersionResource{Group: group, Version: grp.PreferredVersion.Version, Resource: r.Name}, metav1.ListOptions{})
		}
	}
}

// collect lists gvr in every namespace with opts and writes each object.
func (g *Gatherer) collect(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) {
	list, err := g.dyn.Resource(gvr).List(ctx, opts)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			g.problem("list %s: %v", gvr, err)
		}
		return
	}
	for i := range list.Items {
		g.write(gvr, &list.Items[i])
	}
}

// collectNamed writes the objects of gvr whose names keep accepts.
func (g *Gatherer) collectNamed(ctx context.Context, gvr schema.GroupVersionResource, keep func(string) bool) {
	list, err := g.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			g.problem("list %s: %v", gvr, err)
		}
		return
	}
	for i := range list.Items {
		if keep(list.Items[i].GetName()) {
			g.write(gvr, &list.Items[i])
		}
	}
}

func (g *Gatherer) collectPods(ctx context.Context, opts metav1.ListOptions) {
	pods, err := g.kube.CoreV1().Pods("").List(ctx, opts)
	if err != nil {
		g.problem("list pods %s: %v", opts.LabelSelector, err)
		return
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	for i := range pods.Items {
		p := &pods.Items[i]
		u, err := toUnstructured(p)
		if err != nil {
			g.problem("pod %s/%s: %v", p.Namespace, p.Name, err)
			continue
		}
		g.write(gvr, u)
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			g.collectLog(ctx, p, c.Name)
		}
	}
}

func (g *Gatherer) collectLog(ctx context.Context, p *corev1.Pod, container string) {
	dir := filepath.Join(g.opts.Dir, "namespaces", p.Namespace, "pods", p.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		g.problem("%v", err)
		return
	}
	tail := g.opts.LogTailLines
	rc, err := g.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, TailLines: &tail}).Stream(ctx)
	if err != nil {
		g.problem("logs of %s/%s container %s: %v", p.Namespace, p.Name, container, err)
		return
	}
	defer func() { _ = rc.Close() }()
	f, err := os.Create(filepath.Join(dir, container+".log"))
	if err != nil {
		g.problem("%v", err)
		return
	}
	defer func() { _ = f.Close() }()
	if _, err := io.Copy(f, rc); err != nil {
		g.problem("logs of %s/%s container %s: %v", p.Namespace, p.Name, container, err)
	}
}

// collectEvents writes the events of every namespace something came from.
func (g *Gatherer) collectEvents(ctx context.Context) {
	names := make([]string, 0, len(g.namespaces))
	for ns := range g.namespaces {
		names = append(names, ns)
	}
	sort.Strings(names)
	for _, ns := range names {
		evs, err := g.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			g.problem("list events in %s: %v", ns, err)
			continue
		}
		b, err := yaml.Marshal(evs)
		if err != nil {
			g.problem("events in %s: %v", ns, err)
			continue
		}
		if err := writeFile(filepath.Join(g.opts.Dir, "namespaces", ns, "core", "events.yaml"), b); err != nil {
			g.problem("%v", err)
		}
	}
}

// write stores one object as YAML, with Secret values redacted.
func (g *Gatherer) write(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	Redact(u)
	group := gvr.Group
	if group == "" {
		group = "core"
	}
	var p string
	if ns := u.GetNamespace(); ns != "" {
		g.namespaces[ns] = true
		p = filepath.Join(g.opts.Dir, "namespaces", ns, group, gvr.Resource, u.GetName()+".yaml")
	} else {
		p = filepath.Join(g.opts.Dir, "cluster-scoped-resources", group, gvr.Resource, u.GetName()+".yaml")
	}
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		g.problem("%s %s: %v", gvr, u.GetName(), err)
		return
	}
	if err := writeFile(p, b); err != nil {
		g.problem("%v", err)
	}
}

// Redact removes what could carry secret values: a Secret's data (keys and
// sizes stay, for diagnosing missing keys) and, on any object, the
// last-applied-configuration annotation and managed fields.
func Redact(u *unstructured.Unstructured) {
	u.SetManagedFields(nil)
	if a := u.GetAnnotations(); a != nil {
		delete(a, corev1.LastAppliedConfigAnnotation)
		u.SetAnnotations(a)
	}
	if u.GetKind() != "Secret" {
		return
	}
	for _, field := range []string{"data", "stringData"} {
		m, ok := u.Object[field].(map[string]any)
		if !ok {
			continue
		}
		for k, v := range m {
			s, _ := v.(string)
			m[k] = fmt.Sprintf("<redacted: %d characters>", len(s))
		}
	}
}

func toUnstructured(p *corev1.Pod) (*unstructured.Unstructured, error) {
	b, err := yaml.Marshal(p)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		return nil, err
	}
	u.SetAPIVersion("v1")
	u.SetKind("Pod")
	return u, nil
}

func writeFile(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

func (g *Gatherer) problem(format string, args ...any) {
	g.problems = append(g.problems, fmt.Sprintf(format, args...))
}

// writeProblems records what could not be collected; nothing at all
// written is an error.
func (g *Gatherer) writeProblems() error {
	if len(g.problems) == 0 {
		return nil
	}
	if err := writeFile(filepath.Join(g.opts.Dir, "errors.txt"), []byte(strings.Join(g.problems, "\n")+"\n")); err != nil {
		return errors.Join(append([]error{err}, errors.New(strings.Join(g.problems, "; ")))...)
	}
	return nil
}
