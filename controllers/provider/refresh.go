package provider

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
)

// Credential refresh (spec.refresh, 0.1 line). The gateway mints each
// refreshed credential itself, from material the operator configures
// (ConfigureProviderRefresh) out of a Secret, and writes it into the
// provider record: from then on the credential is the gateway's. So the
// operator never writes or deletes a refreshed key with UpdateProvider (the
// gateway refuses it, FailedPrecondition) and does not read the record's
// newer resource version, which every mint makes, as drift. It polls
// GetProviderRefreshStatus for status, and turns the rotate annotation into
// one RotateProviderCredential per key.

// Material bounds and refusals, as the gateway has them (64 entries, keys
// of 256 and values of 8192 bytes). A token endpoint comes from the profile
// only; the gateway refuses one in material too, but naming it here gives
// the tenant the reason before any call.
const (
	maxMaterialEntries  = 64
	maxMaterialKeyLen   = 256
	maxMaterialValueLen = 8192
	maxLastError        = 512
	// refreshPoll is how soon a refresh whose first mint is still to come,
	// or whose last one failed, is asked about again: the gateway's refresh
	// worker runs about every minute.
	refreshPoll = 30 * time.Second
)

// refusedMaterial are keys that would choose where the gateway sends the
// material.
var refusedMaterial = []string{"token_url", "token_uri", "sts_endpoint_url"}

// strategyWire maps the API's strategies to the wire's.
var strategyWire = map[openshellv1alpha1.CredentialRefreshStrategy]openshellv1.ProviderCredentialRefreshStrategy{
	openshellv1alpha1.RefreshOAuth2RefreshToken:      openshellv1.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_OAUTH2_REFRESH_TOKEN,
	openshellv1alpha1.RefreshOAuth2ClientCredentials: openshellv1.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_OAUTH2_CLIENT_CREDENTIALS,
	openshellv1alpha1.RefreshGoogleServiceAccountJWT: openshellv1.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_GOOGLE_SERVICE_ACCOUNT_JWT,
	openshellv1alpha1.RefreshAWSSTSAssumeRole:        openshellv1.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_AWS_STS_ASSUME_ROLE,
}

// material is one refresh's material Secret, read.
type material struct {
	values          map[string]string
	resourceVersion string
}

