package testgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
)

// The 0.1 runtime (docs/real-components.md; reference openshell-0.1.md §3),
// played for every sandbox created while the gateway speaks 0.1: per
// namespace, the two NetworkPolicies of the fence; per sandbox, an
// agents.x-k8s.io Sandbox created suspended whose template is the
// capability-free workload Pod, a boundary Service, a supervisor Pod, and
// one bootstrap Secret for each Pod. Both Pods wait behind a scheduling
// gate until their Secrets exist. Every object is created with the
// gateway's own Kubernetes credentials, so a test that gives it only the
// RBAC the operator grants a gateway shows that RBAC sufficient for this
// model of the runtime (where it is simpler than the release's driver:
// docs/real-components.md).
const (
	FenceWorkloads    = "openshell-sandbox-workloads"
	FenceSupervisors  = "openshell-sandbox-supervisors"
	BootstrapGate     = "openshell.ai/bootstrap"
	LabelBoundaryRole = "openshell.ai/boundary-role"
	LabelBoundaryPair = "openshell.ai/boundary-pair"
	LabelComponent    = "openshell.ai/component"
	boundaryPort      = 5500
	// defaultSandboxUID is the driver's UID outside OpenShift (no
	// openshift.io/sa.scc.uid-range on the namespace).
	defaultSandboxUID  = 10001
	annotationUIDRange = "openshift.io/sa.scc.uid-range"
)

// runtime01 is what the driver keeps of a sandbox's 0.1 runtime.
type runtime01 struct {
	uid        int64
	generation int
	crUID      types.UID
	// holding is set from a generation's start until its bootstrap
	// Secrets exist and its gates are being cleared: meanwhile the sandbox
	// is PROVISIONING, whatever its (first suspended) Sandbox says.
	holding bool
	// running is set once a generation has been started (its supervisor
	// Pod created and its Sandbox released) and cleared by a stop: a
	// second start of a running sandbox starts nothing.
	running bool
	// failure is the condition a failed bootstrap left; the phase ERROR
	// is sticky, and so is the reason, whatever the Sandbox reports next.
	failure *openshellv1.SandboxCondition
}

// SupervisorPodName and the other names are the runtime's, by sandbox ID.
func SupervisorPodName(id string) string   { return "os-supervisor-" + strings.ToLower(id) }
func boundaryServiceName(id string) string { return "os-boundary-" + strings.ToLower(id) }
func generationSuffix(gen int) string      { return fmt.Sprintf("%012d", gen) }
func workloadSecretName(id string, gen int) string {
	return "os-sandbox-" + strings.ToLower(id) + "-" + generationSuffix(gen)
}
func supervisorSecretName(id string, gen int) string {
	return "os-supervisor-" + strings.ToLower(id) + "-" + generationSuffix(gen)
}

// create01 provisions a sandbox's 0.1 runtime, in the driver's order, up
// to the release of the suspended Sandbox; the bootstrap (Secrets, gates)
// follows in the background, as the workload Pod appears.
func (d *driver) create01(ctx context.Context, row *sandboxRow, sb *openshellv1.Sandbox) error {
	if err := d.ensureFence(ctx, row.ns); err != nil {
		return err
	}
	uid, err := d.sandboxUID(ctx, row.ns)
	if err != nil {
		return err
	}
	rt := &runtime01{uid: uid, generation: 1, holding: true, running: true}
	cr, err := d.renderSandbox01(row, sb, rt, false)
	if err != nil {
		return err
	}
	d.g.mu.Lock()
	row.runtime = rt
	d.g.mu.Unlock()
	err = d.g.opts.Kube.Create(ctx, cr)
	if apierrors.IsAlreadyExists(err) && d.replaceStale(ctx, cr) {
		err = d.g.opts.Kube.Create(ctx, cr)
	}
	if err != nil {
		return d.driverError(err)
	}
	d.g.mu.Lock()
	rt.crUID = cr.GetUID()
	d.g.mu.Unlock()
	id := sb.Metadata.Id
	if err := d.g.opts.Kube.Create(ctx, d.boundaryService(id, row.ns, row.crName, rt)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the boundary Service: %w", err)
	}
	if err := d.g.opts.Kube.Create(ctx, d.supervisorPod(sb, row, rt)); err != nil {
		return fmt.Errorf("create the supervisor Pod: %w", err)
	}
	if err := d.patchSandbox(ctx, row.ns, row.crName, map[string]any{"operatingMode": "Running"}); err != nil {
		return fmt.Errorf("release the Sandbox: %w", err)
	}
	go d.bootstrap(row, rt.generation)
	return nil
}

