package sandbox

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/status"
)

// envSecretDrift names, sorted, the Secrets whose version now differs from
// the one the running sandbox was created from (created: nil for a sandbox
// created before versions were recorded, which has none to compare).
// A Secret env no longer reads is not drift: dropping it from env is an
// immutable change of its own. Pure.
func envSecretDrift(created, now map[string]string) []string {
	if created == nil {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(now)) {
		if v, ok := created[name]; !ok || v != now[name] {
			out = append(out, name)
		}
	}
	return out
}

// reportEnvSecrets says, on a sandbox whose env reads Secrets, whether the
// gateway sandbox runs with their current values (EnvSecretsCurrent), and
// records the versions of a sandbox created before they were recorded
// (the values it runs with are then unknown: those of now, the best known).
// No release can change a running sandbox's environment in place, so a
// change is never silent: it is reported, with an event, or the sandbox is
// recreated (spec.restartOnSecretChange, in sync).
func (r *Reconciler) reportEnvSecrets(sb *openshellv1alpha1.OpenShellSandbox, d gatewaySandbox) {
	st := &sb.Status
	if len(d.envVersions) == 0 || st.SandboxID == "" {
		meta.RemoveStatusCondition(&st.Conditions, openshellv1alpha1.SandboxConditionEnvSecretsCurrent)
		return
	}
	if st.EnvSecretVersions == nil {
		st.EnvSecretVersions = maps.Clone(d.envVersions)
	}
	changed := envSecretDrift(st.EnvSecretVersions, d.envVersions)
	if len(changed) == 0 {
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionEnvSecretsCurrent, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonEnvSecretsCurrent,
			"the sandbox runs with the current values of the Secrets its env reads")
		return
	}
	msg := fmt.Sprintf("Secret %s, which env reads, changed after the sandbox was created; it still runs with the values it was created with: "+
		"recreate it, or set spec.restartOnSecretChange: true to have it recreated on such a change", strings.Join(changed, ", "))
	if c := meta.FindStatusCondition(st.Conditions, openshellv1alpha1.SandboxConditionEnvSecretsCurrent); c == nil || c.Status != metav1.ConditionFalse || c.Message != msg {
		r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, openshellv1alpha1.SandboxReasonEnvSecretChanged, "Observe", "%s", msg)
	}
	status.SetCondition(sb, openshellv1alpha1.SandboxConditionEnvSecretsCurrent, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonEnvSecretChanged, msg)
}
