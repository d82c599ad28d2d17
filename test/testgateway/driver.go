package testgateway

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/test/sandboxpod"
)

// Labels the gateway's Kubernetes driver puts on the agents.x-k8s.io
// Sandbox CRs it creates (ID, name and workspace also as annotations). The
// operator's sandbox controller waits on LabelSandboxID before it releases
// a deleted OpenShellSandbox.
const (
	LabelSandboxID        = "openshell.ai/sandbox-id"
	LabelSandboxName      = "openshell.ai/sandbox-name"
	LabelSandboxWorkspace = "openshell.ai/sandbox-workspace"
	LabelManagedBy        = "openshell.ai/managed-by"
	LabelGatewayID        = "openshell.ai/gateway-id"
)

// transient are the Ready=False reasons (lower-cased) the gateway reads as
// "still starting": the sandbox stays PROVISIONING. Any other Ready=False
// reason makes it ERROR.
var transient = map[string]bool{
	"reconcilererror": true, "dependenciesnotready": true, "supervisornotconnected": true, "starting": true,
	"containerstarting": true, "containercreated": true, "healthcheckstarting": true, "inspectfailed": true,
}

type driver struct {
	g   *Gateway
	gvk schema.GroupVersionKind
	// ctx is the gateway's life: work that outlives a request (the 0.1
	// bootstrap) ends with it.
	ctx context.Context
}

// newDriver probes v1beta1 then v1alpha1 (cached for the process, as the
// gateway does) and starts watching its Sandbox CRs.
func newDriver(ctx context.Context, g *Gateway) (*driver, error) {
	d := &driver{g: g, ctx: ctx}
	for _, v := range []string{"v1beta1", "v1alpha1"} {
		gvk := schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: v, Kind: "Sandbox"}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		err := g.opts.Kube.List(ctx, list, client.InNamespace(g.opts.Namespace), client.Limit(1))
		if err == nil {
			d.gvk = gvk
			break
		}
		if !apierrors.IsNotFound(err) && !strings.Contains(err.Error(), "no matches for kind") {
			return nil, fmt.Errorf("probe agents.x-k8s.io/%s: %w", v, err)
		}
	}
	if d.gvk.Empty() {
		return nil, fmt.Errorf("neither agents.x-k8s.io/v1beta1 nor v1alpha1 Sandbox is served")
	}
	go d.watch(ctx)
	return d, nil
}

// watchNamespace is where the driver follows its Sandboxes: its own
// namespace in shared mode; in every other mode, as the 0.1 driver does,
// all of them (by its labels).
func (d *driver) watchNamespace() string {
	if d.g.opts.WorkspaceMode == WorkspaceModeOperator {
		return ""
	}
	return d.g.opts.Namespace
}

func (d *driver) selector() client.MatchingLabels {
	return client.MatchingLabels{LabelManagedBy: "openshell", LabelGatewayID: d.g.opts.GatewayID}
}

// SandboxCR is what the compute driver puts into an agents.x-k8s.io
// Sandbox besides its pod.
type SandboxCR struct {
	Name, Namespace, GatewayID        string
	SandboxID, SandboxName, Workspace string
	TemplateLabels                    map[string]string
	// TemplateAnnotations go onto the pod, with the gateway's sandbox-id
	// annotation always its own.
	TemplateAnnotations map[string]string
	Pod                 corev1.PodSpec
}

// RenderSandbox is the Sandbox CR of the given served version, labelled
// and annotated as the driver does. The benchmark creates the
// same object directly as its floor.
func RenderSandbox(gvk schema.GroupVersionKind, in SandboxCR) (*unstructured.Unstructured, error) {
	podMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&in.Pod)
	if err != nil {
		return nil, err
	}
	labels := map[string]any{LabelSandboxID: in.SandboxID, LabelSandboxName: in.SandboxName,
		LabelSandboxWorkspace: in.Workspace, LabelManagedBy: "openshell", LabelGatewayID: in.GatewayID}
	tmplLabels := map[string]any{}
	for k, v := range in.TemplateLabels {
		tmplLabels[k] = v
	}
	tmplAnnotations := map[string]any{}
	for k, v := range in.TemplateAnnotations {
		tmplAnnotations[k] = v
	}
	tmplAnnotations["openshell.io/sandbox-id"] = in.SandboxID
	cr := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": in.Name, "namespace": in.Namespace, "labels": labels,
			"annotations": map[string]any{LabelSandboxID: in.SandboxID, LabelSandboxName: in.SandboxName, LabelSandboxWorkspace: in.Workspace}},
		"spec": map[string]any{"podTemplate": map[string]any{
			"metadata": map[string]any{"labels": tmplLabels, "annotations": tmplAnnotations},
			"spec":     podMap,
		}},
	}}
	cr.SetGroupVersionKind(gvk)
	if gvk.Version == "v1alpha1" {
		_ = unstructured.SetNestedField(cr.Object, int64(1), "spec", "replicas")
	}
	return cr, nil
}

