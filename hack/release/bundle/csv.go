package bundle

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/openshell/openshell-operator/hack/release/images"
)

// webhookServicePort is the port OLM's webhook Service exposes.
const webhookServicePort = 443

// FeatureDisconnected is the CSV annotation OperatorHub filters on for
// operators that install from a mirror.
const FeatureDisconnected = "features.operators.openshift.io/disconnected"

// allPinned tells whether every related image is referenced by digest.
func allPinned(related []operatorsv1alpha1.RelatedImage) bool {
	for _, r := range related {
		if !images.Pinned(r.Image) {
			return false
		}
	}
	return len(related) > 0
}

// assembleCSV completes the CSV base with what the manifests say.
func assembleCSV(c *collected, o Options) (*operatorsv1alpha1.ClusterServiceVersion, error) {
	csv := c.csv.DeepCopy()
	csv.Name = o.Package + ".v" + o.Version
	csv.Namespace = "placeholder"
	v, err := parseVersion(o.Version)
	if err != nil {
		return nil, err
	}
	csv.Spec.Version = v
	csv.Spec.Replaces = o.Replaces
	if csv.Annotations == nil {
		csv.Annotations = map[string]string{}
	}
	if o.SkipRange != "" {
		csv.Annotations["olm.skipRange"] = o.SkipRange
	}

	// Deployments, with the images pinned: the operator's, and the relay's
	// (the same image, its relay command).
	var deps []operatorsv1alpha1.StrategyDeploymentSpec
	var related []operatorsv1alpha1.RelatedImage
	accounts := map[string]bool{}
	operatorDeployment := ""
	for _, d := range c.deployments {
		spec := d.Spec.DeepCopy()
		for i := range spec.Template.Spec.Containers {
			ct := &spec.Template.Spec.Containers[i]
			switch ct.Name {
			case "manager":
				if o.Images.Operator != "" {
					ct.Image = o.Images.Operator
				}
				operatorDeployment = d.Name
				csv.Annotations["containerImage"] = ct.Image
				// The operator image is also the must-gather image (its
				// /usr/bin/gather is the manager binary).
				csv.Annotations[AnnotationMustGatherImage] = ct.Image
				related = append(related, operatorsv1alpha1.RelatedImage{Name: "openshell-operator", Image: ct.Image})
			case "relay":
				if o.Images.Operator != "" {
					ct.Image = o.Images.Operator
				}
			}
			for j := range ct.Env {
				e := &ct.Env[j]
				if !strings.HasPrefix(e.Name, relatedPrefix) {
					continue
				}
				if img, ok := o.Images.Related[e.Name]; ok {
					e.Value = img
				}
				related = append(related, operatorsv1alpha1.RelatedImage{
					Name: strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(e.Name, relatedPrefix)), "_", "-"), Image: e.Value})
			}
		}
		accounts[spec.Template.Spec.ServiceAccountName] = true
		deps = append(deps, operatorsv1alpha1.StrategyDeploymentSpec{Name: d.Name, Spec: *spec,
			Label: d.Labels})
	}
	if operatorDeployment == "" {
		return nil, fmt.Errorf("no Deployment runs the manager container")
	}
	sort.Slice(related, func(i, j int) bool { return related[i].Name < related[j].Name })
	csv.Spec.RelatedImages = related
	// On a disconnected cluster an ImageDigestMirrorSet redirects only
	// digest references, so the feature holds only when every image the
	// operator can run is pinned; it turns "true" when make pin-images has.
	csv.Annotations[FeatureDisconnected] = strconv.FormatBool(allPinned(related))

	// Permissions: what each Deployment's ServiceAccount is bound to.
	var cluster, namespaced []operatorsv1alpha1.StrategyDeploymentPermissions
	for _, b := range c.cbindings {
		sa, ok := boundAccount(b.Subjects, accounts)
		if !ok {
			continue
		}
		r, ok := c.clusterRoles[b.RoleRef.Name]
		if !ok {
			return nil, fmt.Errorf("ClusterRoleBinding %s refers to unknown ClusterRole %s", b.Name, b.RoleRef.Name)
		}
		cluster = append(cluster, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: r.Rules})
	}
	for _, b := range c.bindings {
		sa, ok := boundAccount(b.Subjects, accounts)
		if !ok {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch b.RoleRef.Kind {
		case "Role":
			r, ok := c.roles[b.RoleRef.Name]
			if !ok {
				return nil, fmt.Errorf("RoleBinding %s refers to unknown Role %s", b.Name, b.RoleRef.Name)
			}
			rules = r.Rules
		case "ClusterRole":
			r, ok := c.clusterRoles[b.RoleRef.Name]
			if !ok {
				return nil, fmt.Errorf("RoleBinding %s refers to unknown ClusterRole %s", b.Name, b.RoleRef.Name)
			}
			rules = r.Rules
		}
		namespaced = append(namespaced, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: rules})
	}
	csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{
		StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
		StrategySpec: operatorsv1alpha1.StrategyDetailsDeployment{
			DeploymentSpecs: deps, ClusterPermissions: cluster, Permissions: namespaced,
		},
	}

	// Webhooks: OLM creates the Service and the serving certificate.
	var defs []operatorsv1alpha1.WebhookDescription
	describe := func(typ operatorsv1alpha1.WebhookAdmissionType, name string, cc admissionregistrationv1.WebhookClientConfig,
		rules []admissionregistrationv1.RuleWithOperations, fp *admissionregistrationv1.FailurePolicyType,
		se *admissionregistrationv1.SideEffectClass, versions []string, timeout *int32, objects *metav1.LabelSelector) operatorsv1alpha1.WebhookDescription {
		path := ""
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		return operatorsv1alpha1.WebhookDescription{
			GenerateName: name, Type: typ, DeploymentName: operatorDeployment,
			ContainerPort: webhookServicePort, TargetPort: ptrIntOrString(9443), Rules: rules,
			FailurePolicy: fp, SideEffects: sideEffects(se), AdmissionReviewVersions: versions,
			TimeoutSeconds: timeout, WebhookPath: ptr.To(path), ObjectSelector: objects,
		}
	}
	for _, cfg := range c.webhooks {
		for _, w := range cfg.Webhooks {
			defs = append(defs, describe(operatorsv1alpha1.ValidatingAdmissionWebhook, w.Name, w.ClientConfig, w.Rules,
				w.FailurePolicy, w.SideEffects, w.AdmissionReviewVersions, w.TimeoutSeconds, w.ObjectSelector))
		}
	}
	for _, cfg := range c.mutating {
		for _, w := range cfg.Webhooks {
			d := describe(operatorsv1alpha1.MutatingAdmissionWebhook, w.Name, w.ClientConfig, w.Rules,
				w.FailurePolicy, w.SideEffects, w.AdmissionReviewVersions, w.TimeoutSeconds, w.ObjectSelector)
			d.ReinvocationPolicy = w.ReinvocationPolicy
			defs = append(defs, d)
		}
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].GenerateName < defs[j].GenerateName })
	csv.Spec.WebhookDefinitions = defs

	examples, err := almExamples(c.samples)
	if err != nil {
		return nil, err
	}
	csv.Annotations["alm-examples"] = examples
	// The console offers to create the first gateway right after install,
	// from the same (tested) sample the alm-examples show.
	for _, sm := range c.samples {
		if sm["kind"] == "OpenShellGateway" {
			b, err := json.Marshal(sm)
			if err != nil {
				return nil, err
			}
			csv.Annotations[AnnotationInitializationResource] = string(b)
		}
	}
	if csv.Annotations[AnnotationInitializationResource] == "" {
		return nil, fmt.Errorf("no OpenShellGateway sample for %s", AnnotationInitializationResource)
	}
	return csv, nil
}

// boundAccount is the Deployment ServiceAccount a binding's subjects name.
func boundAccount(subjects []rbacv1.Subject, accounts map[string]bool) (string, bool) {
	for _, s := range subjects {
		if s.Kind == rbacv1.ServiceAccountKind && accounts[s.Name] {
			return s.Name, true
		}
	}
	return "", false
}

func sideEffects(s *admissionregistrationv1.SideEffectClass) *admissionregistrationv1.SideEffectClass {
	if s == nil {
		none := admissionregistrationv1.SideEffectClassNone
		return &none
	}
	return s
}
