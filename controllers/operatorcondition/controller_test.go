package operatorcondition

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

func TestUpgradeable(t *testing.T) {
	gw := func(ns, name, tlsReason string) openshellv1alpha1.OpenShellGateway {
		g := openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if tlsReason != "" {
			g.Status.Conditions = []metav1.Condition{{Type: openshellv1alpha1.GatewayConditionTLSReady, Status: metav1.ConditionTrue, Reason: tlsReason}}
		}
		return g
	}
	tests := []struct {
		name     string
		gateways []openshellv1alpha1.OpenShellGateway
		status   metav1.ConditionStatus
		reason   string
		mentions []string
	}{
		{"no gateways", nil, metav1.ConditionTrue, ReasonReady, nil},
		{"gateways with settled certificates, or none yet", []openshellv1alpha1.OpenShellGateway{
			gw("a", "one", openshellv1alpha1.GatewayReasonCertificatesReady), gw("b", "two", "")}, metav1.ConditionTrue, ReasonReady, nil},
		{"a CA rotation holds upgrades and names the gateways", []openshellv1alpha1.OpenShellGateway{
			gw("b", "two", openshellv1alpha1.GatewayReasonCARotating), gw("a", "one", openshellv1alpha1.GatewayReasonCertificatesReady),
			gw("a", "three", openshellv1alpha1.GatewayReasonCARotating)},
			metav1.ConditionFalse, ReasonCARotationInProgress, []string{"2 gateway(s)", "a/three, b/two"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Upgradeable(tt.gateways)
			if c.Type != "Upgradeable" || c.Status != tt.status || c.Reason != tt.reason {
				t.Fatalf("got %s=%s (%s), want %s (%s)", c.Type, c.Status, c.Reason, tt.status, tt.reason)
			}
			for _, m := range tt.mentions {
				if !strings.Contains(c.Message, m) {
					t.Errorf("message %q does not mention %q", c.Message, m)
				}
			}
		})
	}
}