// driverError is the gRPC error of a failed create of the runtime object.
func (d *driver) driverError(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return status.Error(codes.AlreadyExists, "sandbox already exists")
	}
	return err
}

// ensureFence creates or validates the namespace's two NetworkPolicies:
// workloads reach nothing and are reached only by supervisors on the
// boundary port; supervisors may reach anything.
func (d *driver) ensureFence(ctx context.Context, ns string) error {
	for _, np := range []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: FenceWorkloads, Namespace: ns,
			Labels: map[string]string{LabelManagedBy: "openshell", LabelComponent: "sandbox-workload-fence"}},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelBoundaryRole: "workload"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelBoundaryRole: "supervisor"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(boundaryPort))}},
				}},
				Egress: []networkingv1.NetworkPolicyEgressRule{},
			}},
		{ObjectMeta: metav1.ObjectMeta{Name: FenceSupervisors, Namespace: ns,
			Labels: map[string]string{LabelManagedBy: "openshell", LabelComponent: "sandbox-supervisor-egress"}},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelBoundaryRole: "supervisor"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
			}},
	} {
		cur := &networkingv1.NetworkPolicy{}
		err := d.g.opts.Kube.Get(ctx, client.ObjectKeyFromObject(np), cur)
		if apierrors.IsNotFound(err) {
			err = d.g.opts.Kube.Create(ctx, np)
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
		}
		if err != nil {
			return fmt.Errorf("ensure NetworkPolicy %s: %w", np.Name, err)
		}
	}
	return nil
}

// sandboxUID is the UID both Pods run as: the start of the namespace's
// OpenShift UID range, else the driver's default.
func (d *driver) sandboxUID(ctx context.Context, name string) (int64, error) {
	ns := &corev1.Namespace{}
	if err := d.g.opts.Kube.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return 0, fmt.Errorf("read namespace %s for its UID range: %w", name, err)
	}
	if r := ns.Annotations[annotationUIDRange]; r != "" {
		start, _, _ := strings.Cut(r, "/")
		if uid, err := strconv.ParseInt(start, 10, 64); err == nil && uid > 0 {
			return uid, nil
		}
	}
	return defaultSandboxUID, nil
}

// renderSandbox01 is the Sandbox whose template is the workload Pod of
// rt's generation, suspended or running.
func (d *driver) renderSandbox01(row *sandboxRow, sb *openshellv1.Sandbox, rt *runtime01, running bool) (*unstructured.Unstructured, error) {
	o := d.g.opts
	labels := map[string]string{}
	for k, v := range sb.Spec.Template.Labels {
		labels[k] = v
	}
	labels[LabelBoundaryRole], labels[LabelBoundaryPair] = "workload", strings.ToLower(sb.Metadata.Id)
	cr, err := RenderSandbox(d.gvk, SandboxCR{Name: row.crName, Namespace: row.ns, GatewayID: o.GatewayID,
		SandboxID: sb.Metadata.Id, SandboxName: sb.Metadata.Name, Workspace: sb.Metadata.Workspace,
		TemplateLabels: labels, TemplateAnnotations: sb.Spec.Template.Annotations, Pod: workloadPod(sb, rt, o.SupervisorImage)})
	if err != nil {
		return nil, err
	}
	mode, replicas := "Suspended", int64(0)
	if running {
		mode, replicas = "Running", 1
	}
	if d.gvk.Version == "v1alpha1" {
		_ = unstructured.SetNestedField(cr.Object, replicas, "spec", "replicas")
	} else {
		_ = unstructured.SetNestedField(cr.Object, mode, "spec", "operatingMode")
	}
	return cr, nil
}

