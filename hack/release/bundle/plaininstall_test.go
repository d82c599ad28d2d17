package bundle

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/platform"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestPlainInstallsServeTheRelay builds the plain (non-OLM) installs as
// `kubectl apply -k` would and checks that each wires up everything the
// relay needs that OLM would otherwise create: a Service selecting the
// relay's pods, the APIService pointing at it with its CA injected, the
// serving certificate issued into the Secret the Deployment mounts where the
// relay reads it, and the two front-proxy bindings (system:auth-delegator;
// extension-apiserver-authentication-reader in kube-system) naming the
// relay's ServiceAccount. Each mismatch would leave `kubectl openshell`
// failing on a cluster installed without OLM.
func TestPlainInstallsServeTheRelay(t *testing.T) {
	for _, overlay := range []string{"default", "openshift"} {
		t.Run(overlay, func(t *testing.T) {
			docs, err := build(filepath.Join(framework.RepoRoot(), "config", overlay))
			if err != nil {
				t.Fatal(err)
			}
			if err := checkRelay(overlay, docs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func checkRelay(overlay string, docs []*unstructured.Unstructured) error {
	find := func(kind, ns, name string) *unstructured.Unstructured {
		for _, u := range docs {
			if u.GetKind() == kind && u.GetNamespace() == ns && u.GetName() == name {
				return u
			}
		}
		return nil
	}
	var dep *appsv1.Deployment
	for _, u := range docs {
		if u.GetKind() == "Deployment" && u.GetLabels()["app.kubernetes.io/name"] == "openshell-relay" {
			dep = &appsv1.Deployment{}
			if err := convert(u, dep); err != nil {
				return err
			}
		}
	}
	if dep == nil {
		return fmt.Errorf("no relay Deployment")
	}
	ns, sa := dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName
	// The relay runs the operator's image, as pinned for the manager.
	for _, u := range docs {
		if u.GetKind() != "Deployment" || u.GetLabels()["app.kubernetes.io/name"] != "openshell-operator" {
			continue
		}
		mgr := &appsv1.Deployment{}
		if err := convert(u, mgr); err != nil {
			return err
		}
		if got, want := dep.Spec.Template.Spec.Containers[0].Image, mgr.Spec.Template.Spec.Containers[0].Image; got != want {
			return fmt.Errorf("the relay runs image %q, the operator %q", got, want)
		}
	}
	pod := labels.Set(dep.Spec.Template.Labels)
	ctr := dep.Spec.Template.Spec.Containers[0]

	// The APIService and the Service it names.
	apiName := accessv1alpha1.Version + "." + accessv1alpha1.Group
	api := find("APIService", "", apiName)
	if api == nil {
		return fmt.Errorf("no APIService %s", apiName)
	}
	group, _, _ := unstructured.NestedString(api.Object, "spec", "group")
	version, _, _ := unstructured.NestedString(api.Object, "spec", "version")
	svcNS, _, _ := unstructured.NestedString(api.Object, "spec", "service", "namespace")
	svcName, _, _ := unstructured.NestedString(api.Object, "spec", "service", "name")
	rawPort, _, _ := unstructured.NestedFieldNoCopy(api.Object, "spec", "service", "port")
	port, _ := strconv.ParseInt(fmt.Sprint(rawPort), 10, 32) // kustomize's maps hold int, not int64
	if group != accessv1alpha1.Group || version != accessv1alpha1.Version {
		return fmt.Errorf("APIService serves %s/%s, the relay %s/%s", group, version, accessv1alpha1.Group, accessv1alpha1.Version)
	}
	if svcNS != ns {
		return fmt.Errorf("APIService names a Service in %q, the relay runs in %q", svcNS, ns)
	}
	svcU := find("Service", ns, svcName)
	if svcU == nil {
		return fmt.Errorf("APIService names Service %s/%s, which the install does not create", ns, svcName)
	}
	svc := &corev1.Service{}
	if err := convert(svcU, svc); err != nil {
		return err
	}
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod) {
		return fmt.Errorf("Service %s selects %v, not the relay's pods %v", svc.Name, svc.Spec.Selector, pod)
	}
	var target *intstr.IntOrString
	for _, p := range svc.Spec.Ports {
		if int64(p.Port) == port {
			target = &p.TargetPort
		}
	}
	if target == nil {
		return fmt.Errorf("Service %s has no port %d, which the APIService uses", svc.Name, port)
	}
	served := false
	for _, p := range ctr.Ports {
		if (target.Type == intstr.String && p.Name == target.StrVal) || (target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
			served = p.ContainerPort == 8443
		}
	}
	if !served {
		return fmt.Errorf("Service %s's port %d targets %s, not the relay's 8443", svc.Name, port, target.String())
	}

	// The serving certificate, mounted where the relay reads it.
	secret := ""
	for _, m := range ctr.VolumeMounts {
		if m.MountPath != operator.RelayCertDir {
			continue
		}
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			files := map[string]string{}
			for _, it := range v.Secret.Items {
				files[it.Key] = it.Path
			}
			if files[corev1.TLSCertKey] != operator.RelayCertFile || files[corev1.TLSPrivateKeyKey] != operator.RelayKeyFile {
				return fmt.Errorf("the relay's certificate volume maps %v, want tls.crt→%s and tls.key→%s", files, operator.RelayCertFile, operator.RelayKeyFile)
			}
			secret = v.Secret.SecretName
		}
	}
	if secret == "" {
		return fmt.Errorf("nothing mounts a serving certificate at %s", operator.RelayCertDir)
	}
	dns := svc.Name + "." + ns + ".svc"
	switch overlay {
	case "default": // cert-manager
		var cert *unstructured.Unstructured
		for _, u := range docs {
			if s, _, _ := unstructured.NestedString(u.Object, "spec", "secretName"); u.GetKind() == "Certificate" && u.GetNamespace() == ns && s == secret {
				cert = u
			}
		}
		if cert == nil {
			return fmt.Errorf("no Certificate issues Secret %s", secret)
		}
		names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		if len(names) != 2 || names[0] != dns || names[1] != dns+".cluster.local" {
			return fmt.Errorf("Certificate %s is for %v, the APIService calls %s", cert.GetName(), names, dns)
		}
		if got, want := api.GetAnnotations()["cert-manager.io/inject-ca-from"], ns+"/"+cert.GetName(); got != want {
			return fmt.Errorf("APIService injects its CA from %q, want %q", got, want)
		}
		// Every Certificate (the webhook's too) names an Issuer the
		// install creates, under the name it has after namePrefix.
		for _, u := range docs {
			if u.GetKind() != "Certificate" {
				continue
			}
			kind, _, _ := unstructured.NestedString(u.Object, "spec", "issuerRef", "kind")
			name, _, _ := unstructured.NestedString(u.Object, "spec", "issuerRef", "name")
			if kind != "Issuer" || find("Issuer", u.GetNamespace(), name) == nil {
				return fmt.Errorf("Certificate %s names %s %q, which the install does not create", u.GetName(), kind, name)
			}
		}
	case "openshift": // the service CA
		if got := svc.Annotations["service.beta.openshift.io/serving-cert-secret-name"]; got != secret {
			return fmt.Errorf("Service %s asks the service CA for Secret %q, the relay mounts %q", svc.Name, got, secret)
		}
		if api.GetAnnotations()["service.beta.openshift.io/inject-cabundle"] != "true" {
			return fmt.Errorf("APIService %s gets no CA bundle from the service CA", apiName)
		}
	}

	// The front-proxy bindings and the relay's own role, for its
	// ServiceAccount.
	bound := func(kind, bindingNS, roleKind, role string) error {
		for _, u := range docs {
			if u.GetKind() != kind || u.GetNamespace() != bindingNS {
				continue
			}
			b := &rbacv1.RoleBinding{} // a ClusterRoleBinding converts alike
			if err := convert(u, b); err != nil {
				return err
			}
			if b.RoleRef.Kind != roleKind || b.RoleRef.Name != role {
				continue
			}
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == ns {
					return nil
				}
			}
			return fmt.Errorf("%s %s binds %s %s, but not to ServiceAccount %s/%s", kind, b.Name, roleKind, role, ns, sa)
		}
		return fmt.Errorf("no %s binds %s %s (namespace %q)", kind, roleKind, role, bindingNS)
	}
	relayRole := ""
	for _, u := range docs {
		if u.GetKind() == "ClusterRole" && u.GetLabels()["app.kubernetes.io/part-of"] == "openshell-operator" && u.GetName() == sa {
			relayRole = u.GetName()
		}
	}
	for _, b := range []struct{ kind, ns, roleKind, role string }{
		{"ClusterRoleBinding", "", "ClusterRole", "system:auth-delegator"},
		{"RoleBinding", "kube-system", "Role", "extension-apiserver-authentication-reader"},
		{"ClusterRoleBinding", "", "ClusterRole", relayRole},
	} {
		if err := bound(b.kind, b.ns, b.roleKind, b.role); err != nil {
			return err
		}
	}

	// Its NetworkPolicies admit the aggregator's calls on 8443: the
	// bundle's own from the host network only, and the one the operator
	// keeps off OVN-Kubernetes from every peer, exactly as it renders it
	// (shipped too, so that a new install is reachable on any network).
	var hostOnly, open bool
	var wantOpen *networkingv1.NetworkPolicy
	for _, np := range platform.APIServerIngress(ns, platform.NamePrefix) {
		if labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(pod) {
			wantOpen = np
		}
	}
	for _, u := range docs {
		if u.GetKind() != "NetworkPolicy" || u.GetNamespace() != ns {
			continue
		}
		np := &networkingv1.NetworkPolicy{}
		if err := convert(u, np); err != nil {
			return err
		}
		if len(np.Spec.PodSelector.MatchLabels) == 0 || !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(pod) {
			continue
		}
		switch {
		case wantOpen != nil && np.Name == wantOpen.Name:
			if !reflect.DeepEqual(np.Spec, wantOpen.Spec) {
				return fmt.Errorf("NetworkPolicy %s is not what the operator renders: %+v", np.Name, np.Spec)
			}
			open = true
		case hostOnlyAPI(np):
			hostOnly = true
		default:
			return fmt.Errorf("NetworkPolicy %s selects the relay with other rules: %+v", np.Name, np.Spec)
		}
	}
	if !hostOnly || !open {
		return fmt.Errorf("the relay's NetworkPolicies: host network only %v, every peer (operator-kept) %v", hostOnly, open)
	}
	return nil
}

// hostOnlyAPI: the policy admits the relay's API port (8443) from the host
// network only, and its other ports (metrics) only from peers it names.
func hostOnlyAPI(np *networkingv1.NetworkPolicy) bool {
	api := false
	for _, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 {
			return false // open to every peer
		}
		for _, p := range rule.Ports {
			if p.Port.IntValue() != 8443 {
				continue
			}
			if len(rule.Ports) != 1 || len(rule.From) != 1 || rule.From[0].NamespaceSelector == nil ||
				!reflect.DeepEqual(rule.From[0].NamespaceSelector.MatchLabels, map[string]string{"policy-group.network.openshift.io/host-network": ""}) {
				return false
			}
			api = true
		}
	}
	return api
}
