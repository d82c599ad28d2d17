package gateway

import (
	"fmt"

	routev1 "github.com/openshift/api/route/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
)

// meta builds object metadata. Objects in the gateway's namespace are owned
// by it (garbage-collected with it); others carry only the labels that the
// deletion finalizer uses.
func meta(gw *openshellv1alpha1.OpenShellGateway, name, namespace, component string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: Labels(gw, component)}
	if namespace == gw.Namespace {
		m.OwnerReferences = []metav1.OwnerReference{OwnerReference(gw)}
	}
	return m
}

// OwnerReference makes the gateway the controller of a child.
func OwnerReference(gw *openshellv1alpha1.OpenShellGateway) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         openshellv1alpha1.GroupVersion.String(),
		Kind:               "OpenShellGateway",
		Name:               gw.Name,
		UID:                gw.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// ServiceAccounts: the gateway's, and the one sandbox pods run as.
func ServiceAccounts(gw *openshellv1alpha1.OpenShellGateway) []client.Object {
	n := NamesFor(gw)
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: meta(gw, n.Fullname, gw.Namespace, "gateway"),
			AutomountServiceAccountToken: ptr.To(true)},
		// Sandbox pods must not carry a Kubernetes API token; the driver
		// mounts a projected token with the gateway's audience instead.
		&corev1.ServiceAccount{ObjectMeta: meta(gw, n.SandboxSA, n.SandboxNamespace, "sandbox"),
			AutomountServiceAccountToken: ptr.To(false)},
	}
}

// Static ClusterRoles the bundle ships (config/operand, generated from
// OperandClusterRoles): the operator binds them to each gateway's
// ServiceAccount and holds only `bind` on them, by name, instead of the
// right to create arbitrary roles (which would need it to hold every
// permission it grants, or `escalate`).
const (
	// ClusterRoleGateway is bound cluster-wide: TokenReview (sandbox and
	// user tokens), node reads (the driver's capacity view) and namespace
	// get (the driver checks its sandbox namespace exists).
	ClusterRoleGateway = "openshell-gateway"
	// ClusterRoleGatewaySandboxes is bound in the sandbox namespace only:
	// the driver's Sandbox objects, their events, and pod reads.
	ClusterRoleGatewaySandboxes = "openshell-gateway-sandboxes"
	// ClusterRoleGatewayRuntime is bound in the sandbox namespace only, for
	// 0.1 gateways: the two-pod runtime's objects the gateway creates there
	// (supervisor Pods, boundary Services, the namespace's NetworkPolicy
	// fence, bootstrap Secrets).
	ClusterRoleGatewayRuntime = "openshell-gateway-runtime"
)

// OperandClusterRoles are the static ClusterRoles gateways are bound to.
func OperandClusterRoles() []*rbacv1.ClusterRole {
	l := map[string]string{LabelManagedBy: ManagedByValue, LabelComponent: "gateway-rbac"}
	return []*rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleGateway, Labels: l}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
			// 0.1's resource admission reads the RuntimeClass and
			// PriorityClass a sandbox template names (cluster-scoped,
			// nothing secret in them).
			{APIGroups: []string{"node.k8s.io"}, Resources: []string{"runtimeclasses"}, Verbs: []string{"get"}},
			{APIGroups: []string{"scheduling.k8s.io"}, Resources: []string{"priorityclasses"}, Verbs: []string{"get"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleGatewaySandboxes, Labels: l}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"agents.x-k8s.io"}, Resources: []string{"sandboxes", "sandboxes/status"},
				Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
			// get only: the gateway deliberately cannot patch pods (the pod
			// annotation is the sandbox identity anchor).
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		}},
		// Narrower than upstream's chart, which the reference (§4) infers
		// for shared mode: Secrets create and delete only (the gateway
		// never reads them back: they are immutable and Pod-owned), no
		// Secret list or watch, Services and NetworkPolicies create and
		// get only (the fence is namespace-wide and kept).
		// Operator workspace mode (workspaces.go): the driver's one
		// cluster-wide watch, read-only.
		{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleGatewayWorkspaces, Labels: l}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"agents.x-k8s.io"}, Resources: []string{"sandboxes"}, Verbs: []string{"list", "watch"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleGatewayRuntime, Labels: l}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "delete", "get", "list", "patch", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete"}},
		}},
	}
}