// refreshedKeys are the credential keys the gateway owns at entry: those
// spec.refresh names and those still configured there (a refresh being
// removed is the gateway's until its deletion).
func refreshedKeys(p *openshellv1alpha1.OpenShellProvider, e *openshellv1alpha1.ProviderGatewayStatus) []string {
	var keys []string
	for _, r := range p.Spec.Refresh {
		keys = append(keys, r.CredentialKey)
	}
	if e != nil {
		for _, r := range e.Refresh {
			keys = append(keys, r.CredentialKey)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// without is m less keys.
func without(m map[string]string, keys []string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

// checkMaterial refuses material the gateway must not be given: a key
// choosing the token endpoint, an AWS source key pair given in part or not
// at all (the gateway would assume the role as itself), or more than it
// takes. Only key names appear in the message. Pure.
func checkMaterial(r openshellv1alpha1.CredentialRefresh, values map[string]string) string {
	if len(values) > maxMaterialEntries {
		return fmt.Sprintf("Secret %s has %d keys; the gateway takes at most %d", r.MaterialSecretRef.Name, len(values), maxMaterialEntries)
	}
	for k, v := range values {
		switch {
		case slices.Contains(refusedMaterial, k):
			return fmt.Sprintf("Secret %s has key %s: the token endpoint is the provider profile's, never the material's", r.MaterialSecretRef.Name, k)
		case len(k) > maxMaterialKeyLen || len(v) > maxMaterialValueLen:
			return fmt.Sprintf("Secret %s key %.64s is longer than the gateway takes (keys %d, values %d bytes)",
				r.MaterialSecretRef.Name, k, maxMaterialKeyLen, maxMaterialValueLen)
		}
	}
	if r.Strategy == openshellv1alpha1.RefreshAWSSTSAssumeRole &&
		(strings.TrimSpace(values["aws_access_key_id"]) == "" || strings.TrimSpace(values["aws_secret_access_key"]) == "") {
		return fmt.Sprintf("Secret %s must hold aws_access_key_id and aws_secret_access_key: without them the gateway "+
			"would assume the role with its own identity", r.MaterialSecretRef.Name)
	}
	return ""
}

// readMaterial reads each refresh's material Secret (never cached), or says
// why one cannot be used.
func (r *Reconciler) readMaterial(ctx context.Context, p *openshellv1alpha1.OpenShellProvider) (map[string]material, string, error) {
	out := map[string]material{}
	for _, ref := range p.Spec.Refresh {
		s := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ref.MaterialSecretRef.Name}, s)
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Sprintf("Secret %s not found in namespace %s", ref.MaterialSecretRef.Name, p.Namespace), nil
		case apierrors.IsForbidden(err):
			return nil, fmt.Sprintf("cannot read Secret %s: Forbidden", ref.MaterialSecretRef.Name), nil
		case err != nil:
			return nil, "", err
		}
		m := material{values: make(map[string]string, len(s.Data)), resourceVersion: s.ResourceVersion}
		for k, v := range s.Data {
			m.values[k] = string(v)
		}
		if msg := checkMaterial(ref, m.values); msg != "" {
			return nil, msg, nil
		}
		out[ref.CredentialKey] = m
	}
	return out, "", nil
}

// refreshOutcome is one gateway's part of the Refreshed condition.
type refreshOutcome struct {
	reason, msg string
	requeue     time.Duration
}

// refreshAll brings the refreshes at every gateway the provider was pushed
// to in line with spec.refresh, and sets Refreshed. It runs after the push,
// whose entries it reads and amends.
func (r *Reconciler) refreshAll(ctx context.Context, p *openshellv1alpha1.OpenShellProvider,
	needed []*openshellv1alpha1.OpenShellGateway) (requeue time.Duration) {
	configured := slices.ContainsFunc(p.Status.Gateways, func(e openshellv1alpha1.ProviderGatewayStatus) bool { return len(e.Refresh) > 0 })
	if len(p.Spec.Refresh) == 0 && !configured {
		status.RemoveCondition(p, openshellv1alpha1.ConditionRefreshed)
		return 0
	}
	mat, refusal, err := r.readMaterial(ctx, p)
	if err != nil {
		refusal = "reading refresh material: " + err.Error()
	}
	var outcomes []refreshOutcome
	for _, gw := range needed {
		i := slices.IndexFunc(p.Status.Gateways, func(e openshellv1alpha1.ProviderGatewayStatus) bool { return e.Gateway == gwconn.Key(gw) })
		if i < 0 || p.Status.Gateways[i].SecretResourceVersion == "" {
			continue // not pushed there (yet): Ready says why
		}
		outcomes = append(outcomes, r.refreshAt(ctx, gw, p, &p.Status.Gateways[i], mat, refusal))
	}
	return setRefreshed(p, outcomes, refusal)
}

// setRefreshed folds the gateways' outcomes into Refreshed, the most
// pressing first, and returns the soonest requeue. Pure.
func setRefreshed(p *openshellv1alpha1.OpenShellProvider, outcomes []refreshOutcome, refusal string) time.Duration {
	if len(p.Spec.Refresh) == 0 {
		status.RemoveCondition(p, openshellv1alpha1.ConditionRefreshed)
		return soonest(outcomes)
	}
	rank := []string{openshellv1alpha1.RefreshReasonMaterialInvalid, openshellv1alpha1.RefreshReasonRotationInvalid,
		openshellv1alpha1.RefreshReasonNotAllowed, openshellv1alpha1.RefreshReasonNotSupported, openshellv1alpha1.RefreshReasonGatewayError,
		openshellv1alpha1.RefreshReasonFailed, openshellv1alpha1.RefreshReasonPending}
	if refusal != "" {
		status.SetCondition(p, openshellv1alpha1.ConditionRefreshed, metav1.ConditionFalse, openshellv1alpha1.RefreshReasonMaterialInvalid, refusal)
		return soonest(outcomes)
	}
	for _, reason := range rank {
		var msgs []string
		for _, o := range outcomes {
			if o.reason == reason {
				msgs = append(msgs, o.msg)
			}
		}
		if len(msgs) > 0 {
			status.SetCondition(p, openshellv1alpha1.ConditionRefreshed, metav1.ConditionFalse, reason, strings.Join(msgs, "; "))
			return soonest(outcomes)
		}
	}
	if len(outcomes) == 0 {
		status.SetCondition(p, openshellv1alpha1.ConditionRefreshed, metav1.ConditionUnknown, openshellv1alpha1.ProviderReasonUnused,
			"the provider is at no gateway yet")
		return 0
	}
	status.SetCondition(p, openshellv1alpha1.ConditionRefreshed, metav1.ConditionTrue, openshellv1alpha1.RefreshReasonRefreshed,
		fmt.Sprintf("%d credential(s) refreshed by %d gateway(s)", len(p.Spec.Refresh), len(outcomes)))
	return soonest(outcomes)
}

func soonest(outcomes []refreshOutcome) time.Duration {
	var d time.Duration
	for _, o := range outcomes {
		if o.requeue > 0 && (d == 0 || o.requeue < d) {
			d = o.requeue
		}
	}
	return d
}

// refreshAt reconciles the refreshes at one gateway: removes those no
// longer wanted (or no longer allowed), configures new or changed ones,
// rotates on a new annotation value, and polls the status when due.
func (r *Reconciler) refreshAt(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, p *openshellv1alpha1.OpenShellProvider,
	e *openshellv1alpha1.ProviderGatewayStatus, mat map[string]material, refusal string) refreshOutcome {
	key := gwconn.Key(gw)
	if pushedLine(*e) == gatewayline.Legacy {
		return refreshOutcome{reason: openshellv1alpha1.RefreshReasonNotSupported,
			msg: key + " runs the 0.0 line, whose gateways do not refresh credentials"}
	}
	wanted, notAllowed := allowedRefreshes(p, gw)
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		return gatewayError(key, err)
	}
	if err := r.removeRefreshes(ctx, conn, p, e, wanted); err != nil {
		return gatewayError(key, err)
	}
	if len(notAllowed) > 0 {
		return refreshOutcome{reason: openshellv1alpha1.RefreshReasonNotAllowed, msg: fmt.Sprintf("%s allows no %s refresh "+
			"(its spec.sandboxControls.allowedRefreshStrategies): credential(s) %s not refreshed there", key,
			strings.Join(strategiesOf(p, notAllowed), ", "), strings.Join(notAllowed, ", "))}
	}
	if refusal != "" {
		return refreshOutcome{} // the material's refusal is the condition
	}
	polled, err := r.configureRefreshes(ctx, conn, p, e, wanted, mat)
	if err != nil {
		return gatewayError(key, err)
	}
	if msg, err := r.rotate(ctx, conn, p, e, mat); err != nil {
		return gatewayError(key, err)
	} else if msg != "" {
		return refreshOutcome{reason: openshellv1alpha1.RefreshReasonRotationInvalid, msg: msg}
	}
	if !polled && r.refreshPolls.Due(driftKey(p, key), pollPeriod(e, r.DriftPeriod)) {
		if err := r.pollRefreshes(ctx, conn, p, e, mat); err != nil {
			return gatewayError(key, err)
		}
	}
	return judgeRefreshes(key, e.Refresh, r.DriftPeriod, time.Now())
}

