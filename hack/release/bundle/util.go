package bundle

import (
	"fmt"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/lib/version"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func parseVersion(v string) (version.OperatorVersion, error) {
	sv, err := semver.Parse(v)
	if err != nil {
		return version.OperatorVersion{}, fmt.Errorf("bundle version %q is not semver: %w", v, err)
	}
	return version.OperatorVersion{Version: sv}, nil
}

func ptrIntOrString(p int) *intstr.IntOrString {
	v := intstr.FromInt(p)
	return &v
}