// create renders the sandbox's runtime: while the gateway speaks 0.1, the
// two-pod runtime (runtime01.go); before, the sidecar-topology pod in an
// agents.x-k8s.io Sandbox.
func (d *driver) create(ctx context.Context, row *sandboxRow, sb *openshellv1.Sandbox) error {
	if d.g.line() == gatewayline.V01 {
		return d.create01(ctx, row, sb)
	}
	o := d.g.opts
	env := map[string]string{}
	for k, v := range sb.Spec.Environment {
		env[k] = v
	}
	pod := sandboxpod.Sidecar(sandboxpod.Inputs{
		ServiceAccount: o.ServiceAccount, AgentImage: sb.Spec.Template.Image, SupervisorImage: o.SupervisorImage,
		ClientTLSSecret: o.ClientTLSSecret, SandboxID: sb.Metadata.Id, SandboxName: sb.Metadata.Name,
		GRPCEndpoint: d.g.Endpoint(), BinaryAware: true, Env: env,
	})
	if gpu := sb.Spec.GetResourceRequirements().GetGpu(); gpu != nil {
		n := int64(1)
		if gpu.Count != nil {
			n = int64(*gpu.Count)
		}
		pod.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": *resourceQuantity(n)}
	}
	// The template's RuntimeClass goes onto the pod (the gateway's
	// precedence: template, driver_config, its own default).
	if rc := sb.Spec.GetTemplate().GetRuntimeClassName(); rc != "" {
		pod.RuntimeClassName = &rc
	}
	cr, err := RenderSandbox(d.gvk, SandboxCR{Name: row.crName, Namespace: row.ns, GatewayID: o.GatewayID,
		SandboxID: sb.Metadata.Id, SandboxName: sb.Metadata.Name, Workspace: sb.Metadata.Workspace,
		TemplateLabels: sb.Spec.Template.Labels, TemplateAnnotations: sb.Spec.Template.Annotations, Pod: pod})
	if err != nil {
		return err
	}
	err = o.Kube.Create(ctx, cr)
	if apierrors.IsAlreadyExists(err) && d.replaceStale(ctx, cr) {
		err = o.Kube.Create(ctx, cr)
	}
	if apierrors.IsAlreadyExists(err) {
		return status.Error(codes.AlreadyExists, "sandbox already exists")
	}
	return err
}

// replaceStale deletes the Sandbox of cr's name when it is a sandbox this
// gateway's database does not know (its row was lost with the database)
// and reports whether it did. What a real 0.1 gateway does with such
// runtime objects is not established (docs/real-components.md); a driver
// that owns the sandbox namespace replacing its own stale object is the
// reading this plays.
func (d *driver) replaceStale(ctx context.Context, cr *unstructured.Unstructured) bool {
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(d.gvk)
	if err := d.g.opts.Kube.Get(ctx, client.ObjectKeyFromObject(cr), cur); err != nil {
		return false
	}
	id := cur.GetLabels()[LabelSandboxID]
	d.g.mu.Lock()
	_, known := d.g.byID[id]
	d.g.mu.Unlock()
	if known || cur.GetLabels()[LabelGatewayID] != d.g.opts.GatewayID {
		return false
	}
	return d.g.opts.Kube.Delete(ctx, cur, client.Preconditions{UID: ptr.To(cur.GetUID())}) == nil
}

