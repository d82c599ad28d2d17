package gateway

import (
	"fmt"

	routev1 "github.com/openshift/api/route/v1"
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

var (
	sandboxRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"agents.x-k8s.io"}, Resources: []string{"sandboxes", "sandboxes/status"},
			Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
		// get only: the gateway deliberately cannot patch pods (the pod
		// annotation is the sandbox identity anchor).
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
	}
)

// RBAC renders the gateway's permissions for its workspace mode, without
// wildcards. Every mode gets tokenreviews and read on nodes. Shared: a
// Role on Sandbox CRs, events and pods in the one sandbox namespace, and
// get on namespaces. Operator: those rules cluster-wide, namespaces
// get/list/watch, and Secrets to copy the client TLS Secret into each
// workspace namespace (get and patch by name; create, which RBAC cannot
// scope by name). Managed: as
// Operator, plus namespace create/delete and ServiceAccount and
// NetworkPolicy writes, cluster-wide (docs/security.md, section 6).
func RBAC(gw *openshellv1alpha1.OpenShellGateway) []client.Object {
	n := NamesFor(gw)
	mode := WorkspaceMode(gw)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: n.Fullname, Namespace: gw.Namespace}}

	nsVerbs := []string{"get"}
	switch mode {
	case openshellv1alpha1.WorkspaceModeManaged:
		nsVerbs = []string{"create", "delete", "get", "list", "watch"}
	case openshellv1alpha1.WorkspaceModeOperator:
		nsVerbs = []string{"get", "list", "watch"}
	}
	cluster := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: nsVerbs},
	}
	var out []client.Object
	if mode == openshellv1alpha1.WorkspaceModeShared {
		out = append(out,
			&rbacv1.Role{ObjectMeta: meta(gw, n.SandboxSA, n.SandboxNamespace, "rbac"), Rules: sandboxRules},
			&rbacv1.RoleBinding{ObjectMeta: meta(gw, n.SandboxSA, n.SandboxNamespace, "rbac"), Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: n.SandboxSA}})
	} else {
		cluster = append(cluster, sandboxRules...)
		// The client TLS Secret is copied into each workspace namespace.
		cluster = append(cluster,
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{n.ClientTLS}, Verbs: []string{"get", "patch"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}})
		if mode == openshellv1alpha1.WorkspaceModeManaged {
			cluster = append(cluster,
				rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"create", "get"}},
				rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"create", "get", "patch", "update"}})
		}
	}
	out = append(out,
		&rbacv1.ClusterRole{ObjectMeta: meta(gw, n.ClusterScoped, "", "rbac"), Rules: cluster},
		&rbacv1.ClusterRoleBinding{ObjectMeta: meta(gw, n.ClusterScoped, "", "rbac"), Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: n.ClusterScoped}})
	return out
}

// ConfigMap holds gateway.toml.
func ConfigMap(gw *openshellv1alpha1.OpenShellGateway, config string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: meta(gw, NamesFor(gw).Config, gw.Namespace, "config"),
		Data: map[string]string{ConfigFile: config}}
}

// OIDCCAConfigMap holds the CA of the operator's OIDC issuer.
func OIDCCAConfigMap(gw *openshellv1alpha1.OpenShellGateway, caPEM []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: meta(gw, NamesFor(gw).OIDCCA, gw.Namespace, "oidc"),
		Data: map[string]string{"ca.crt": string(caPEM)}}
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
		{Name: "tls-cert", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: n.ServerTLS}}},
		{Name: "tls-client-ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: n.ServerTLS,
			Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}},
	}
	if ExternalIssuer(gw) != nil {
		mounts = append(mounts, corev1.VolumeMount{Name: "tls-external-cert", MountPath: ServerExternalDir, ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: "tls-external-cert", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: n.ServerExternal}}})
	}
	if !UsesPostgres(gw) {
		mounts = append(mounts, corev1.VolumeMount{Name: "openshell-data", MountPath: DataDir})
	}
	if in.OIDC != nil {
		// Only the issuer's CA: the gateway needs no other outbound trust
		// (it may replace the system store).
		mounts = append(mounts, corev1.VolumeMount{Name: "oidc-ca", MountPath: OIDCCADir, ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: "oidc-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: n.OIDCCA}}}})
		env = append(env, corev1.EnvVar{Name: "SSL_CERT_FILE", Value: OIDCCADir + "/ca.crt"})
	}
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
			Annotations: map[string]string{AnnotationConfigHash: configHash},
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
		return &appsv1.Deployment{ObjectMeta: meta(gw, n.Fullname, gw.Namespace, "gateway"),
			Spec: appsv1.DeploymentSpec{Replicas: replicas, Selector: sel, Template: tmpl}}
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

// NetworkPolicies: the gateway accepts ingress only on its gRPC and metrics
// ports (probes come from the kubelet, which NetworkPolicy does not
// filter); sandbox pods accept ingress only from gateway pods, on SSH.
// Sandbox pods are selected by the label the Agent Sandbox controller puts
// on every pod it creates, so the policy matches what actually runs.
func NetworkPolicies(gw *openshellv1alpha1.OpenShellGateway) []client.Object {
	n := NamesFor(gw)
	tcp := corev1.ProtocolTCP
	port := func(p int) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: ptr.To(intstr.FromInt(p))}
	}
	return []client.Object{
		&networkingv1.NetworkPolicy{
			ObjectMeta: meta(gw, n.Fullname+"-gateway", gw.Namespace, "network-policy"),
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(gw)},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(PortGRPC), port(PortMetrics)}}},
			},
		},
		&networkingv1.NetworkPolicy{
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
		},
	}
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

// InternalEndpoint is the in-cluster gateway address.
func InternalEndpoint(gw *openshellv1alpha1.OpenShellGateway) string {
	return fmt.Sprintf("https://%s.%s.svc:%d", NamesFor(gw).Fullname, gw.Namespace, PortGRPC)
}