// RBAC binds the gateway's ServiceAccount to the static ClusterRoles: in
// the sandbox namespace with RoleBindings, cluster-wide with a
// ClusterRoleBinding of a name unique to the gateway. The gateway never
// creates namespaces (the CRD refuses workspace mode Managed); in workspace
// mode Operator its runtime grants are in each paired namespace
// (WorkspaceObjects) and it writes Secrets (0.1) only there.
func RBAC(gw *openshellv1alpha1.OpenShellGateway, in Inputs) []client.Object {
	n := NamesFor(gw)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: n.Fullname, Namespace: gw.Namespace}}
	out := []client.Object{
		&rbacv1.RoleBinding{ObjectMeta: meta(gw, n.GatewayBinding, n.SandboxNamespace, "rbac"), Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleGatewaySandboxes}},
	}
	switch {
	case OperatorMode(gw):
		// Sandboxes run in paired namespaces (WorkspaceObjects grants the
		// runtime there); here the driver only probes the Sandbox API and
		// reads its client certificate.
		out = append(out, operatorModeRBAC(gw)...)
	case in.Line == gatewayline.V01:
		out = append(out, &rbacv1.RoleBinding{ObjectMeta: meta(gw, n.RuntimeBinding, n.SandboxNamespace, "rbac"), Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleGatewayRuntime}})
	}
	return append(out, &rbacv1.ClusterRoleBinding{ObjectMeta: meta(gw, n.ClusterScoped, "", "rbac"), Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleGateway}})
}

// ConfigMap holds gateway.toml.
func ConfigMap(gw *openshellv1alpha1.OpenShellGateway, config string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: meta(gw, NamesFor(gw).Config, gw.Namespace, "config"),
		Data: map[string]string{ConfigFile: config}}
}

// TrustBundleConfigMap holds the gateway's CA bundle.
func TrustBundleConfigMap(gw *openshellv1alpha1.OpenShellGateway, bundle []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: meta(gw, NamesFor(gw).TrustBundle, gw.Namespace, "trust"),
		Data: map[string]string{TrustFile: string(bundle)}}
}

// LabelInjectTrustedCABundle asks OpenShift's Cluster Network Operator to
// write the cluster's trusted CA bundle into a ConfigMap (key ca-bundle.crt).
const LabelInjectTrustedCABundle = "config.openshift.io/inject-trusted-cabundle"

// TrustedCAConfigMap is the ConfigMap the Cluster Network Operator fills;
// it is applied without data, so the operator never owns or overwrites the
// injected bundle.
func TrustedCAConfigMap(gw *openshellv1alpha1.OpenShellGateway) *corev1.ConfigMap {
	m := meta(gw, NamesFor(gw).TrustedCA, gw.Namespace, "trust")
	m.Labels[LabelInjectTrustedCABundle] = "true"
	return &corev1.ConfigMap{ObjectMeta: m}
}