func gatewayError(key string, err error) refreshOutcome {
	return refreshOutcome{reason: openshellv1alpha1.RefreshReasonGatewayError, requeue: pushRetry,
		msg: fmt.Sprintf("%s: %s", key, grpcstatus.Convert(err).Message())}
}

// allowedRefreshes splits spec.refresh into what gw allows and the keys it
// does not. Pure.
func allowedRefreshes(p *openshellv1alpha1.OpenShellProvider, gw *openshellv1alpha1.OpenShellGateway) (
	wanted []openshellv1alpha1.CredentialRefresh, notAllowed []string) {
	for _, r := range p.Spec.Refresh {
		if slices.Contains(gw.Spec.SandboxControls.AllowedRefreshStrategies, r.Strategy) {
			wanted = append(wanted, r)
		} else {
			notAllowed = append(notAllowed, r.CredentialKey)
		}
	}
	return wanted, notAllowed
}

func strategiesOf(p *openshellv1alpha1.OpenShellProvider, keys []string) []string {
	var out []string
	for _, r := range p.Spec.Refresh {
		if slices.Contains(keys, r.CredentialKey) && !slices.Contains(out, string(r.Strategy)) {
			out = append(out, string(r.Strategy))
		}
	}
	return out
}

// removeRefreshes deletes at the gateway the refreshes no longer wanted.
// The minted value stays on the provider; the key is the Secret's again, so
// the provider is pushed again (its entry's generation is cleared).
func (r *Reconciler) removeRefreshes(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProvider,
	e *openshellv1alpha1.ProviderGatewayStatus, wanted []openshellv1alpha1.CredentialRefresh) error {
	kept := e.Refresh[:0:0]
	for _, s := range e.Refresh {
		if slices.ContainsFunc(wanted, func(w openshellv1alpha1.CredentialRefresh) bool { return w.CredentialKey == s.CredentialKey }) {
			kept = append(kept, s)
			continue
		}
		_, err := conn.DeleteProviderRefresh(ctx, &openshellv1.DeleteProviderRefreshRequest{WorkspaceScope: gatewayapi.Workspace(e.Workspace),
			Provider: e.Name, CredentialKey: s.CredentialKey, AllowMissing: true,
			RequestId: requestID(p, e.Gateway, "delete", s.CredentialKey, fmt.Sprint(s.ConfiguredGeneration), s.MaterialResourceVersion)})
		if err != nil && grpcstatus.Code(err) != codes.NotFound {
			e.Refresh = append(kept, e.Refresh[len(kept):]...)
			return err
		}
		e.ObservedGeneration = 0
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "RefreshRemoved", "Refresh",
			"gateway %s no longer refreshes credential %s", e.Gateway, s.CredentialKey)
	}
	e.Refresh = kept
	return nil
}