func hardened(uid int64, readOnlyRoot bool) *corev1.SecurityContext {
	return &corev1.SecurityContext{RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(uid), RunAsNonRoot: ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(readOnlyRoot),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

// workloadPod is the capability-free workload Pod: the agent, and an init
// container that alone mounts the bootstrap Secret and copies it to
// memory.
func workloadPod(sb *openshellv1.Sandbox, rt *runtime01, runtimeImage string) corev1.PodSpec {
	var env []corev1.EnvVar
	for k, v := range sb.Spec.Environment {
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	agent := corev1.Container{Name: "agent", Image: sb.Spec.Template.Image, Env: env,
		SecurityContext: hardened(rt.uid, false),
		VolumeMounts:    []corev1.VolumeMount{{Name: "openshell-runtime", MountPath: "/.openshell", ReadOnly: true}}}
	if gpu := sb.Spec.GetResourceRequirements().GetGpu(); gpu != nil {
		n := int64(1)
		if gpu.Count != nil {
			n = int64(*gpu.Count)
		}
		agent.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": *resourceQuantity(n)}
	}
	pod := corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false),
		RestartPolicy:                corev1.RestartPolicyNever,
		DNSPolicy:                    corev1.DNSNone,
		DNSConfig:                    &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.53"}},
		SchedulingGates:              []corev1.PodSchedulingGate{{Name: BootstrapGate}},
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To(rt.uid), RunAsGroup: ptr.To(rt.uid), RunAsNonRoot: ptr.To(true),
			FSGroup: ptr.To(rt.uid), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}},
		InitContainers: []corev1.Container{{Name: "openshell-sandbox-bootstrap", Image: runtimeImage,
			SecurityContext: hardened(rt.uid, true),
			VolumeMounts: []corev1.VolumeMount{{Name: "bootstrap", MountPath: "/bootstrap", ReadOnly: true},
				{Name: "openshell-runtime", MountPath: "/.openshell"}}}},
		Containers: []corev1.Container{agent},
		Volumes: []corev1.Volume{
			{Name: "bootstrap", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: workloadSecretName(sb.Metadata.Id, rt.generation)}}},
			{Name: "openshell-runtime", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		},
	}
	if rc := sb.Spec.GetTemplate().GetRuntimeClassName(); rc != "" {
		pod.RuntimeClassName = &rc
	}
	return pod
}

// ownedBy is a non-controller owner reference that does not block its
// owner's deletion (no finalizers rights needed to set it).
func ownedBy(kind, apiVersion, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, BlockOwnerDeletion: ptr.To(false)}}
}

func (d *driver) boundaryService(id, ns, crName string, rt *runtime01) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: boundaryServiceName(id), Namespace: ns,
			Labels:          map[string]string{LabelManagedBy: "openshell", LabelSandboxID: id, LabelComponent: "boundary-service"},
			OwnerReferences: ownedBy("Sandbox", d.gvk.GroupVersion().String(), crName, rt.crUID)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			Selector: map[string]string{LabelBoundaryRole: "workload", LabelBoundaryPair: strings.ToLower(id)},
			Ports:    []corev1.ServicePort{{Name: "boundary", Port: boundaryPort, TargetPort: intstr.FromInt32(boundaryPort), Protocol: corev1.ProtocolTCP}}},
	}
}