// Service exposes gRPC (and HTTP on the same port) and metrics.
func Service(gw *openshellv1alpha1.OpenShellGateway) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: meta(gw, NamesFor(gw).Fullname, gw.Namespace, "gateway"),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: SelectorLabels(gw),
			Ports: []corev1.ServicePort{
				{Name: "grpc", Port: PortGRPC, TargetPort: intstr.FromString("grpc"), Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc")},
				{Name: "metrics", Port: PortMetrics, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// PodTemplate is the gateway pod.
func PodTemplate(gw *openshellv1alpha1.OpenShellGateway, in Inputs, configHash string) corev1.PodTemplateSpec {
	n := NamesFor(gw)
	m := gw.Spec.Managed
	if m == nil {
		m = &openshellv1alpha1.ManagedGatewaySpec{}
	}
	args := []string{"--config", ConfigDir + "/" + ConfigFile}
	env := []corev1.EnvVar{
		{Name: KEKEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: n.KEK}, Key: KEKSecretKey}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	if UsesPostgres(gw) {
		ref := m.Persistence.Postgres.URISecretRef
		env = append(env, corev1.EnvVar{Name: "OPENSHELL_DB_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key}}})
	} else {
		args = append(args, "--db-url", "sqlite:"+DataDir+"/openshell.db")
	}
	env = append(env, ProxyEnv(gw, in)...)
	mounts := []corev1.VolumeMount{
		{Name: "gateway-config", MountPath: ConfigDir, ReadOnly: true},
		{Name: "sandbox-jwt", MountPath: JWTDir, ReadOnly: true},
		{Name: "tls-cert", MountPath: ServerTLSDir, ReadOnly: true},
		{Name: "tls-client-ca", MountPath: ClientCADir, ReadOnly: true},
	}
	vols := []corev1.Volume{
		{Name: "gateway-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: n.Config}}}},
		{Name: "sandbox-jwt", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: n.JWT, DefaultMode: ptr.To[int32](0o400)}}},
		{Name: "tls-cert", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: n.ServerTLS, DefaultMode: ptr.To[int32](0o400)}}},
		{Name: "tls-client-ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: n.ServerTLS,
			Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}},
	}
	if ExternalIssuer(gw) != nil {
		mounts = append(mounts, corev1.VolumeMount{Name: "tls-external-cert", MountPath: ServerExternalDir, ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: "tls-external-cert", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: n.ServerExternal, DefaultMode: ptr.To[int32](0o400)}}})
	}
	if !UsesPostgres(gw) {
		mounts = append(mounts, corev1.VolumeMount{Name: "openshell-data", MountPath: DataDir})
	}
	if OperatorMode(gw) {
		// A directory, not a subPath: the kubelet updates it in place and
		// the driver reloads the file on the change.
		mounts = append(mounts, corev1.VolumeMount{Name: "workspaces", MountPath: WorkspacesDir, ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: "workspaces", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: n.Workspaces}}}})
	}
	// The whole trust bundle, not the issuer's CA alone: SSL_CERT_FILE
	// replaces the gateway's store for all of its outbound TLS.
	mounts = append(mounts, corev1.VolumeMount{Name: "trust-bundle", MountPath: TrustDir, ReadOnly: true})
	vols = append(vols, corev1.Volume{Name: "trust-bundle", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: n.TrustBundle}}}})
	env = append(env, corev1.EnvVar{Name: "SSL_CERT_FILE", Value: TrustDir + "/" + TrustFile})
	probe := func(path string, initial, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("health")}},
			InitialDelaySeconds: initial, PeriodSeconds: period, TimeoutSeconds: 1, FailureThreshold: failures,
		}
	}
	sc := &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	podSC := &corev1.PodSecurityContext{}
	if !in.OpenShift() {
		// On OpenShift restricted-v2 assigns the UID and fsGroup from the
		// namespace range; elsewhere use the image's non-root user.
		sc.RunAsUser = ptr.To[int64](1000)
		podSC.FSGroup = ptr.To[int64](1000)
	}
	c := corev1.Container{
		Name:  "gateway",
		Image: in.Images.Gateway,
		Args:  args,
		Env:   env,
		Ports: []corev1.ContainerPort{
			{Name: "grpc", ContainerPort: PortGRPC, Protocol: corev1.ProtocolTCP},
			{Name: "health", ContainerPort: PortHealth, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: PortMetrics, Protocol: corev1.ProtocolTCP},
		},
		StartupProbe:    probe("/healthz", 0, 2, 30),
		LivenessProbe:   probe("/healthz", 2, 5, 3),
		ReadinessProbe:  probe("/readyz", 1, 2, 3),
		VolumeMounts:    mounts,
		SecurityContext: sc,
		Resources:       defaultResources(),
	}
	if m.Resources != nil {
		c.Resources = *m.Resources
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      mergeLabels(SelectorLabels(gw), Labels(gw, "gateway")),
			Annotations: podAnnotations(configHash, in.Version),
		},
		Spec: corev1.PodSpec{
			ServiceAccountName:            n.Fullname,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			SecurityContext:               podSC,
			Containers:                    []corev1.Container{c},
			Volumes:                       vols,
			NodeSelector:                  m.NodeSelector,
			Tolerations:                   m.Tolerations,
		},
	}
}

