// Package routeadmission reads what OpenShift's routers said of a Route:
// the gateway's own Route and the external ports Routes are judged alike.
package routeadmission

import (
	"fmt"

	routev1 "github.com/openshift/api/route/v1"
	corev1 "k8s.io/api/core/v1"
)

// Read says whether a router admitted rt for its current host (only what
// was said of that host counts: a previous host's admission would give
// clients an address that no longer leads here), the host admitted, and
// why: the admitting router, or the last refusal when none admitted it
// (with several router shards, one may refuse what another admits). msg
// is empty while no router has said anything. Pure.
func Read(rt *routev1.Route) (admitted bool, host, msg string) {
	for _, ing := range rt.Status.Ingress {
		if rt.Spec.Host != "" && ing.Host != rt.Spec.Host {
			continue // said of a previous host
		}
		for _, c := range ing.Conditions {
			switch {
			case c.Type != routev1.RouteAdmitted:
			case c.Status == corev1.ConditionTrue:
				return true, ing.Host, fmt.Sprintf("admitted by router %s for host %s", ing.RouterName, ing.Host)
			default:
				msg = fmt.Sprintf("router %s did not admit the Route: %s %s", ing.RouterName, c.Reason, c.Message)
			}
		}
	}
	return false, "", msg
}
