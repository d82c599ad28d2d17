package tenancy

import (
	"fmt"
	"slices"

	"github.com/openshell/openshell-operator/internal/operatorenv"
)

// PlatformFromEnv reads the cluster admin's tenancy setting: gateways are
// served in the operator's own namespace and in OPENSHELL_GATEWAY_NAMESPACES
// (those labelled openshell.ai/serve-gateways=true);
// operand images are overridable only with
// OPENSHELL_ALLOW_OPERAND_IMAGE_OVERRIDES=true. getenv is os.Getenv in
// production; tests pass the environment OLM would set.
func PlatformFromEnv(getenv func(string) string) (Platform, error) {
	p := Platform{OperatorNamespace: getenv(operatorenv.EnvOperatorNamespace)}
	if p.OperatorNamespace != "" {
		p.GatewayNamespaces = append(p.GatewayNamespaces, p.OperatorNamespace)
	}
	more, err := operatorenv.Namespaces(operatorenv.EnvGatewayNamespaces, getenv(operatorenv.EnvGatewayNamespaces))
	if err != nil {
		return p, err
	}
	for _, ns := range more {
		if !slices.Contains(p.GatewayNamespaces, ns) {
			p.GatewayNamespaces = append(p.GatewayNamespaces, ns)
		}
	}
	switch v := getenv(operatorenv.EnvAllowImageOverrides); v {
	case "", "false":
	case "true":
		p.AllowImageOverrides = true
	default:
		return p, fmt.Errorf("%s must be true or false, not %q", operatorenv.EnvAllowImageOverrides, v)
	}
	return p, nil
}