// podAnnotations are the gateway pod template's: the config hash, and the
// release unless it is 0.0.111, which a template without one means (so
// that gateways pinned to it do not roll when the operator that added the
// annotation is installed).
func podAnnotations(configHash, version string) map[string]string {
	a := map[string]string{AnnotationConfigHash: configHash}
	if version != "" && version != gatewayline.LegacyManaged {
		a[AnnotationVersion] = version
	}
	return a
}

// TemplateVersion is the release a gateway pod template runs, as
// podAnnotations recorded it (none: 0.0.111).
func TemplateVersion(annotations map[string]string) string {
	if v := annotations[AnnotationVersion]; v != "" {
		return v
	}
	return gatewayline.LegacyManaged
}

// KEKSecretKey is the key of the credential KEK in its Secret.
const KEKSecretKey = "key-encryption-key"

func defaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
}

func mergeLabels(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// Workload is a StatefulSet with a SQLite volume, or a Deployment when the
// database is external Postgres.
func Workload(gw *openshellv1alpha1.OpenShellGateway, in Inputs, configHash string) client.Object {
	n := NamesFor(gw)
	tmpl := PodTemplate(gw, in, configHash)
	sel := &metav1.LabelSelector{MatchLabels: SelectorLabels(gw)}
	replicas := ptr.To(Replicas(gw))
	if UsesPostgres(gw) {
		d := &appsv1.Deployment{ObjectMeta: meta(gw, n.Fullname, gw.Namespace, "gateway"),
			Spec: appsv1.DeploymentSpec{Replicas: replicas, Selector: sel, Template: tmpl}}
		if in.Replaces != "" {
			// Every replica shares the database, and a new release
			// migrates it on start: upstream says 0.0.x and 0.1 must not
			// run side by side, and 0.1.9's migrations block writers. A
			// rolling update would run both releases against it, so a
			// move between releases stops the old pods first; any other
			// change still rolls.
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		}
		return d
	}
	size := resource.MustParse("1Gi")
	var class *string
	if m := gw.Spec.Managed; m != nil && m.Persistence != nil && m.Persistence.SQLite != nil {
		if m.Persistence.SQLite.Size != nil {
			size = *m.Persistence.SQLite.Size
		}
		if m.Persistence.SQLite.StorageClassName != "" {
			class = ptr.To(m.Persistence.SQLite.StorageClassName)
		}
	}
	return &appsv1.StatefulSet{
		ObjectMeta: meta(gw, n.Fullname, gw.Namespace, "gateway"),
		Spec: appsv1.StatefulSetSpec{
			Replicas: replicas, Selector: sel, Template: tmpl, ServiceName: n.Fullname,
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "openshell-data", Labels: SelectorLabels(gw)},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: class,
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
				},
			}},
		},
	}
}

// PodDisruptionBudget lets one gateway pod go at a time; with a single
// replica that still allows node drains.
func PodDisruptionBudget(gw *openshellv1alpha1.OpenShellGateway) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: meta(gw, NamesFor(gw).Fullname, gw.Namespace, "gateway"),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(gw)},
		},
	}
}

// MonitoringPeers are the namespaces Prometheus scrapes from: OpenShift's
// platform and user-workload monitoring (by the policy-group label
// OpenShift sets, and by name). Elsewhere a platform admin adds a
// NetworkPolicy of their own for their Prometheus (policies add up).
func MonitoringPeers() []networkingv1.NetworkPolicyPeer {
	return []networkingv1.NetworkPolicyPeer{
		{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"network.openshift.io/policy-group": "monitoring"}}},
		{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName,
			Operator: metav1.LabelSelectorOpIn, Values: []string{"openshift-monitoring", "openshift-user-workload-monitoring"}}}}},
	}
}