// configureRefreshes configures each wanted refresh whose strategy,
// generation or material changed since it was last configured. polled says
// every entry's status is fresh from the gateway.
func (r *Reconciler) configureRefreshes(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProvider,
	e *openshellv1alpha1.ProviderGatewayStatus, wanted []openshellv1alpha1.CredentialRefresh, mat map[string]material) (bool, error) {
	polled := len(wanted) > 0
	for _, w := range wanted {
		m := mat[w.CredentialKey]
		i := slices.IndexFunc(e.Refresh, func(s openshellv1alpha1.CredentialRefreshStatus) bool { return s.CredentialKey == w.CredentialKey })
		if i >= 0 && e.Refresh[i].Strategy == w.Strategy && e.Refresh[i].ConfiguredGeneration == p.Generation &&
			e.Refresh[i].MaterialResourceVersion == m.resourceVersion {
			polled = false
			continue
		}
		secretKeys := make([]string, 0, len(m.values))
		for k := range m.values {
			secretKeys = append(secretKeys, k)
		}
		sort.Strings(secretKeys)
		resp, err := conn.ConfigureProviderRefresh(ctx, &openshellv1.ConfigureProviderRefreshRequest{
			WorkspaceScope: gatewayapi.Workspace(e.Workspace), Provider: e.Name, CredentialKey: w.CredentialKey,
			Strategy: strategyWire[w.Strategy], Material: m.values, SecretMaterialKeys: secretKeys,
			RequestId: requestID(p, e.Gateway, "configure", w.CredentialKey, fmt.Sprint(p.Generation), m.resourceVersion)})
		if err != nil {
			return false, err
		}
		s := refreshStatus(resp.GetStatus(), w.CredentialKey, m)
		s.Strategy, s.ConfiguredGeneration, s.MaterialResourceVersion = w.Strategy, p.Generation, m.resourceVersion
		if i >= 0 {
			e.Refresh[i] = s
		} else {
			e.Refresh = append(e.Refresh, s)
		}
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "RefreshConfigured", "Refresh",
			"gateway %s refreshes credential %s (%s) from Secret %s", e.Gateway, w.CredentialKey, w.Strategy, w.MaterialSecretRef.Name)
	}
	slices.SortFunc(e.Refresh, func(a, b openshellv1alpha1.CredentialRefreshStatus) int {
		return strings.Compare(a.CredentialKey, b.CredentialKey)
	})
	return polled, nil
}

