package provider

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/status"
)

// Credential refresh (spec.refresh, 0.1 line). The gateway mints each
// refreshed credential itself, from material the operator configures
// (ConfigureProviderRefresh) out of a Secret, and writes it, with the
// profile's additional outputs, into the provider record: from then on
// those keys are the gateway's. So the operator never writes or deletes
// them with UpdateProvider (the gateway refuses it, FailedPrecondition). It
// polls GetProviderRefreshStatus for status, and turns the rotate
// annotation into one RotateProviderCredential per key.

// Material bounds and refusals, as the gateway has them (64 entries, keys
// of 256 and values of 8192 bytes). A token endpoint comes from the profile
// only; the gateway refuses one in material too, but naming it here gives
// the tenant the reason before any call. tenant_id and aws_region become
// part of a URL at the gateway (Microsoft's token endpoint, the regional
// STS host), so they must be a name, not a URL.
const (
	maxMaterialEntries  = 64
	maxMaterialKeyLen   = 256
	maxMaterialValueLen = 8192
	maxLastError        = 512
	// refreshPoll is how soon a refresh whose first mint is still to come
	// is asked about again: the gateway's refresh worker runs about every
	// minute. A failed one is asked about at the sweep period.
	refreshPoll = 30 * time.Second
	// rotateEvery bounds rotations: at most one per provider and gateway a
	// minute (or sweep period, if shorter), however often the annotation
	// changes.
	rotateEvery = time.Minute
)

var (
	refusedMaterial = []string{"token_url", "token_uri", "sts_endpoint_url"}
	tenantID        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,127}$`)
	awsRegion       = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$`)
)

// strategyWire maps the API's strategies to the wire's.
var strategyWire = map[openshellv1alpha1.CredentialRefreshStrategy]openshellv1.ProviderCredentialRefreshStrategy{
	openshellv1alpha1.RefreshOAuth2RefreshToken:      openshellv1.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_OAUTH2_REFRESH_TOKEN,
	openshellv1alpha1.RefreshOAuth2ClientCredentials: openshellv1.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_OAUTH2_CLIENT_CREDENTIALS,
	openshellv1alpha1.RefreshGoogleServiceAccountJWT: openshellv1.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_GOOGLE_SERVICE_ACCOUNT_JWT,
	openshellv1alpha1.RefreshAWSSTSAssumeRole:        openshellv1.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_AWS_STS_ASSUME_ROLE,
}

// material is one refresh's material Secret, read: its values, or why it
// cannot be used (missing: the Secret is gone, and the refresh with it).
type material struct {
	values          map[string]string
	resourceVersion string
	refusal         string
	missing         bool
}

// digest is a SHA-256 of the values (kept in memory only).
func (m material) digest() [sha256.Size]byte {
	h := sha256.New()
	for _, k := range sortedKeys(m.values) {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(m.values[k]), m.values[k])
	}
	var d [sha256.Size]byte
	copy(d[:], h.Sum(nil))
	return d
}

