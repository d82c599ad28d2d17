// Package scheme builds the runtime.Scheme the operator and its tests use:
// Kubernetes built-ins, our API, and the typed third-party APIs we read or
// write (OpenShift Route/SCC/config/console, cert-manager, OLM's OperatorCondition, the Prometheus Operator's rules, sig-network's
// AdminNetworkPolicy, the Gateway API's HTTPRoute, BackendTLSPolicy and Gateway).
package scheme

import (
	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	configv1 "github.com/openshift/api/config/v1"
	consolev1 "github.com/openshift/api/console/v1"
	routev1 "github.com/openshift/api/route/v1"
	securityv1 "github.com/openshift/api/security/v1"
	operatorsv2 "github.com/operator-framework/api/pkg/operators/v2"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// New returns a scheme with every type the operator uses registered.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		openshellv1alpha1.AddToScheme,
		routev1.Install,
		securityv1.Install,
		configv1.Install,
		consolev1.Install,
		cmv1.AddToScheme,
		operatorsv2.AddToScheme,
		monitoringv1.AddToScheme,
		anpv1alpha1.Install,
		gatewayv1.Install,
	} {
		utilruntime.Must(add(s))
	}
	return s
}