// supervisorPod is the generation's supervisor: the workload's UID,
// nothing added, its Secret and a gateway-audience token mounted.
func (d *driver) supervisorPod(sb *openshellv1.Sandbox, row *sandboxRow, rt *runtime01) *corev1.Pod {
	o, id := d.g.opts, sb.Metadata.Id
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: SupervisorPodName(id), Namespace: row.ns,
			Labels: map[string]string{LabelManagedBy: "openshell", LabelBoundaryRole: "supervisor", LabelBoundaryPair: strings.ToLower(id),
				LabelGatewayID: o.GatewayID, LabelComponent: "supervisor"},
			Annotations:     map[string]string{LabelSandboxID: id},
			OwnerReferences: ownedBy("Sandbox", d.gvk.GroupVersion().String(), row.crName, rt.crUID)},
		Spec: corev1.PodSpec{
			ServiceAccountName:            o.ServiceAccount,
			AutomountServiceAccountToken:  ptr.To(false),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			SchedulingGates:               []corev1.PodSchedulingGate{{Name: BootstrapGate}},
			SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To(rt.uid),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "supervisor", Image: o.SupervisorImage,
				Command: []string{"/openshell-supervisor", "--backend-descriptor-file", "/.openshell/supervisor/runtime.json",
					"--auth-bundle-file", "/.openshell/supervisor/auth.json", "--workdir", "/sandbox",
					"--health-socket-path", "/run/openshell/health.sock"},
				Env: []corev1.EnvVar{{Name: "OPENSHELL_ENDPOINT", Value: d.g.Endpoint()}, {Name: "OPENSHELL_SANDBOX_ID", Value: id},
					{Name: "OPENSHELL_SANDBOX", Value: sb.Metadata.Name}, {Name: "OPENSHELL_K8S_SA_TOKEN_FILE", Value: "/var/run/secrets/openshell/token"}},
				SecurityContext: hardened(rt.uid, true),
				VolumeMounts: []corev1.VolumeMount{{Name: "bootstrap", MountPath: "/.openshell/supervisor", ReadOnly: true},
					{Name: "sa-token", MountPath: "/var/run/secrets/openshell", ReadOnly: true},
					{Name: "run", MountPath: "/run/openshell"}, {Name: "logs", MountPath: "/var/log"}}}},
			Volumes: []corev1.Volume{
				{Name: "bootstrap", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: supervisorSecretName(id, rt.generation), DefaultMode: ptr.To[int32](0o440)}}},
				{Name: "sa-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
					ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "openshell-gateway", ExpirationSeconds: ptr.To[int64](3600), Path: "token"}}}}}},
				{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

// bootstrap waits for the workload Pod the Agent Sandbox controller
// creates from the released Sandbox, checks that it is the gated,
// capability-free Pod the driver rendered, creates each Pod's bootstrap
// Secret (owned by that Pod, so they go with it) and clears both gates. A
// failure makes the sandbox ERROR with the reason, as the driver's
// validation does.
func (d *driver) bootstrap(row *sandboxRow, gen int) {
	ctx := d.ctx
	kube, ns := d.g.opts.Kube, row.ns
	d.g.mu.Lock()
	id, crName := row.sb.Metadata.Id, row.crName
	d.g.mu.Unlock()
	d.g.mu.Lock()
	crUID := row.runtime.crUID
	d.g.mu.Unlock()
	// The Pod is the Sandbox's name, whatever the generation: one of an
	// earlier Sandbox of that name (a rebuild after state loss) or of this
	// Sandbox's previous generation may still be going. Wait for the live
	// one this Sandbox controls that mounts this generation's Secret.
	workload := &corev1.Pod{}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if !d.current(row, gen) {
			return false, errSuperseded
		}
		err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: crName}, workload)
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		owner := metav1.GetControllerOf(workload)
		return owner != nil && owner.UID == crUID && workload.DeletionTimestamp == nil &&
			bootstrapSecretOf(workload) == workloadSecretName(id, gen), nil
	})
	if errors.Is(err, errSuperseded) {
		return
	}
	if err != nil {
		d.failBootstrap(row, gen, fmt.Sprintf("the workload Pod did not appear: %v", err))
		return
	}
	if problem := validateWorkload(workload, id); problem != "" {
		d.failBootstrap(row, gen, "the admitted workload Pod is not the runtime's: "+problem)
		return
	}
	supervisor := &corev1.Pod{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: SupervisorPodName(id)}, supervisor); err != nil {
		d.failBootstrap(row, gen, fmt.Sprintf("read the supervisor Pod: %v", err))
		return
	}
	if supervisor.DeletionTimestamp != nil || bootstrapSecretOf(supervisor) != supervisorSecretName(id, gen) {
		d.failBootstrap(row, gen, "the supervisor Pod is not this generation's")
		return
	}
	descriptor, _ := json.Marshal(map[string]any{"sandbox_id": id, "generation": gen, "boundary_port": boundaryPort})
	supervisorData := map[string][]byte{"runtime.json": descriptor, "auth.json": []byte("{}")}
	if d.g.opts.WorkspaceMode == WorkspaceModeOperator {
		// Outside shared mode the driver stages its client certificate,
		// read from its own namespace, into the supervisor's Secret.
		s := &corev1.Secret{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: d.g.opts.Namespace, Name: d.g.opts.ClientTLSSecret}, s); err != nil {
			d.failBootstrap(row, gen, fmt.Sprintf("read the client TLS Secret %s/%s: %v", d.g.opts.Namespace, d.g.opts.ClientTLSSecret, err))
			return
		}
		for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
			supervisorData["client-"+k] = s.Data[k]
		}
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: workloadSecretName(id, gen), Namespace: ns,
			Labels:          map[string]string{LabelManagedBy: "openshell", LabelComponent: "sandbox-bootstrap"},
			OwnerReferences: ownedBy("Pod", "v1", workload.Name, workload.UID)},
			Immutable: ptr.To(true),
			Data:      map[string][]byte{"boundary.json": descriptor, "tls.crt": []byte("test"), "tls.key": []byte("test")}},
		{ObjectMeta: metav1.ObjectMeta{Name: supervisorSecretName(id, gen), Namespace: ns,
			Labels:          map[string]string{LabelManagedBy: "openshell", LabelComponent: "supervisor-bootstrap"},
			OwnerReferences: ownedBy("Pod", "v1", supervisor.Name, supervisor.UID)},
			Immutable: ptr.To(true),
			Data:      supervisorData},
	} {
		if err := kube.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			d.failBootstrap(row, gen, fmt.Sprintf("create the bootstrap Secret %s: %v", s.Name, err))
			return
		}
	}
	d.g.mu.Lock()
	if row.runtime != nil && row.runtime.generation == gen {
		row.runtime.holding = false
	}
	d.g.mu.Unlock()
	// The supervisor first: the sandbox is READY once its workload Pod
	// is, and by then its supervisor is no longer gated. Each release is
	// for this generation only; a stop or a newer start in between owns
	// the Pods now.
	for _, p := range []*corev1.Pod{supervisor, workload} {
		if !d.current(row, gen) {
			return
		}
		if err := kube.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"schedulingGates":null}}`))); err != nil {
			d.failBootstrap(row, gen, fmt.Sprintf("release Pod %s: %v", p.Name, err))
			return
		}
	}
}

// errSuperseded ends a bootstrap whose generation is no longer the one
// to run.
var errSuperseded = errors.New("superseded by a stop or a later generation")

// current reports whether gen is the sandbox's running generation.
func (d *driver) current(row *sandboxRow, gen int) bool {
	d.g.mu.Lock()
	defer d.g.mu.Unlock()
	rt := row.runtime
	return rt != nil && rt.generation == gen && rt.running && !row.deleting
}

// bootstrapSecretOf is the Secret a workload Pod's bootstrap volume
// mounts: it names the generation the Pod belongs to.
func bootstrapSecretOf(p *corev1.Pod) string {
	for _, v := range p.Spec.Volumes {
		if v.Name == "bootstrap" && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// validateWorkload says what makes an admitted workload Pod not the one
// the driver rendered ("" when nothing does).
func validateWorkload(p *corev1.Pod, id string) string {
	switch {
	case p.Labels[LabelBoundaryRole] != "workload" || p.Labels[LabelBoundaryPair] != strings.ToLower(id):
		return "boundary labels missing"
	case p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC:
		return "host namespaces"
	case p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken:
		return "a ServiceAccount token is mounted"
	case len(p.Spec.SchedulingGates) == 0 || p.Spec.SchedulingGates[0].Name != BootstrapGate:
		return "the bootstrap gate is missing"
	}
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 {
			return "container " + c.Name + " may add capabilities"
		}
	}
	return ""
}

// failBootstrap makes the sandbox ERROR, unless a later generation has
// replaced the one that failed or the sandbox is going.
func (d *driver) failBootstrap(row *sandboxRow, gen int, msg string) {
	d.g.mu.Lock()
	defer d.g.mu.Unlock()
	if row.runtime == nil || row.runtime.generation != gen || !row.runtime.running || row.deleting || d.ctx.Err() != nil {
		return
	}
	row.runtime.failure = &openshellv1.SandboxCondition{Type: "Ready", Status: "False", Reason: "BootstrapFailed", Message: msg}
	row.sb.Status.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR
	row.sb.Status.Conditions = append(row.sb.Status.Conditions, row.runtime.failure)
	row.sb.Metadata.ResourceVersion++
	d.g.notify(row.sb.Metadata.Id)
}

// setRunning01 stops a 0.1 sandbox (the Sandbox suspended, its supervisor
// Pod deleted) or starts it as a new generation: new Secrets, a new
// supervisor Pod, the Sandbox released with the new generation's template.
// A start of a running sandbox (a retried StartSandbox) starts nothing; a
// start that fails leaves the sandbox stopped, so that a retry starts
// again from a clean slate.
func (d *driver) setRunning01(ctx context.Context, row *sandboxRow, running bool) error {
	d.g.mu.Lock()
	rt, sb := row.runtime, row.sb
	if running && rt.running {
		d.g.mu.Unlock()
		return nil
	}
	rt.running, rt.holding = running, running
	if running {
		rt.generation++
	}
	gen, id := rt.generation, sb.Metadata.Id
	if !running {
		d.g.mu.Unlock()
		if err := d.patchSandbox(ctx, row.ns, row.crName, map[string]any{"operatingMode": "Suspended"}); err != nil {
			return err
		}
		sup := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: SupervisorPodName(id), Namespace: row.ns}}
		return client.IgnoreNotFound(d.g.opts.Kube.Delete(ctx, sup))
	}
	cr, err := d.renderSandbox01(row, sb, rt, true)
	sup := d.supervisorPod(sb, row, rt)
	d.g.mu.Unlock()
	if err == nil {
		err = d.start01(ctx, row.ns, row.crName, cr, sup)
	}
	if err != nil {
		d.g.mu.Lock()
		if rt.generation == gen {
			rt.running, rt.holding = false, false
		}
		d.g.mu.Unlock()
		return err
	}
	go d.bootstrap(row, gen)
	return nil
}

// start01 replaces the supervisor Pod (an earlier generation's, or one a
// failed start left) with sup and releases the Sandbox with cr's spec.
func (d *driver) start01(ctx context.Context, ns, crName string, cr *unstructured.Unstructured, sup *corev1.Pod) error {
	kube := d.g.opts.Kube
	if err := kube.Delete(ctx, sup.DeepCopy()); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete the previous supervisor Pod: %w", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(sup), &corev1.Pod{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}); err != nil {
		return fmt.Errorf("wait for the previous supervisor Pod to go: %w", err)
	}
	if err := kube.Create(ctx, sup); err != nil {
		return fmt.Errorf("create the supervisor Pod: %w", err)
	}
	spec, _, _ := unstructured.NestedMap(cr.Object, "spec")
	return d.patchSandbox(ctx, ns, crName, spec)
}

// patchSandbox merge-patches the Sandbox's spec (operatingMode is
// v1alpha1's replicas).
func (d *driver) patchSandbox(ctx context.Context, ns, name string, spec map[string]any) error {
	if mode, ok := spec["operatingMode"].(string); ok && d.gvk.Version == "v1alpha1" {
		delete(spec, "operatingMode")
		spec["replicas"] = map[bool]int64{true: 1, false: 0}[mode == "Running"]
	}
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(d.gvk)
	cr.SetNamespace(ns)
	cr.SetName(name)
	return d.g.opts.Kube.Patch(ctx, cr, client.RawPatch(types.MergePatchType, body))
}