// heldKeys are the credential keys that belong to the gateway at entry e:
// those of the refreshes recorded there (configured, or about to be), and
// their additional outputs. The operator does not write them there. A key
// spec.refresh names is not held before its refresh is recorded: the
// credentials Secret may give its first value.
func heldKeys(e *openshellv1alpha1.ProviderGatewayStatus) []string {
	var keys []string
	if e != nil {
		for _, r := range e.Refresh {
			keys = append(append(keys, r.CredentialKey), r.OutputKeys...)
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
// choosing the token endpoint, a tenant_id or aws_region that is not a
// plain name, an AWS source key pair given in part or not at all (the
// gateway would assume the role as itself), or more than it takes. Only
// key names appear in the message. Pure.
func checkMaterial(r openshellv1alpha1.CredentialRefresh, values map[string]string) string {
	name := r.MaterialSecretRef.Name
	if len(values) > maxMaterialEntries {
		return fmt.Sprintf("Secret %s has %d keys; the gateway takes at most %d", name, len(values), maxMaterialEntries)
	}
	for _, k := range sortedKeys(values) {
		v := values[k]
		switch {
		case slices.Contains(refusedMaterial, k):
			return fmt.Sprintf("Secret %s has key %s: the token endpoint is the provider profile's, never the material's", name, k)
		case len(k) > maxMaterialKeyLen || len(v) > maxMaterialValueLen:
			return fmt.Sprintf("Secret %s key %.64s is longer than the gateway takes (keys %d, values %d bytes)", name, k, maxMaterialKeyLen, maxMaterialValueLen)
		case k == "tenant_id" && !tenantID.MatchString(strings.TrimSpace(v)):
			return fmt.Sprintf("Secret %s key tenant_id must be a directory ID or domain (letters, digits, dots, dashes)", name)
		case k == "aws_region" && !awsRegion.MatchString(strings.TrimSpace(v)):
			return fmt.Sprintf("Secret %s key aws_region must be an AWS region name such as us-east-1", name)
		}
	}
	if r.Strategy == openshellv1alpha1.RefreshAWSSTSAssumeRole &&
		(strings.TrimSpace(values["aws_access_key_id"]) == "" || strings.TrimSpace(values["aws_secret_access_key"]) == "") {
		return fmt.Sprintf("Secret %s must hold aws_access_key_id and aws_secret_access_key: without them the gateway "+
			"would assume the role with its own identity", name)
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// readMaterial reads each refresh's material Secret (never cached), by
// credential key. Only an unexpected API error is an error.
func (r *Reconciler) readMaterial(ctx context.Context, p *openshellv1alpha1.OpenShellProvider) (map[string]material, error) {
	out := map[string]material{}
	for _, ref := range p.Spec.Refresh {
		s := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ref.MaterialSecretRef.Name}, s)
		switch {
		case apierrors.IsNotFound(err):
			out[ref.CredentialKey] = material{missing: true,
				refusal: fmt.Sprintf("Secret %s not found in namespace %s", ref.MaterialSecretRef.Name, p.Namespace)}
			continue
		case apierrors.IsForbidden(err):
			out[ref.CredentialKey] = material{refusal: fmt.Sprintf("cannot read Secret %s: Forbidden", ref.MaterialSecretRef.Name)}
			continue
		case err != nil:
			return nil, fmt.Errorf("read refresh material Secret %s: %w", ref.MaterialSecretRef.Name, err)
		}
		m := material{values: make(map[string]string, len(s.Data)), resourceVersion: s.ResourceVersion}
		for k, v := range s.Data {
			m.values[k] = string(v)
		}
		m.refusal = checkMaterial(ref, m.values)
		out[ref.CredentialKey] = m
	}
	return out, nil
}

// refreshOutcome is one part of the Refreshed condition.
type refreshOutcome struct {
	reason, msg string
	requeue     time.Duration
}

// refreshAll brings the refreshes at every gateway the provider is in sync
// with (synced: the push found the operator's own record there, up to
// date) in line with spec.refresh, and sets Refreshed. A gateway where the
// push failed or met another owner's record is left alone.
func (r *Reconciler) refreshAll(ctx context.Context, orig, p *openshellv1alpha1.OpenShellProvider,
	needed []*openshellv1alpha1.OpenShellGateway, synced map[string]bool) (requeue time.Duration) {
	configured := slices.ContainsFunc(p.Status.Gateways, func(e openshellv1alpha1.ProviderGatewayStatus) bool { return len(e.Refresh) > 0 })
	if len(p.Spec.Refresh) == 0 && !configured {
		meta.RemoveStatusCondition(&p.Status.Conditions, openshellv1alpha1.ConditionRefreshed)
		return 0
	}
	mat, err := r.readMaterial(ctx, p)
	if err != nil {
		status.SetCondition(p, openshellv1alpha1.ConditionRefreshed, metav1.ConditionFalse, openshellv1alpha1.RefreshReasonGatewayError, err.Error())
		return pushRetry
	}
	var outcomes []refreshOutcome
	for _, ref := range p.Spec.Refresh {
		if m := mat[ref.CredentialKey]; m.refusal != "" {
			outcomes = append(outcomes, refreshOutcome{reason: openshellv1alpha1.RefreshReasonMaterialInvalid,
				msg: ref.CredentialKey + ": " + m.refusal})
		}
	}
	for _, gw := range needed {
		key := gwconn.Key(gw)
		e := entryAt(p, key)
		if e == nil || e.SecretResourceVersion == "" || !synced[key] {
			// Not pushed there, or not in sync (Ready says why): nothing
			// is sent there until it is.
			if len(p.Spec.Refresh) > 0 {
				outcomes = append(outcomes, refreshOutcome{reason: openshellv1alpha1.RefreshReasonProviderNotSynced,
					msg: "the provider is not in sync at " + key + " (see Ready): its refreshes there wait"})
			}
			continue
		}
		outcomes = append(outcomes, r.refreshAt(ctx, orig, gw, p, key, mat)...)
	}
	return setRefreshed(p, outcomes)
}

// refreshRank orders Refreshed's reasons, the most pressing first.
var refreshRank = []string{openshellv1alpha1.RefreshReasonMaterialInvalid, openshellv1alpha1.RefreshReasonRotationInvalid,
	openshellv1alpha1.ReasonProviderConflict, openshellv1alpha1.RefreshReasonRejected, openshellv1alpha1.RefreshReasonProviderNotSynced,
	openshellv1alpha1.RefreshReasonNotAllowed,
	openshellv1alpha1.RefreshReasonNotSupported, openshellv1alpha1.RefreshReasonGatewayError, openshellv1alpha1.RefreshReasonFailed,
	openshellv1alpha1.RefreshReasonPending}

// setRefreshed folds the outcomes into Refreshed and returns the soonest
// requeue. Pure.
func setRefreshed(p *openshellv1alpha1.OpenShellProvider, outcomes []refreshOutcome) time.Duration {
	var requeue time.Duration
	for _, o := range outcomes {
		requeue = enqueue.Sooner(requeue, o.requeue)
	}
	if len(p.Spec.Refresh) == 0 {
		meta.RemoveStatusCondition(&p.Status.Conditions, openshellv1alpha1.ConditionRefreshed)
		return requeue
	}
	for _, reason := range refreshRank {
		var msgs []string
		for _, o := range outcomes {
			if o.reason == reason {
				msgs = append(msgs, o.msg)
			}
		}
		if len(msgs) > 0 {
			status.SetCondition(p, openshellv1alpha1.ConditionRefreshed, metav1.ConditionFalse, reason, strings.Join(msgs, "; "))
			return requeue
		}
	}
	gateways := 0
	for _, e := range p.Status.Gateways {
		if len(e.Refresh) > 0 {
			gateways++
		}
	}
	if gateways == 0 {
		status.SetCondition(p, openshellv1alpha1.ConditionRefreshed, metav1.ConditionUnknown, openshellv1alpha1.ProviderReasonUnused,
			"the provider is at no gateway that refreshes credentials yet")
		return requeue
	}
	status.SetCondition(p, openshellv1alpha1.ConditionRefreshed, metav1.ConditionTrue, openshellv1alpha1.RefreshReasonRefreshed,
		fmt.Sprintf("%d credential(s) refreshed by %d gateway(s)", len(p.Spec.Refresh), gateways))
	return requeue
}

// refreshAt reconciles the refreshes at one gateway: removes those no
// longer wanted (dropped, no longer allowed, or whose material Secret is
// gone), configures new or changed ones, rotates on a new annotation
// value, and reads the status when due.
func (r *Reconciler) refreshAt(ctx context.Context, orig *openshellv1alpha1.OpenShellProvider, gw *openshellv1alpha1.OpenShellGateway,
	p *openshellv1alpha1.OpenShellProvider, key string, mat map[string]material) []refreshOutcome {
	if pushedLine(*entryAt(p, key)) == gatewayline.Legacy {
		return []refreshOutcome{{reason: openshellv1alpha1.RefreshReasonNotSupported,
			msg: key + " runs the 0.0 line, whose gateways do not refresh credentials"}}
	}
	allowed, notAllowed := allowedRefreshes(p, gw)
	var outcomes []refreshOutcome
	if len(notAllowed) > 0 {
		outcomes = append(outcomes, refreshOutcome{reason: openshellv1alpha1.RefreshReasonNotAllowed, msg: fmt.Sprintf("%s allows no %s refresh "+
			"(its spec.sandboxControls.allowedRefreshStrategies): credential(s) %s not refreshed there", key,
			strings.Join(strategiesOf(p, notAllowed), ", "), strings.Join(notAllowed, ", "))})
	}
	// A refresh whose material is refused keeps its last configuration; one
	// whose Secret is gone goes with it.
	var kept, configure []openshellv1alpha1.CredentialRefresh
	for _, w := range allowed {
		if m := mat[w.CredentialKey]; !m.missing {
			kept = append(kept, w)
			if m.refusal == "" {
				configure = append(configure, w)
			}
		}
	}
	conn, err := r.Gateways.Connect(ctx, gw)
	if err == nil {
		err = r.removeRefreshes(ctx, conn, p, entryAt(p, key), kept)
	}
	var polled bool
	if err == nil {
		polled, err = r.configureRefreshes(ctx, orig, conn, gw, p, key, configure, mat)
	}
	if err != nil {
		return append(outcomes, gatewayError(key, err, mat))
	}
	if o := r.rotate(ctx, orig, conn, gw, p, entryAt(p, key), mat); o != nil {
		outcomes = append(outcomes, *o)
	}
	e := entryAt(p, key)
	if !polled && r.refreshPolls.Due(driftKey(p, key), pollPeriod(e, r.DriftPeriod)) {
		if o := r.pollRefreshes(ctx, conn, p, e, mat); o != nil {
			return append(outcomes, *o)
		}
	}
	return append(outcomes, judgeRefreshes(key, e.Refresh, r.DriftPeriod, time.Now()))
}

// gatewayError is the outcome of a failed gateway call: ProviderConflict
// when the record there is not the operator's (not retried on a timer),
// else GatewayError.
func gatewayError(key string, err error, mat map[string]material) refreshOutcome {
	if c := (*gwconn.ConflictError)(nil); errors.As(err, &c) {
		return refreshOutcome{reason: openshellv1alpha1.ReasonProviderConflict, msg: c.Error()}
	}
	return refreshOutcome{reason: openshellv1alpha1.RefreshReasonGatewayError, requeue: pushRetry,
		msg: fmt.Sprintf("%s: %s", key, maskAll(grpcstatus.Convert(err).Message(), mat))}
}

// allowedRefreshes splits spec.refresh into what gw allows and the keys it
// does not. Pure.
func allowedRefreshes(p *openshellv1alpha1.OpenShellProvider, gw *openshellv1alpha1.OpenShellGateway) (
	allowed []openshellv1alpha1.CredentialRefresh, notAllowed []string) {
	for _, r := range p.Spec.Refresh {
		if slices.Contains(gw.Spec.SandboxControls.AllowedRefreshStrategies, r.Strategy) {
			allowed = append(allowed, r)
		} else {
			notAllowed = append(notAllowed, r.CredentialKey)
		}
	}
	return allowed, notAllowed
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

// removeRefreshes deletes at the gateway the refreshes not kept. The
// gateway leaves the minted value; the key is the Secret's again, so the
// provider is pushed again at once (its entry's generation is cleared),
// with the key's value from the Secret or, if the Secret has none, its
// deletion.
func (r *Reconciler) removeRefreshes(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProvider,
	e *openshellv1alpha1.ProviderGatewayStatus, kept []openshellv1alpha1.CredentialRefresh) error {
	for i := 0; i < len(e.Refresh); {
		s := e.Refresh[i]
		if slices.ContainsFunc(kept, func(w openshellv1alpha1.CredentialRefresh) bool { return w.CredentialKey == s.CredentialKey }) {
			i++
			continue
		}
		_, err := conn.DeleteProviderRefresh(ctx, &openshellv1.DeleteProviderRefreshRequest{WorkspaceScope: gatewayapi.Workspace(e.Workspace),
			Provider: e.Name, CredentialKey: s.CredentialKey, AllowMissing: true, RequestId: gatewayapi.NewRequestID()})
		if err != nil && grpcstatus.Code(err) != codes.NotFound {
			return err
		}
		e.Refresh = slices.Delete(e.Refresh, i, i+1)
		// The keys are the Secret's again: the push that follows at once
		// writes its values, or deletes them (as keys it wrote last).
		for _, k := range append([]string{s.CredentialKey}, s.OutputKeys...) {
			if !slices.Contains(e.CredentialKeys, k) {
				e.CredentialKeys = append(e.CredentialKeys, k)
			}
		}
		slices.Sort(e.CredentialKeys)
		r.digests.Delete(refreshKey(p, e.Gateway, s.CredentialKey))
		e.ObservedGeneration = 0
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "RefreshRemoved", "Refresh",
			"gateway %s no longer refreshes credential %s", e.Gateway, s.CredentialKey)
	}
	return nil
}

// configureRefreshes configures each refresh whose strategy, material
// Secret or material changed since it was last configured (or that the
// gateway lost, or refused a sweep ago), at the operator's own record
// only. A new one is recorded in status first, with the outputs its mint
// will write, so that a lost status write cannot leave a refresh at the
// gateway the operator does not know to remove, nor keys it would write
// over. polled says every entry's status is fresh from the gateway.
func (r *Reconciler) configureRefreshes(ctx context.Context, orig *openshellv1alpha1.OpenShellProvider, conn *gatewayapi.Client,
	gw *openshellv1alpha1.OpenShellGateway, p *openshellv1alpha1.OpenShellProvider, key string,
	configure []openshellv1alpha1.CredentialRefresh, mat map[string]material) (bool, error) {
	polled := len(configure) > 0
	for _, w := range configure {
		m := mat[w.CredentialKey]
		if !r.needsConfigure(p, entryAt(p, key), w, m) {
			polled = false
			continue
		}
		e := entryAt(p, key)
		if err := r.ownRecord(ctx, conn, gw, e); err != nil {
			return false, err
		}
		outputs, err := r.outputKeys(ctx, conn, p, e, w.CredentialKey)
		if err != nil {
			return false, err
		}
		i, err := r.recordRefresh(ctx, orig, p, key, openshellv1alpha1.CredentialRefreshStatus{CredentialKey: w.CredentialKey,
			Strategy: w.Strategy, OutputKeys: outputs})
		if err != nil {
			return false, err
		}
		e = entryAt(p, key)
		resp, err := conn.ConfigureProviderRefresh(gatewayapi.ThirdParty(ctx), &openshellv1.ConfigureProviderRefreshRequest{
			WorkspaceScope: gatewayapi.Workspace(e.Workspace), Provider: e.Name, CredentialKey: w.CredentialKey,
			Strategy: strategyWire[w.Strategy], Material: m.values, SecretMaterialKeys: sortedKeys(m.values),
			RequestId: gatewayapi.NewRequestID()})
		s := openshellv1alpha1.CredentialRefreshStatus{CredentialKey: w.CredentialKey}
		switch grpcstatus.Code(err) {
		case codes.OK:
			s = refreshStatus(resp.GetStatus(), w.CredentialKey, m)
			r.digests.Store(refreshKey(p, e.Gateway, w.CredentialKey), m.digest())
			r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "RefreshConfigured", "Refresh",
				"gateway %s refreshes credential %s (%s) from Secret %s", e.Gateway, w.CredentialKey, w.Strategy, w.MaterialSecretRef.Name)
		case codes.InvalidArgument, codes.FailedPrecondition:
			// A verdict on this material and profile: asked again when
			// either changes, or a sweep later (the gateway's side may
			// have changed: a profile imported, a setting turned on).
			r.retries.Done(refreshKey(p, e.Gateway, w.CredentialKey))
			s.State, s.LastError = refreshStateRejected, truncate(mask(grpcstatus.Convert(err).Message(), m), maxLastError)
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, openshellv1alpha1.RefreshReasonRejected, "Refresh",
				"gateway %s refused to refresh credential %s: %s", e.Gateway, w.CredentialKey, s.LastError)
		default:
			return false, err
		}
		s.Strategy, s.MaterialSecret, s.MaterialResourceVersion, s.OutputKeys = w.Strategy, w.MaterialSecretRef.Name, m.resourceVersion, outputs
		e.Refresh[i] = s
	}
	e := entryAt(p, key)
	slices.SortFunc(e.Refresh, func(a, b openshellv1alpha1.CredentialRefreshStatus) int {
		return strings.Compare(a.CredentialKey, b.CredentialKey)
	})
	return polled, nil
}

// needsConfigure says whether refresh w must be configured at entry e: it
// is not there, its strategy or material Secret changed, the Secret's data
// changed (a new resourceVersion whose data this operator configured is
// only recorded), or the gateway refused it a sweep ago.
func (r *Reconciler) needsConfigure(p *openshellv1alpha1.OpenShellProvider, e *openshellv1alpha1.ProviderGatewayStatus,
	w openshellv1alpha1.CredentialRefresh, m material) bool {
	i := refreshIndex(e.Refresh, w.CredentialKey)
	if i < 0 || e.Refresh[i].Strategy != w.Strategy || e.Refresh[i].MaterialSecret != w.MaterialSecretRef.Name {
		return true
	}
	s := &e.Refresh[i]
	k := refreshKey(p, e.Gateway, w.CredentialKey)
	if s.State == refreshStateRejected && r.retries.Due(k, r.DriftPeriod) {
		return true
	}
	if s.MaterialResourceVersion == m.resourceVersion {
		return false
	}
	if d, ok := r.digests.Load(k); ok && s.MaterialResourceVersion != "" && d.([sha256.Size]byte) == m.digest() {
		s.MaterialResourceVersion = m.resourceVersion // metadata only: nothing to send
		return false
	}
	return true
}

// ownRecord checks that the provider record at e's gateway is still the
// one the operator created (its ID), before anything is sent to it by
// name: a *gwconn.ConflictError otherwise.
func (r *Reconciler) ownRecord(ctx context.Context, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway,
	e *openshellv1alpha1.ProviderGatewayStatus) error {
	if e.GatewayID == "" {
		return nil // not known yet: the push that records it checks the owner labels
	}
	same, err := sameRecord(ctx, conn, gw, e.Name, e.Workspace, e.GatewayID)
	if err == nil && !same {
		err = &gwconn.ConflictError{Kind: "provider", Name: e.Name + " (gone at the gateway)", Workspace: e.Workspace, Gateway: e.Gateway}
	}
	return err
}

// recordRefresh makes sure p's entry for gateway key lists refresh s (as
// it stands, if it does), recording it in the API first when it is new,
// and returns its index there.
func (r *Reconciler) recordRefresh(ctx context.Context, orig, p *openshellv1alpha1.OpenShellProvider, key string,
	s openshellv1alpha1.CredentialRefreshStatus) (int, error) {
	add := func(x *openshellv1alpha1.OpenShellProvider) {
		if xe := entryAt(x, key); xe != nil && refreshIndex(xe.Refresh, s.CredentialKey) < 0 {
			xe.Refresh = append(xe.Refresh, s)
		}
	}
	if i := refreshIndex(entryAt(p, key).Refresh, s.CredentialKey); i >= 0 {
		return i, nil
	}
	if err := status.Record(ctx, r.Client, orig, p, add); err != nil {
		return 0, err
	}
	// Record changes nothing when orig already lists it (p's entry was
	// made anew since): p gets it here.
	add(p)
	return refreshIndex(entryAt(p, key).Refresh, s.CredentialKey), nil
}

// refreshIndex is the index of credential key's refresh in refs, -1 if
// none.
func refreshIndex(refs []openshellv1alpha1.CredentialRefreshStatus, key string) int {
	return slices.IndexFunc(refs, func(s openshellv1alpha1.CredentialRefreshStatus) bool { return s.CredentialKey == key })
}

// refreshKey names one credential's refresh at one gateway in the
// reconciler's retries and digests.
func refreshKey(p *openshellv1alpha1.OpenShellProvider, gateway, credential string) string {
	return driftKey(p, gateway) + "/" + credential
}

// outputKeys are the credentials a mint of key writes besides key itself:
// the additional outputs of the refresh its profile declares, read from
// the catalog the provider resolves in (none if the gateway has no such
// profile).
func (r *Reconciler) outputKeys(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProvider,
	e *openshellv1alpha1.ProviderGatewayStatus, key string) ([]string, error) {
	req := &openshellv1.GetProviderProfileRequest{Id: p.Spec.Type}
	if e.ProfileWorkspace != "" {
		req.WorkspaceScope = gatewayapi.Workspace(e.ProfileWorkspace)
	}
	resp, err := conn.GetProviderProfile(ctx, req)
	switch {
	case grpcstatus.Code(err) == codes.NotFound:
		return nil, nil
	case err != nil:
		return nil, err
	}
	var out []string
	for _, c := range resp.GetProfile().GetCredentials() {
		if c.GetName() != key && !slices.Contains(c.GetEnvVars(), key) {
			continue
		}
		for _, o := range c.GetRefresh().GetAdditionalOutputs() {
			if o.GetCredential() != "" && o.GetCredential() != key && !slices.Contains(out, o.GetCredential()) {
				out = append(out, o.GetCredential())
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// rotate asks the gateway to mint every refreshed credential now when the
// rotate annotation holds a value not yet acted on, at most once a minute
// per provider and gateway. The value is recorded (in the API) before the
// calls: a mint that fails is reported (an event now, the gateway's status
// at the next read), not tried again against the token endpoint; a new
// value tries again.
func (r *Reconciler) rotate(ctx context.Context, orig *openshellv1alpha1.OpenShellProvider, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway,
	p *openshellv1alpha1.OpenShellProvider, e *openshellv1alpha1.ProviderGatewayStatus, mat map[string]material) *refreshOutcome {
	want := p.Annotations[openshellv1alpha1.AnnotationRotateCredentials]
	if want == "" || want == e.Rotation || len(e.Refresh) == 0 {
		return nil
	}
	if len(want) > openshellv1alpha1.MaxRotationRequest {
		return &refreshOutcome{reason: openshellv1alpha1.RefreshReasonRotationInvalid, msg: fmt.Sprintf("annotation %s is %d characters; at most %d",
			openshellv1alpha1.AnnotationRotateCredentials, len(want), openshellv1alpha1.MaxRotationRequest)}
	}
	key, every := driftKey(p, e.Gateway), rotateEvery
	if r.DriftPeriod > 0 && r.DriftPeriod < every {
		every = r.DriftPeriod // a shorter sweep (tests) bounds it instead
	}
	if !r.rotations.Due(key, every) {
		return &refreshOutcome{requeue: every}
	}
	if err := r.ownRecord(ctx, conn, gw, e); err != nil {
		o := gatewayError(e.Gateway, err, mat)
		return &o
	}
	r.rotations.Done(key)
	// Recorded in the API before the calls: a lost final status write or
	// a restart cannot have the value mint again.
	previous := e.Rotation
	if err := r.setRotation(ctx, orig, p, e.Gateway, want); err != nil {
		o := gatewayError(e.Gateway, err, mat)
		return &o
	}
	return r.mintNow(ctx, orig, conn, p, entryAt(p, e.Gateway), mat, want, previous)
}

// setRotation records v as the rotation acted on at gateway, in the API
// and in p (whose entry may differ from orig's: made anew since).
func (r *Reconciler) setRotation(ctx context.Context, orig, p *openshellv1alpha1.OpenShellProvider, gateway, v string) error {
	set := func(x *openshellv1alpha1.OpenShellProvider) {
		if xe := entryAt(x, gateway); xe != nil {
			xe.Rotation = v
		}
	}
	if err := status.Record(ctx, r.Client, orig, p, set); err != nil {
		return err
	}
	set(p)
	return nil
}

// mintNow makes one RotateProviderCredential per refreshed key at e's
// gateway, each once. A call the client refused before it left, with
// nothing minted yet for the value, gives the value back (previous).
func (r *Reconciler) mintNow(ctx context.Context, orig *openshellv1alpha1.OpenShellProvider, conn *gatewayapi.Client,
	p *openshellv1alpha1.OpenShellProvider, e *openshellv1alpha1.ProviderGatewayStatus, mat map[string]material, want, previous string) *refreshOutcome {
	rotated := 0
	for i := range e.Refresh {
		s := &e.Refresh[i]
		if s.State == refreshStateRejected {
			continue
		}
		resp, err := conn.RotateProviderCredential(gatewayapi.ThirdParty(ctx), &openshellv1.RotateProviderCredentialRequest{
			WorkspaceScope: gatewayapi.Workspace(e.Workspace), Provider: e.Name, CredentialKey: s.CredentialKey,
			RequestId: gatewayapi.NewRequestID()})
		if notSent(err) && rotated == 0 {
			if rerr := r.setRotation(ctx, orig, p, e.Gateway, previous); rerr != nil {
				err = rerr
			}
			r.rotations.Forget(driftKey(p, e.Gateway))
			o := gatewayError(e.Gateway, err, mat)
			return &o
		}
		if err != nil {
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, "RotationFailed", "Rotate", "gateway %s could not rotate credential %s: %s",
				e.Gateway, s.CredentialKey, mask(grpcstatus.Convert(err).Message(), mat[s.CredentialKey]))
			continue
		}
		rotated++
		*s = withGatewayStatus(*s, refreshStatus(resp.GetStatus(), s.CredentialKey, mat[s.CredentialKey]))
	}
	r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "CredentialsRotated", "Rotate",
		"gateway %s minted %d of %d credential(s) now (%s=%s)", e.Gateway, rotated, len(e.Refresh), openshellv1alpha1.AnnotationRotateCredentials, want)
	return nil
}

// notSent says a call was refused by the client before it reached the
// gateway.
func notSent(err error) bool {
	var busy *gatewayapi.BusyError
	return gatewayapi.BreakerOpen(err) || errors.As(err, &busy)
}

// forgetRefreshes drops what the reconciler remembers of p's refreshes at
// e's gateway (the provider is gone from it).
func (r *Reconciler) forgetRefreshes(p *openshellv1alpha1.OpenShellProvider, e openshellv1alpha1.ProviderGatewayStatus) {
	r.refreshPolls.Forget(driftKey(p, e.Gateway))
	r.rotations.Forget(driftKey(p, e.Gateway))
	for _, s := range e.Refresh {
		r.retries.Forget(refreshKey(p, e.Gateway, s.CredentialKey))
		r.digests.Delete(refreshKey(p, e.Gateway, s.CredentialKey))
	}
}

// pollRefreshes reads the gateway's refresh status into e.Refresh. A
// status of another provider record than the operator's is a conflict.
func (r *Reconciler) pollRefreshes(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProvider,
	e *openshellv1alpha1.ProviderGatewayStatus, mat map[string]material) *refreshOutcome {
	if len(e.Refresh) == 0 {
		return nil
	}
	resp, err := conn.GetProviderRefreshStatus(ctx, &openshellv1.GetProviderRefreshStatusRequest{
		WorkspaceScope: gatewayapi.Workspace(e.Workspace), Provider: e.Name})
	if err != nil {
		o := gatewayError(e.Gateway, err, mat)
		return &o
	}
	for _, c := range resp.GetCredentials() {
		if id := c.GetProviderId(); id != "" && e.GatewayID != "" && id != e.GatewayID {
			return &refreshOutcome{reason: openshellv1alpha1.ReasonProviderConflict,
				msg: fmt.Sprintf("provider %s at gateway %s is not the record the operator created", e.Name, e.Gateway)}
		}
	}
	r.refreshPolls.Done(driftKey(p, e.Gateway))
	for i := range e.Refresh {
		s := &e.Refresh[i]
		if s.State == refreshStateRejected {
			continue // nothing configured there
		}
		j := slices.IndexFunc(resp.GetCredentials(), func(c *openshellv1.ProviderCredentialRefreshStatus) bool {
			return c.GetCredentialKey() == s.CredentialKey
		})
		if j < 0 {
			// Gone at the gateway (a new database, deleted directly):
			// configured again.
			s.MaterialResourceVersion, s.State = "", ""
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "Refresh",
				"gateway %s no longer refreshes credential %s: configuring it again", e.Gateway, s.CredentialKey)
			continue
		}
		*s = withGatewayStatus(*s, refreshStatus(resp.GetCredentials()[j], s.CredentialKey, mat[s.CredentialKey]))
	}
	return nil
}

// The gateway's words for a refresh the operator acts on, and the
// operator's own for one the gateway refused to configure.
const (
	refreshStateRefreshed  = "refreshed"
	refreshStateConfigured = "configured"
	refreshStateError      = "error"
	refreshStateRejected   = "rejected"
)

// pollPeriod is how often the refresh status at a gateway is read: the
// sweep period, or refreshPoll while a first mint is awaited, whichever
// is shorter.
func pollPeriod(e *openshellv1alpha1.ProviderGatewayStatus, drift time.Duration) time.Duration {
	d := drift
	if d <= 0 {
		d = 10 * time.Minute
	}
	for _, s := range e.Refresh {
		if (s.State == refreshStateConfigured || s.State == "") && refreshPoll < d {
			d = refreshPoll
		}
	}
	return d
}

// judgeRefreshes is one gateway's outcome from its refresh statuses, and
// when to look again: soon after the next mint is due, refreshPoll while
// a first one is awaited, the sweep period after a failure. Pure.
func judgeRefreshes(key string, refreshes []openshellv1alpha1.CredentialRefreshStatus, drift time.Duration, now time.Time) refreshOutcome {
	var rejected, failed, pending []string
	requeue := drift
	for _, s := range refreshes {
		switch {
		case s.State == refreshStateRejected:
			rejected = append(rejected, fmt.Sprintf("%s at %s: %s", s.CredentialKey, key, s.LastError))
		case s.State == refreshStateError || s.FailureCode != "" && s.State != refreshStateRefreshed:
			failed = append(failed, fmt.Sprintf("%s at %s: %s", s.CredentialKey, key, failureText(s)))
		case s.State != refreshStateRefreshed:
			pending = append(pending, s.CredentialKey)
		case s.NextRefreshTime != nil:
			// The gateway's worker mints within about a minute of this.
			if d := s.NextRefreshTime.Sub(now) + time.Minute; d > 0 {
				requeue = enqueue.Sooner(requeue, d)
			}
		}
	}
	switch {
	case len(rejected) > 0:
		return refreshOutcome{reason: openshellv1alpha1.RefreshReasonRejected, msg: strings.Join(rejected, "; ")}
	case len(failed) > 0:
		return refreshOutcome{reason: openshellv1alpha1.RefreshReasonFailed, msg: strings.Join(failed, "; "), requeue: requeue}
	case len(pending) > 0:
		return refreshOutcome{reason: openshellv1alpha1.RefreshReasonPending, requeue: refreshPoll,
			msg: fmt.Sprintf("%s has not minted %s yet", key, strings.Join(pending, ", "))}
	}
	return refreshOutcome{requeue: requeue}
}

func failureText(s openshellv1alpha1.CredentialRefreshStatus) string {
	var parts []string
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

// refreshStatus is the API form of the gateway's status of key, its text
// masked of every material value. Pure.
func refreshStatus(in *openshellv1.ProviderCredentialRefreshStatus, key string, m material) openshellv1alpha1.CredentialRefreshStatus {
	return openshellv1alpha1.CredentialRefreshStatus{CredentialKey: key, State: truncate(mask(in.GetStatus(), m), 64),
		LastRefreshTime: apiTime(in.GetLastRefreshTime()), NextRefreshTime: apiTime(in.GetNextRefreshTime()),
		ExpirationTime: apiTime(in.GetExpirationTime()), LastErrorTime: apiTime(in.GetLastErrorTime()),
		FailureCode: truncate(mask(in.GetFailureCode(), m), 64), RecoveryAction: recoveryAction(in.GetRecoveryAction()),
		LastError: truncate(mask(in.GetLastError(), m), maxLastError)}
}

// withGatewayStatus keeps what the operator configured and takes the rest
// from the gateway.
func withGatewayStatus(old, got openshellv1alpha1.CredentialRefreshStatus) openshellv1alpha1.CredentialRefreshStatus {
	got.Strategy, got.MaterialSecret, got.MaterialResourceVersion, got.OutputKeys = old.Strategy, old.MaterialSecret, old.MaterialResourceVersion, old.OutputKeys
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

// mask replaces in s every form of every material value of four or more
// bytes it could carry: the gateway's error text is its own (library
// errors included) and must not carry a refresh token into status, events
// or logs. The forms: as is, trimmed (the gateway trims), URL-, JSON- and
// base64-encoded, and each line of 16 or more bytes of a multi-line value
// (a PEM key).
func mask(s string, m material) string {
	var forms []string
	for _, v := range m.values {
		for _, b := range []string{v, strings.TrimSpace(v)} {
			q := strconv.Quote(b)
			for _, f := range []string{b, url.QueryEscape(b), url.PathEscape(b), q[1 : len(q)-1],
				base64.StdEncoding.EncodeToString([]byte(b)), base64.RawStdEncoding.EncodeToString([]byte(b)),
				base64.URLEncoding.EncodeToString([]byte(b)), base64.RawURLEncoding.EncodeToString([]byte(b))} {
				if len(f) >= 4 {
					forms = append(forms, f)
				}
			}
		}
		for _, line := range strings.Split(v, "\n") {
			if line = strings.TrimSpace(line); len(line) >= 16 {
				forms = append(forms, line)
			}
		}
	}
	// Longest first, so that a form containing another is masked whole.
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	for _, f := range forms {
		s = strings.ReplaceAll(s, f, "[material]")
	}
	return s
}

// maskAll masks s of every refresh's material.
func maskAll(s string, mat map[string]material) string {
	for _, m := range mat {
		s = mask(s, m)
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