// rotate asks the gateway to mint every refreshed credential now when the
// rotate annotation holds a value not yet acted on. A rotation is tried
// once per value: a mint that fails is reported by the gateway's status
// (Refreshed=False RefreshFailed), not retried against the token endpoint;
// only a call that may not have arrived is.
func (r *Reconciler) rotate(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProvider,
	e *openshellv1alpha1.ProviderGatewayStatus, mat map[string]material) (string, error) {
	want := p.Annotations[openshellv1alpha1.AnnotationRotateCredentials]
	if want == "" || want == e.Rotation || len(e.Refresh) == 0 {
		return "", nil
	}
	if len(want) > openshellv1alpha1.MaxRotationRequest {
		return fmt.Sprintf("annotation %s is %d characters; at most %d", openshellv1alpha1.AnnotationRotateCredentials,
			len(want), openshellv1alpha1.MaxRotationRequest), nil
	}
	for i := range e.Refresh {
		s := &e.Refresh[i]
		resp, err := conn.RotateProviderCredential(ctx, &openshellv1.RotateProviderCredentialRequest{
			WorkspaceScope: gatewayapi.Workspace(e.Workspace), Provider: e.Name, CredentialKey: s.CredentialKey,
			RequestId: requestID(p, e.Gateway, "rotate", s.CredentialKey, want)})
		switch grpcstatus.Code(err) {
		case codes.OK:
			*s = withGatewayStatus(*s, refreshStatus(resp.GetStatus(), s.CredentialKey, mat[s.CredentialKey]))
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			return "", err
		default:
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, "RotationFailed", "Rotate",
				"gateway %s could not rotate credential %s: %s", e.Gateway, s.CredentialKey, mask(grpcstatus.Convert(err).Message(), mat[s.CredentialKey]))
		}
	}
	e.Rotation = want
	r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "CredentialsRotated", "Rotate",
		"gateway %s asked to mint %d credential(s) now (%s=%s)", e.Gateway, len(e.Refresh), openshellv1alpha1.AnnotationRotateCredentials, want)
	return "", r.pollRefreshes(ctx, conn, p, e, mat)
}

// pollRefreshes reads the gateway's refresh status into e.Refresh.
func (r *Reconciler) pollRefreshes(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProvider,
	e *openshellv1alpha1.ProviderGatewayStatus, mat map[string]material) error {
	if len(e.Refresh) == 0 {
		return nil
	}
	resp, err := conn.GetProviderRefreshStatus(ctx, &openshellv1.GetProviderRefreshStatusRequest{
		WorkspaceScope: gatewayapi.Workspace(e.Workspace), Provider: e.Name})
	if err != nil {
		return err
	}
	r.refreshPolls.Done(driftKey(p, e.Gateway))
	for i := range e.Refresh {
		s := &e.Refresh[i]
		j := slices.IndexFunc(resp.GetCredentials(), func(c *openshellv1.ProviderCredentialRefreshStatus) bool {
			return c.GetCredentialKey() == s.CredentialKey
		})
		if j < 0 {
			// Gone at the gateway (a new database, deleted directly):
			// configured again.
			s.ConfiguredGeneration, s.State = 0, ""
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "Refresh",
				"gateway %s no longer refreshes credential %s: configuring it again", e.Gateway, s.CredentialKey)
			continue
		}
		*s = withGatewayStatus(*s, refreshStatus(resp.GetCredentials()[j], s.CredentialKey, mat[s.CredentialKey]))
	}
	return nil
}

// pollPeriod is how often the refresh status at a gateway is read: the
// sweep period, or refreshPoll while a first mint is awaited or the last
// failed, whichever is shorter.
func pollPeriod(e *openshellv1alpha1.ProviderGatewayStatus, drift time.Duration) time.Duration {
	d := drift
	if d <= 0 {
		d = 10 * time.Minute
	}
	for _, s := range e.Refresh {
		if s.State != refreshStateRefreshed && refreshPoll < d {
			d = refreshPoll
		}
	}
	return d
}

// refreshStateRefreshed is the gateway's status of a credential minted
// without error since.
const refreshStateRefreshed = "refreshed"

// judgeRefreshes is one gateway's outcome from its refresh statuses, and
// when to look again: soon after the next mint is due, or refreshPoll
// while one is awaited or failed. Pure.
func judgeRefreshes(key string, refreshes []openshellv1alpha1.CredentialRefreshStatus, drift time.Duration, now time.Time) refreshOutcome {
	var failed, pending []string
	requeue := drift
	for _, s := range refreshes {
		switch {
		case s.State == "error" || s.FailureCode != "" && s.State != refreshStateRefreshed:
			failed = append(failed, fmt.Sprintf("%s at %s: %s", s.CredentialKey, key, failureText(s)))
		case s.State != refreshStateRefreshed:
			pending = append(pending, s.CredentialKey)
		case s.NextRefreshTime != nil:
			// The gateway's worker mints within about a minute of this.
			if d := s.NextRefreshTime.Sub(now) + time.Minute; d > 0 && (requeue <= 0 || d < requeue) {
				requeue = d
			}
		}
	}
	switch {
	case len(failed) > 0:
		return refreshOutcome{reason: openshellv1alpha1.RefreshReasonFailed, msg: strings.Join(failed, "; "), requeue: refreshPoll}
	case len(pending) > 0:
		return refreshOutcome{reason: openshellv1alpha1.RefreshReasonPending, requeue: refreshPoll,
			msg: fmt.Sprintf("%s has not minted %s yet", key, strings.Join(pending, ", "))}
	}
	return refreshOutcome{requeue: requeue}
}