// NetworkPolicies: the gateway accepts ingress only on its gRPC port, and
// on its metrics port from monitoring (probes come from the kubelet, which NetworkPolicy does not
// filter); sandbox pods accept ingress only from gateway pods, on SSH.
// Sandbox pods are selected by the label the Agent Sandbox controller puts
// on every pod it creates, so the policy matches what actually runs.
//
// A 0.1 gateway fences its sandbox namespace itself (workload Pods reach
// nothing, only their supervisor reaches them): a policy of the operator's
// selecting those Pods would only add to what they accept, so none is
// rendered.
func NetworkPolicies(gw *openshellv1alpha1.OpenShellGateway, in Inputs) []client.Object {
	n := NamesFor(gw)
	tcp := corev1.ProtocolTCP
	port := func(p int) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: ptr.To(intstr.FromInt(p))}
	}
	out := []client.Object{
		&networkingv1.NetworkPolicy{
			ObjectMeta: meta(gw, n.Fullname+"-gateway", gw.Namespace, "network-policy"),
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(gw)},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				// gRPC from anywhere: sandboxes, the operator, the Route's
				// router and CLI users all reach it, each authenticated.
				// Metrics (unauthenticated) only from the cluster's monitoring.
				Ingress: []networkingv1.NetworkPolicyIngressRule{
					{Ports: []networkingv1.NetworkPolicyPort{port(PortGRPC)}},
					{Ports: []networkingv1.NetworkPolicyPort{port(PortMetrics)}, From: MonitoringPeers()},
				},
			},
		},
	}
	if in.Line == gatewayline.V01 {
		return out
	}
	return append(out, &networkingv1.NetworkPolicy{
		ObjectMeta: meta(gw, n.SandboxPolicy, n.SandboxNamespace, "network-policy"),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: AgentSandboxPodLabel, Operator: metav1.LabelSelectorOpExists}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: gw.Namespace}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(gw)},
				}},
				Ports: []networkingv1.NetworkPolicyPort{port(SandboxSSHPort)},
			}},
		},
	})
}

// Route exposes the gateway with passthrough TLS, so that end-to-end TLS
// reaches the gateway and no plaintext hop exists.
func Route(gw *openshellv1alpha1.OpenShellGateway) *routev1.Route {
	n := NamesFor(gw)
	return &routev1.Route{
		ObjectMeta: meta(gw, n.Fullname, gw.Namespace, "gateway"),
		Spec: routev1.RouteSpec{
			Host: RouteHost(gw),
			To:   routev1.RouteTargetReference{Kind: "Service", Name: n.Fullname, Weight: ptr.To[int32](100)},
			Port: &routev1.RoutePort{TargetPort: intstr.FromString("grpc")},
			TLS: &routev1.TLSConfig{
				Termination:                   routev1.TLSTerminationPassthrough,
				InsecureEdgeTerminationPolicy: routev1.InsecureEdgeTerminationPolicyNone,
			},
			WildcardPolicy: routev1.WildcardPolicyNone,
		},
	}
}

// ServiceMonitor has the Prometheus Operator (on OpenShift, user-workload
// monitoring) scrape the gateway's plain-HTTP metrics port through its
// Service. The port carries no secrets and the gateway NetworkPolicy admits
// it; the gateway serves it without TLS, so the scrape is HTTP.
func ServiceMonitor(gw *openshellv1alpha1.OpenShellGateway) *monitoringv1.ServiceMonitor {
	m := meta(gw, NamesFor(gw).Fullname, gw.Namespace, "gateway")
	return &monitoringv1.ServiceMonitor{
		ObjectMeta: m,
		Spec: monitoringv1.ServiceMonitorSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{
				LabelName: m.Labels[LabelName], LabelInstance: m.Labels[LabelInstance], LabelComponent: m.Labels[LabelComponent]}},
			Endpoints: []monitoringv1.Endpoint{{Port: "metrics", Path: "/metrics", Scheme: "http"}},
		},
	}
}

// InternalEndpoint is the in-cluster gateway address.
func InternalEndpoint(gw *openshellv1alpha1.OpenShellGateway) string {
	return fmt.Sprintf("https://%s.%s.svc:%d", NamesFor(gw).Fullname, gw.Namespace, PortGRPC)
}