// delete removes the CR; false means it was already gone.
func (d *driver) delete(ctx context.Context, row *sandboxRow) (bool, error) {
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(d.gvk)
	cr.SetNamespace(row.ns)
	cr.SetName(row.crName)
	err := d.g.opts.Kube.Delete(ctx, cr)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// watch follows the CRs and maps them onto rows with an informer: a list,
// a watch from the list's resource version, and a new list whenever the
// watch breaks (the API server closed it, or the connection dropped under
// load). A CR deleted while no watch ran is missing from that list and is
// delivered as a deletion; a watch merely started again from "now" would
// never tell, and the row would stay DELETING (or READY) for good. The
// real gateway's periodic sweep removes such a row once its CR is missing
// from the driver's snapshot (docs: "Watch and status mapping"); the
// informer reaches that end state without the sweep's grace.
func (d *driver) watch(ctx context.Context) {
	sel := labels.SelectorFromSet(labels.Set(d.selector()))
	// The informer's options, within the driver's namespace and selector.
	scoped := func(opts *metav1.ListOptions) (*unstructured.UnstructuredList, *client.ListOptions) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(d.gvk)
		return list, &client.ListOptions{Namespace: d.watchNamespace(), LabelSelector: sel, Limit: opts.Limit, Continue: opts.Continue, Raw: opts}
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, o := scoped(&opts)
			return list, d.g.opts.Kube.List(ctx, list, o)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			list, o := scoped(&opts)
			return d.g.opts.Kube.Watch(ctx, list, o)
		},
	}
	example := &unstructured.Unstructured{}
	example.SetGroupVersionKind(d.gvk)
	inf := toolscache.NewSharedIndexInformer(lw, example, 0, toolscache.Indexers{})
	on := func(t watch.EventType) func(any) {
		return func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj // deleted while no watch ran: its last known state
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				d.apply(t, u)
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    on(watch.Added),
		UpdateFunc: func(_, obj any) { on(watch.Modified)(obj) },
		DeleteFunc: on(watch.Deleted),
	}); err != nil {
		return // only when the informer already stopped
	}
	inf.RunWithContext(ctx)
}

func (d *driver) apply(t watch.EventType, u *unstructured.Unstructured) {
	id := u.GetLabels()[LabelSandboxID]
	d.g.mu.Lock()
	row, ok := d.g.byID[id]
	d.g.mu.Unlock()
	if !ok {
		return
	}
	if t == watch.Deleted {
		d.g.mu.Lock()
		delaying := d.g.delaying
		if delaying {
			d.g.unnoticed = append(d.g.unnoticed, row)
		}
		d.g.mu.Unlock()
		if !delaying {
			d.g.remove(row)
		}
		return
	}
	phase, conds := derivePhase(u)
	d.g.mu.Lock()
	defer d.g.mu.Unlock()
	if row.deleting {
		phase = openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING
	}
	if rt := row.runtime; rt != nil && rt.holding && phase != openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING {
		// Until the bootstrap is done the Sandbox passes through states
		// (suspended, a pod of an earlier Sandbox of its name still
		// going) that are not the sandbox's: it is provisioning, and
		// fails only if the bootstrap does.
		phase = openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING
	}
	if row.sb.Status.Phase == openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR || (row.sb.Status.ExitCode != nil && !row.deleting) {
		phase = row.sb.Status.Phase // ERROR is sticky, and so is an exited agent's phase
	}
	if rt := row.runtime; rt != nil && rt.failure != nil {
		conds = append(conds, rt.failure) // and so is a failed bootstrap's reason
	}
	switch row.transition {
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING:
		if phase != openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED {
			phase = row.transition
		} else {
			row.transition = openshellv1.SandboxPhase_SANDBOX_PHASE_UNSPECIFIED
		}
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING:
		if phase != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
			phase = row.transition
		} else {
			row.transition = openshellv1.SandboxPhase_SANDBOX_PHASE_UNSPECIFIED
		}
	}
	if row.sb.Status.Phase == phase && len(row.sb.Status.Conditions) == len(conds) {
		return
	}
	row.sb.Status.Phase = phase
	row.sb.Status.Conditions = conds
	row.sb.Status.SandboxName = u.GetName()
	row.sb.Metadata.ResourceVersion++
	d.g.notify(id)
	d.g.supervise(row)
}

// derivePhase maps the CR to the gateway's public phase: a deletion
// timestamp is DELETING, Suspended=True is STOPPED, Ready=True is READY,
// Ready=False is PROVISIONING for a transient reason and ERROR otherwise.
// The test gateway treats the supervisor as connected once the pod is
// Ready.
func derivePhase(u *unstructured.Unstructured) (openshellv1.SandboxPhase, []*openshellv1.SandboxCondition) {
	if u.GetDeletionTimestamp() != nil {
		return openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING, nil
	}
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var conds []*openshellv1.SandboxCondition
	phase := openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING
	readySeen := false
	for _, c := range raw {
		m, _ := c.(map[string]any)
		typ, _ := m["type"].(string)
		st, _ := m["status"].(string)
		reason, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		conds = append(conds, &openshellv1.SandboxCondition{Type: typ, Status: st, Reason: reason, Message: msg})
		switch {
		case typ == "Suspended" && st == string(metav1.ConditionTrue):
			return openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED, conds
		case typ == "Ready" && !readySeen:
			readySeen = true
			if st == string(metav1.ConditionTrue) {
				phase = openshellv1.SandboxPhase_SANDBOX_PHASE_READY
			} else if st == string(metav1.ConditionFalse) && !transient[strings.ToLower(reason)] {
				phase = openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR
			}
		}
	}
	return phase, conds
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