func failureText(s openshellv1alpha1.CredentialRefreshStatus) string {
	parts := []string{}
	if s.FailureCode != "" {
		parts = append(parts, "failure "+s.FailureCode)
	}
	if s.RecoveryAction != "" {
		parts = append(parts, "recovery "+s.RecoveryAction)
	}
	if s.LastError != "" {
		parts = append(parts, s.LastError)
	}
	if len(parts) == 0 {
		return "the gateway reports state " + s.State
	}
	return strings.Join(parts, ", ")
}

// refreshStatus is the API form of the gateway's status of key, its error
// text masked of every material value. Pure.
func refreshStatus(in *openshellv1.ProviderCredentialRefreshStatus, key string, m material) openshellv1alpha1.CredentialRefreshStatus {
	return openshellv1alpha1.CredentialRefreshStatus{CredentialKey: key, State: in.GetStatus(),
		LastRefreshTime: apiTime(in.GetLastRefreshTime()), NextRefreshTime: apiTime(in.GetNextRefreshTime()),
		ExpirationTime: apiTime(in.GetExpirationTime()), LastErrorTime: apiTime(in.GetLastErrorTime()),
		FailureCode: truncate(in.GetFailureCode(), 64), RecoveryAction: recoveryAction(in.GetRecoveryAction()),
		LastError: truncate(mask(in.GetLastError(), m), maxLastError)}
}

// withGatewayStatus keeps what the operator configured and takes the rest
// from the gateway.
func withGatewayStatus(old, got openshellv1alpha1.CredentialRefreshStatus) openshellv1alpha1.CredentialRefreshStatus {
	got.Strategy, got.ConfiguredGeneration, got.MaterialResourceVersion = old.Strategy, old.ConfiguredGeneration, old.MaterialResourceVersion
	return got
}

func recoveryAction(a openshellv1.ProviderCredentialRefreshRecoveryAction) string {
	if a == openshellv1.ProviderCredentialRefreshRecoveryAction_PROVIDER_CREDENTIAL_REFRESH_RECOVERY_ACTION_UNSPECIFIED {
		return ""
	}
	// RETRY → Retry, FIX_CONFIGURATION → FixConfiguration; an unknown
	// number keeps its digits.
	var b strings.Builder
	for _, w := range strings.Split(strings.TrimPrefix(a.String(), "PROVIDER_CREDENTIAL_REFRESH_RECOVERY_ACTION_"), "_") {
		if w != "" {
			b.WriteString(w[:1] + strings.ToLower(w[1:]))
		}
	}
	return b.String()
}

// mask replaces every material value of four or more bytes in s: the
// gateway's error text is its own (library errors included) and must not
// carry a refresh token into status or events.
func mask(s string, m material) string {
	values := make([]string, 0, len(m.values))
	for _, v := range m.values {
		if len(v) >= 4 {
			values = append(values, v)
		}
	}
	// Longest first, so that a value containing another is masked whole.
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	for _, v := range values {
		s = strings.ReplaceAll(s, v, "[material]")
	}
	return s
}

func truncate(s string, n int) string { return status.Clip(s, n, "…") }

func apiTime(t *timestamppb.Timestamp) *metav1.Time {
	if t == nil || (t.GetSeconds() == 0 && t.GetNanos() == 0) {
		return nil
	}
	mt := metav1.NewTime(t.AsTime().Truncate(time.Second))
	return &mt
}

// requestID is the idempotency key of one refresh call: the same call,
// retried after a lost answer, is answered once. Named by the call's
// identity, never hashed from the material.
func requestID(p *openshellv1alpha1.OpenShellProvider, gateway string, parts ...string) string {
	return sandboxspec.KeyedRequestID(append([]string{"provider-refresh", string(p.UID), gateway}, parts...)...)
}
