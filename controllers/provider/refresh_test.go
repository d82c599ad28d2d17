package provider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/driftcheck"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
)

const (
	materialName  = "anthropic-refresh"
	refreshToken  = "rt-very-secret-refresh-token"
	clientSecret  = "cs-very-secret-client"
	refreshedKey  = "ACCESS_TOKEN"
	rotationValue = "2026-12-07T23:00:00Z"
)

// newRefreshFixture is the provider fixture on a 0.1 gateway whose
// namespace catalog holds the provider's profile, with spec.refresh set to
// refresh ACCESS_TOKEN (OAuth2RefreshToken) from a material Secret, and
// the gateway allowing the strategies given.
func newRefreshFixture(t *testing.T, material map[string][]byte, allowed ...openshellv1alpha1.CredentialRefreshStrategy) *fixture {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t, options{gateway: func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.SandboxControls.AllowedRefreshStrategies = allowed
	}})
	f.env.Gateway.ReportVersion(gatewayline.V01WireRelease)
	gw := f.env.Object.DeepCopy()
	gw.Status.Version = gatewayline.V01WireRelease
	if err := f.env.Client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	prof := &openshellv1alpha1.OpenShellProviderProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "anthropic", Generation: 1}}
	if err := f.env.Client.Create(ctx, prof); err != nil {
		t.Fatal(err)
	}
	prof.Status.Gateways = []openshellv1alpha1.ProviderProfileGatewayStatus{{Gateway: gatewayKey, Scope: openshellv1alpha1.ProfileScopeWorkspace,
		Workspace: workspace, ObservedGeneration: 1}}
	if err := f.env.Client.Status().Update(ctx, prof); err != nil {
		t.Fatal(err)
	}
	f.env.Gateway.ImportProfile(workspace, &v01.ProviderProfile{Id: "anthropic"})
	if material == nil {
		material = map[string][]byte{"client_id": []byte("agent-client"), "client_secret": []byte(clientSecret), "refresh_token": []byte(refreshToken)}
	}
	if err := f.env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: materialName}, Data: material}); err != nil {
		t.Fatal(err)
	}
	f.editProvider(t, func(p *openshellv1alpha1.OpenShellProvider) {
		p.Spec.Refresh = []openshellv1alpha1.CredentialRefresh{{CredentialKey: refreshedKey, Strategy: openshellv1alpha1.RefreshOAuth2RefreshToken,
			MaterialSecretRef: openshellv1alpha1.LocalObjectReference{Name: materialName}}}
	})
	return f
}

// editProvider updates the provider and bumps its generation on a spec
// change, as the API server does (the fake client does not).
func (f *fixture) editProvider(t *testing.T, edit func(*openshellv1alpha1.OpenShellProvider)) {
	t.Helper()
	p := f.provider(t)
	before := p.Spec.DeepCopy()
	edit(p)
	if !equalSpec(before, &p.Spec) {
		p.Generation++
	}
	if err := f.env.Client.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// askRotation sets the rotate annotation to value, as a Tenant Admin.
func (f *fixture) askRotation(t *testing.T, value string) {
	t.Helper()
	f.editProvider(t, func(p *openshellv1alpha1.OpenShellProvider) {
		p.Annotations = map[string]string{openshellv1alpha1.AnnotationRotateCredentials: value}
	})
}

func equalSpec(a, b *openshellv1alpha1.OpenShellProviderSpec) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func wantRefreshed(t *testing.T, p *openshellv1alpha1.OpenShellProvider, s metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(p.Status.Conditions, openshellv1alpha1.ConditionRefreshed)
	if c == nil || c.Status != s || c.Reason != reason {
		t.Fatalf("Refreshed = %+v, want %s/%s", c, s, reason)
	}
	return c
}

// noSecretIn fails if a material or credential value is in the
// provider's status or in an event.
func (f *fixture) noSecretIn(t *testing.T) {
	t.Helper()
	raw, _ := json.Marshal(f.provider(t))
	for _, v := range []string{refreshToken, clientSecret, secretValue} {
		if strings.Contains(string(raw), v) {
			t.Errorf("the provider object holds a secret value: %s", raw)
		}
	}
	for {
		select {
		case e := <-f.rec.Events:
			for _, v := range []string{refreshToken, clientSecret, secretValue} {
				if strings.Contains(e, v) {
					t.Errorf("event holds a secret value: %s", e)
				}
			}
		default:
			return
		}
	}
}

func TestRefreshNeedsTheGatewaysAllowance(t *testing.T) {
	f := newRefreshFixture(t, nil)
	f.reconcile(t)
	p := f.provider(t)
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	c := wantRefreshed(t, p, metav1.ConditionFalse, openshellv1alpha1.RefreshReasonNotAllowed)
	if !strings.Contains(c.Message, "allowedRefreshStrategies") || !strings.Contains(c.Message, refreshedKey) {
		t.Errorf("message %q names neither the setting nor the key", c.Message)
	}
	if n := f.env.Gateway.Calls()["ConfigureProviderRefresh"]; n != 0 {
		t.Fatalf("ConfigureProviderRefresh called %d times on a gateway that does not allow it", n)
	}
}

func TestRefreshLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.r.DriftPeriod = time.Nanosecond // every reconcile compares and polls
	f.reconcile(t)
	p := f.provider(t)
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	wantRefreshed(t, p, metav1.ConditionFalse, openshellv1alpha1.RefreshReasonPending)
	mat, secretKeys, ok := f.env.Gateway.RefreshMaterial(workspace, provName, refreshedKey)
	if !ok || mat["refresh_token"] != refreshToken || !slices.Equal(secretKeys, []string{"client_id", "client_secret", "refresh_token"}) {
		t.Fatalf("configured material %v, secret keys %v (ok %v): every material key must be sent as secret", slices.Collect(maps.Keys(mat)), secretKeys, ok)
	}
	if got := p.Status.Gateways[0].Refresh; len(got) != 1 || got[0].State != "configured" || got[0].MaterialSecret != materialName || got[0].MaterialResourceVersion == "" {
		t.Fatalf("status refresh %+v", got)
	}

	// The gateway's worker mints; the operator reports it and leaves the
	// minted value alone although every mint is a new resource version
	// and each reconcile here compares the record.
	if n := f.env.Gateway.RunRefreshWorker(); n != 1 {
		t.Fatalf("worker minted %d", n)
	}
	minted, _ := f.env.Gateway.ProviderCredential(workspace, provName, refreshedKey)
	updates := f.env.Gateway.Calls()["UpdateProvider"]
	f.reconcile(t)
	f.reconcile(t)
	f.reconcile(t)
	// The mint's new resource version costs one quiet push of the
	// operator's own keys, then nothing.
	if n := f.env.Gateway.Calls()["UpdateProvider"]; n != updates+1 {
		t.Errorf("%d pushes after one mint, want 1", n-updates)
	}
	for len(f.rec.Events) > 0 {
		if e := <-f.rec.Events; strings.Contains(e, openshellv1alpha1.ReasonDriftReverted) {
			t.Errorf("a mint was reported as drift: %s", e)
		}
	}
	p = f.provider(t)
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	wantRefreshed(t, p, metav1.ConditionTrue, openshellv1alpha1.RefreshReasonRefreshed)
	if s := p.Status.Gateways[0].Refresh[0]; s.LastRefreshTime == nil || s.NextRefreshTime == nil || s.State != "refreshed" {
		t.Fatalf("status refresh %+v", s)
	}
	if got, _ := f.env.Gateway.ProviderCredential(workspace, provName, refreshedKey); got != minted || !strings.HasPrefix(got, "minted-") {
		t.Fatalf("refreshed credential %q, want the minted %q kept", got, minted)
	}

	// A rotation of the credentials Secret is pushed without the
	// refreshed key (the gateway refuses an update that names it).
	s := f.secret(t)
	s.Data["API_KEY"] = []byte("sk-rotated-2")
	s.Data[refreshedKey] = []byte("a-stale-first-value")
	if err := f.env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	wantReady(t, f.provider(t), metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	if got, _ := f.env.Gateway.ProviderCredential(workspace, provName, refreshedKey); got != minted {
		t.Fatalf("the Secret's rotation overwrote the refreshed credential: %q", got)
	}
	if got, _ := f.env.Gateway.ProviderCredential(workspace, provName, "API_KEY"); got != "sk-rotated-2" {
		t.Fatalf("API_KEY %q after the rotation", got)
	}

	// A spec change outside the refresh does not configure it again (that
	// would send the Secret's refresh token over a newer one).
	configures := f.env.Gateway.Calls()["ConfigureProviderRefresh"]
	f.editProvider(t, func(p *openshellv1alpha1.OpenShellProvider) {
		p.Spec.Config = map[string]string{"BASE_URL": "https://api.example.com"}
	})
	f.reconcile(t)
	if n := f.env.Gateway.Calls()["ConfigureProviderRefresh"]; n != configures {
		t.Errorf("a config change configured the refresh again (%d calls)", n-configures)
	}

	// The rotate annotation: one mint per value.
	f.askRotation(t, rotationValue)
	f.reconcile(t)
	f.reconcile(t)
	if n := f.env.Gateway.Calls()["RotateProviderCredential"]; n != 1 {
		t.Fatalf("RotateProviderCredential called %d times for one annotation value", n)
	}
	p = f.provider(t)
	if p.Status.Gateways[0].Rotation != rotationValue {
		t.Fatalf("status rotation %q", p.Status.Gateways[0].Rotation)
	}
	if got, _ := f.env.Gateway.ProviderCredential(workspace, provName, refreshedKey); got == minted {
		t.Fatal("the rotation minted nothing")
	}

	// The material Secret rotates: configured again.
	configures = f.env.Gateway.Calls()["ConfigureProviderRefresh"]
	m := &corev1.Secret{}
	if err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: materialName}, m); err != nil {
		t.Fatal(err)
	}
	m.Data["refresh_token"] = []byte(refreshToken + "-2")
	if err := f.env.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if n := f.env.Gateway.Calls()["ConfigureProviderRefresh"]; n != configures+1 {
		t.Fatalf("ConfigureProviderRefresh %d → %d after the material rotated", configures, n)
	}
	if mat, _, _ := f.env.Gateway.RefreshMaterial(workspace, provName, refreshedKey); mat["refresh_token"] != refreshToken+"-2" {
		t.Fatal("the rotated material was not configured")
	}
	f.noSecretIn(t)
}

// TestRefreshFailureIsReportedMasked: a gateway whose error text carries
// the refresh token (a library error quoting its input) has it masked
// before it reaches status or a condition.
func TestRefreshFailureIsReportedMasked(t *testing.T) {
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.r.DriftPeriod = time.Nanosecond
	f.reconcile(t)
	f.env.Gateway.FailRefresh("invalid_grant", v01.ProviderCredentialRefreshRecoveryAction_PROVIDER_CREDENTIAL_REFRESH_RECOVERY_ACTION_REAUTHORIZE,
		"token endpoint refused refresh_token="+refreshToken)
	f.env.Gateway.RunRefreshWorker()
	f.reconcile(t)
	p := f.provider(t)
	c := wantRefreshed(t, p, metav1.ConditionFalse, openshellv1alpha1.RefreshReasonFailed)
	for _, want := range []string{"invalid_grant", "Reauthorize", "[material]"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	if s := p.Status.Gateways[0].Refresh[0]; s.FailureCode != "invalid_grant" || s.RecoveryAction != "Reauthorize" || s.LastErrorTime == nil {
		t.Errorf("status refresh %+v", s)
	}
	// A rotation whose mint fails (UNAVAILABLE, as a token endpoint that
	// failed) is made once: not retried by the client, nor on the next
	// reconcile.
	f.askRotation(t, rotationValue)
	f.reconcile(t)
	f.reconcile(t)
	if n := f.env.Gateway.Calls()["RotateProviderCredential"]; n != 1 {
		t.Errorf("RotateProviderCredential called %d times", n)
	}
	if got := f.provider(t).Status.Gateways[0].Rotation; got != rotationValue {
		t.Errorf("status rotation %q after a failed rotation", got)
	}
	f.noSecretIn(t)

	f.env.Gateway.FailRefresh("", 0, "")
	f.env.Gateway.RunRefreshWorker()
	f.reconcile(t)
	wantRefreshed(t, f.provider(t), metav1.ConditionTrue, openshellv1alpha1.RefreshReasonRefreshed)
}

// TestRemovingARefreshHandsTheKeyBack: the refresh is deleted at the
// gateway, Refreshed goes, and the key is the Secret's again.
func TestRemovingARefreshHandsTheKeyBack(t *testing.T) {
	ctx := context.Background()
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.reconcile(t)
	f.env.Gateway.RunRefreshWorker()
	s := f.secret(t)
	s.Data[refreshedKey] = []byte("static-token")
	if err := f.env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	f.editProvider(t, func(p *openshellv1alpha1.OpenShellProvider) { p.Spec.Refresh = nil })
	f.reconcile(t)
	if n := f.env.Gateway.Calls()["DeleteProviderRefresh"]; n != 1 {
		t.Fatalf("DeleteProviderRefresh called %d times", n)
	}
	if _, _, ok := f.env.Gateway.RefreshMaterial(workspace, provName, refreshedKey); ok {
		t.Fatal("the refresh is still configured at the gateway")
	}
	f.reconcile(t)
	p := f.provider(t)
	if c := meta.FindStatusCondition(p.Status.Conditions, openshellv1alpha1.ConditionRefreshed); c != nil {
		t.Errorf("Refreshed still set: %+v", c)
	}
	if len(p.Status.Gateways[0].Refresh) != 0 {
		t.Errorf("status refresh %+v", p.Status.Gateways[0].Refresh)
	}
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	if got, _ := f.env.Gateway.ProviderCredential(workspace, provName, refreshedKey); got != "static-token" {
		t.Fatalf("%s = %q, want the Secret's value back", refreshedKey, got)
	}
}

func TestRefreshMaterialRefused(t *testing.T) {
	for name, c := range map[string]struct {
		material map[string][]byte
		strategy openshellv1alpha1.CredentialRefreshStrategy
		want     string
	}{
		"token endpoint": {map[string][]byte{"refresh_token": []byte(refreshToken), "token_url": []byte("http://169.254.169.254/")},
			openshellv1alpha1.RefreshOAuth2RefreshToken, "token_url"},
		"sts endpoint": {map[string][]byte{"role_arn": []byte("arn"), "aws_access_key_id": []byte("a"), "aws_secret_access_key": []byte("b"),
			"sts_endpoint_url": []byte("http://10.0.0.1/")}, openshellv1alpha1.RefreshAWSSTSAssumeRole, "sts_endpoint_url"},
		"ambient AWS identity": {map[string][]byte{"role_arn": []byte("arn:aws:iam::1:role/x")}, openshellv1alpha1.RefreshAWSSTSAssumeRole, "aws_access_key_id"},
		"ambient AWS identity, blank keys": {map[string][]byte{"role_arn": []byte("arn"), "aws_access_key_id": []byte(" "), "aws_secret_access_key": []byte("b")},
			openshellv1alpha1.RefreshAWSSTSAssumeRole, "aws_access_key_id"},
		"a region that is a host": {map[string][]byte{"role_arn": []byte("arn"), "aws_access_key_id": []byte("a"), "aws_secret_access_key": []byte("b"),
			"aws_region": []byte("internal.svc.cluster.local:8080/x")}, openshellv1alpha1.RefreshAWSSTSAssumeRole, "aws_region"},
		"a tenant that is a path": {map[string][]byte{"refresh_token": []byte(refreshToken), "tenant_id": []byte("../../evil.example.com")},
			openshellv1alpha1.RefreshOAuth2RefreshToken, "tenant_id"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newRefreshFixture(t, c.material, c.strategy)
			f.editProvider(t, func(p *openshellv1alpha1.OpenShellProvider) { p.Spec.Refresh[0].Strategy = c.strategy })
			f.reconcile(t)
			got := wantRefreshed(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.RefreshReasonMaterialInvalid)
			if !strings.Contains(got.Message, c.want) {
				t.Errorf("message %q does not name %s", got.Message, c.want)
			}
			if n := f.env.Gateway.Calls()["ConfigureProviderRefresh"]; n != 0 {
				t.Errorf("ConfigureProviderRefresh called %d times", n)
			}
		})
	}
}

func TestRefreshSteadyStateMakesNoCall(t *testing.T) {
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.reconcile(t)
	f.env.Gateway.RunRefreshWorker()
	f.r.refreshPolls = driftcheck.Schedule{} // poll now
	f.reconcile(t)
	wantRefreshed(t, f.provider(t), metav1.ConditionTrue, openshellv1alpha1.RefreshReasonRefreshed)
	calls := f.env.Gateway.Calls()
	*f.writes = 0
	f.reconcile(t)
	after := f.env.Gateway.Calls()
	for _, m := range []string{"ConfigureProviderRefresh", "RotateProviderCredential", "GetProviderRefreshStatus", "DeleteProviderRefresh"} {
		if after[m] != calls[m] {
			t.Errorf("%s calls %d → %d in steady state", m, calls[m], after[m])
		}
	}
	if *f.writes != 0 {
		t.Errorf("steady state wrote %d times", *f.writes)
	}
}

func TestRefreshOnALegacyGateway(t *testing.T) {
	f := newFixture(t, options{gateway: func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.SandboxControls.AllowedRefreshStrategies = []openshellv1alpha1.CredentialRefreshStrategy{openshellv1alpha1.RefreshOAuth2RefreshToken}
	}})
	if err := f.env.Client.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: materialName},
		Data: map[string][]byte{"refresh_token": []byte(refreshToken)}}); err != nil {
		t.Fatal(err)
	}
	f.editProvider(t, func(p *openshellv1alpha1.OpenShellProvider) {
		p.Spec.Refresh = []openshellv1alpha1.CredentialRefresh{{CredentialKey: refreshedKey, Strategy: openshellv1alpha1.RefreshOAuth2RefreshToken,
			MaterialSecretRef: openshellv1alpha1.LocalObjectReference{Name: materialName}}}
	})
	f.reconcile(t)
	wantRefreshed(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.RefreshReasonNotSupported)
}

func TestMaskLongestFirst(t *testing.T) {
	m := material{values: map[string]string{"a": "abcd", "b": "abcdefgh", "short": "xy"}}
	if got := mask("x abcdefgh abcd xy", m); got != "x [material] [material] xy" {
		t.Errorf("mask = %q", got)
	}
}

// TestMaskEveryForm: the forms a library error may quote a value in.
func TestMaskEveryForm(t *testing.T) {
	const tok = "rt/with+odd chars=\"quoted\""
	pem := "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
	m := material{values: map[string]string{"refresh_token": tok + "\n", "private_key": pem}}
	q := strconv.Quote(tok)
	for _, form := range []string{tok, url.QueryEscape(tok), url.PathEscape(tok), q[1 : len(q)-1],
		base64.StdEncoding.EncodeToString([]byte(tok + "\n")), "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"} {
		if got := mask("error: "+form+" refused", m); strings.Contains(got, form) {
			t.Errorf("mask left %q in %q", form, got)
		}
	}
}

func TestJudgeRefreshes(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	next := metav1.NewTime(now.Add(10 * time.Minute))
	for name, c := range map[string]struct {
		in      []openshellv1alpha1.CredentialRefreshStatus
		reason  string
		requeue time.Duration
	}{
		"refreshed: look again after the next mint": {[]openshellv1alpha1.CredentialRefreshStatus{{CredentialKey: "A", State: "refreshed", NextRefreshTime: &next}},
			"", 11 * time.Minute},
		"pending": {[]openshellv1alpha1.CredentialRefreshStatus{{CredentialKey: "A", State: "configured"}}, openshellv1alpha1.RefreshReasonPending, refreshPoll},
		"failed wins, looked at again at the sweep": {[]openshellv1alpha1.CredentialRefreshStatus{{CredentialKey: "A", State: "configured"}, {CredentialKey: "B", State: "error"}},
			openshellv1alpha1.RefreshReasonFailed, time.Hour},
		"rejected: not on a timer": {[]openshellv1alpha1.CredentialRefreshStatus{{CredentialKey: "A", State: "rejected"}, {CredentialKey: "B", State: "error"}},
			openshellv1alpha1.RefreshReasonRejected, 0},
	} {
		t.Run(name, func(t *testing.T) {
			got := judgeRefreshes("platform/gw", c.in, time.Hour, now)
			if got.reason != c.reason || got.requeue != c.requeue {
				t.Errorf("judge = %+v, want reason %q requeue %s", got, c.reason, c.requeue)
			}
		})
	}
	if got := judgeRefreshes("gw", []openshellv1alpha1.CredentialRefreshStatus{{State: "refreshed", NextRefreshTime: &next}}, time.Minute, now); got.requeue != time.Minute {
		t.Errorf("the sweep period bounds the requeue: %s", got.requeue)
	}
}

func TestRecoveryActionNames(t *testing.T) {
	for a, want := range map[v01.ProviderCredentialRefreshRecoveryAction]string{
		v01.ProviderCredentialRefreshRecoveryAction_PROVIDER_CREDENTIAL_REFRESH_RECOVERY_ACTION_UNSPECIFIED:       "",
		v01.ProviderCredentialRefreshRecoveryAction_PROVIDER_CREDENTIAL_REFRESH_RECOVERY_ACTION_FIX_CONFIGURATION: "FixConfiguration",
		v01.ProviderCredentialRefreshRecoveryAction_PROVIDER_CREDENTIAL_REFRESH_RECOVERY_ACTION_RETRY:             "Retry",
		v01.ProviderCredentialRefreshRecoveryAction(42):                                                           "42",
	} {
		if got := recoveryAction(a); got != want {
			t.Errorf("recoveryAction(%d) = %q, want %q", a, got, want)
		}
	}
}

// TestAWSOutputsAreTheGateways: an AWS STS refresh whose profile declares
// additional outputs (the secret key and session token a mint writes
// besides the access key ID): those keys are the gateway's too, through
// drift sweeps and a rotation of a credentials Secret that still holds
// them (the migration from static keys).
func TestAWSOutputsAreTheGateways(t *testing.T) {
	ctx := context.Background()
	aws := map[string][]byte{"role_arn": []byte("arn:aws:iam::1:role/agent"), "aws_access_key_id": []byte("AKIASOURCE"),
		"aws_secret_access_key": []byte("source-secret-key")}
	f := newRefreshFixture(t, aws, openshellv1alpha1.RefreshAWSSTSAssumeRole)
	f.r.DriftPeriod = time.Hour
	f.editProvider(t, func(p *openshellv1alpha1.OpenShellProvider) {
		p.Spec.Refresh = []openshellv1alpha1.CredentialRefresh{{CredentialKey: "AWS_ACCESS_KEY_ID", Strategy: openshellv1alpha1.RefreshAWSSTSAssumeRole,
			MaterialSecretRef: openshellv1alpha1.LocalObjectReference{Name: materialName}}}
	})
	s := f.secret(t)
	s.Data = map[string][]byte{"AWS_SECRET_ACCESS_KEY": []byte("static-secret"), "AWS_SESSION_TOKEN": []byte("static-session")}
	if err := f.env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	// Without the profile's binding the gateway refuses, once: asked
	// again when the material changes, or a sweep later.
	f.reconcile(t)
	f.reconcile(t)
	c := wantRefreshed(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.RefreshReasonRejected)
	if !strings.Contains(c.Message, "aws_sts_assume_role") {
		t.Errorf("message %q", c.Message)
	}
	if n := f.env.Gateway.Calls()["ConfigureProviderRefresh"]; n != 1 {
		t.Fatalf("ConfigureProviderRefresh called %d times for one rejected configuration", n)
	}
	f.env.Gateway.ImportProfile(workspace, &v01.ProviderProfile{Id: "anthropic", Credentials: []*v01.ProviderProfileCredential{{Name: "AWS_ACCESS_KEY_ID",
		Refresh: &v01.ProviderCredentialRefresh{Strategy: v01.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_AWS_STS_ASSUME_ROLE,
			AdditionalOutputs: []*v01.ProviderCredentialRefreshOutput{{Output: "secret_access_key", Credential: "AWS_SECRET_ACCESS_KEY"},
				{Output: "session_token", Credential: "AWS_SESSION_TOKEN"}}}}}})
	m := &corev1.Secret{}
	if err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: materialName}, m); err != nil {
		t.Fatal(err)
	}
	m.Data["session_name"] = []byte("agent")
	if err := f.env.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	f.r.DriftPeriod = time.Nanosecond // every reconcile compares from here on
	f.reconcile(t)
	if got := f.provider(t).Status.Gateways[0].Refresh[0].OutputKeys; !slices.Equal(got, []string{"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}) {
		t.Fatalf("output keys %v", got)
	}
	f.env.Gateway.RunRefreshWorker()
	minted, _ := f.env.Gateway.ProviderCredential(workspace, provName, "AWS_SESSION_TOKEN")
	s = f.secret(t)
	s.Data["API_KEY"] = []byte("rotated")
	if err := f.env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		f.reconcile(t)
	}
	p := f.provider(t)
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	wantRefreshed(t, p, metav1.ConditionTrue, openshellv1alpha1.RefreshReasonRefreshed)
	if got, _ := f.env.Gateway.ProviderCredential(workspace, provName, "AWS_SESSION_TOKEN"); got != minted || !strings.HasPrefix(got, "minted-") {
		t.Fatalf("AWS_SESSION_TOKEN %q, want the minted %q", got, minted)
	}
}

// TestRefreshWhereNotAllowedKeepsTheSecretsValue: a gateway that does not
// allow the strategy gets the key from the credentials Secret, as any
// other; the refresh is configured where it is allowed.
func TestRefreshWhereNotAllowedKeepsTheSecretsValue(t *testing.T) {
	ctx := context.Background()
	f := newRefreshFixture(t, nil)
	s := f.secret(t)
	s.Data[refreshedKey] = []byte("static-token")
	if err := f.env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	wantRefreshed(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.RefreshReasonNotAllowed)
	if got, _ := f.env.Gateway.ProviderCredential(workspace, provName, refreshedKey); got != "static-token" {
		t.Fatalf("%s = %q at a gateway that does not refresh it", refreshedKey, got)
	}
}

// TestDeletedMaterialStopsTheRefresh: the material Secret deleted, the
// gateway stops minting (the refresh is deleted there) and the condition
// says why.
func TestDeletedMaterialStopsTheRefresh(t *testing.T) {
	ctx := context.Background()
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.reconcile(t)
	if _, _, ok := f.env.Gateway.RefreshMaterial(workspace, provName, refreshedKey); !ok {
		t.Fatal("not configured")
	}
	if err := f.env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: materialName}}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	c := wantRefreshed(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.RefreshReasonMaterialInvalid)
	if !strings.Contains(c.Message, "not found") {
		t.Errorf("message %q", c.Message)
	}
	if _, _, ok := f.env.Gateway.RefreshMaterial(workspace, provName, refreshedKey); ok {
		t.Fatal("the gateway still refreshes from material that is gone")
	}
	// The key is the Secret's again, which has none: deleted at the
	// gateway by the push that follows.
	f.reconcile(t)
	if v, ok := f.env.Gateway.ProviderCredential(workspace, provName, refreshedKey); ok {
		t.Fatalf("%s = %q still at the gateway", refreshedKey, v)
	}
}

// TestRotationsAreBounded: annotation values changed faster than once a
// minute mint once; the next is acted on a minute later.
func TestRotationsAreBounded(t *testing.T) {
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.reconcile(t)
	for _, v := range []string{"1", "2", "3"} {
		f.askRotation(t, v)
		res := f.reconcile(t)
		if v != "1" && (res.RequeueAfter <= 0 || res.RequeueAfter > rotateEvery) {
			t.Errorf("value %s: requeue %s, want within %s", v, res.RequeueAfter, rotateEvery)
		}
	}
	if n := f.env.Gateway.Calls()["RotateProviderCredential"]; n != 1 {
		t.Fatalf("RotateProviderCredential called %d times within a minute", n)
	}
	if got := f.provider(t).Status.Gateways[0].Rotation; got != "1" {
		t.Errorf("status rotation %q: the later values are still to come", got)
	}
	// A minute later the latest value is acted on, once.
	f.r.rotations = driftcheck.Schedule{}
	f.reconcile(t)
	f.reconcile(t)
	if n := f.env.Gateway.Calls()["RotateProviderCredential"]; n != 2 {
		t.Fatalf("RotateProviderCredential called %d times, want 2", n)
	}
	if got := f.provider(t).Status.Gateways[0].Rotation; got != "3" {
		t.Errorf("status rotation %q, want the latest value", got)
	}
}

// TestRecordMadeAnewIsConfiguredAgain: the provider deleted at the gateway
// directly (its refreshes go with it) is created again by the next sweep,
// and its refresh configured on the new record.
func TestRecordMadeAnewIsConfiguredAgain(t *testing.T) {
	ctx := context.Background()
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.reconcile(t)
	f.env.Gateway.RunRefreshWorker()
	old := f.provider(t).Status.Gateways[0].GatewayID
	if _, err := f.env.Gateway.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Workspace: workspace, Name: provName}); err != nil {
		t.Fatal(err)
	}
	f.r.DriftPeriod = time.Nanosecond
	for range 3 {
		f.reconcile(t)
	}
	p := f.provider(t)
	if p.Status.Gateways[0].GatewayID == old {
		t.Fatal("not created again")
	}
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	wantRefreshed(t, p, metav1.ConditionFalse, openshellv1alpha1.RefreshReasonPending)
	if _, _, ok := f.env.Gateway.RefreshMaterial(workspace, provName, refreshedKey); !ok {
		t.Fatal("the refresh was not configured on the new record")
	}
}

// TestNothingIsSentToAnotherOwnersRecord: the record deleted and made
// again at the gateway by someone else, under the operator's name: the
// push refuses it (ProviderConflict), and no refresh call goes there.
func TestNothingIsSentToAnotherOwnersRecord(t *testing.T) {
	ctx := context.Background()
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.reconcile(t)
	if _, err := f.env.Gateway.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Workspace: workspace, Name: provName}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Gateway.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Workspace: workspace,
		Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: provName}, Type: "anthropic", Credentials: map[string]string{"K": "mallory"}}}); err != nil {
		t.Fatal(err)
	}
	calls := f.env.Gateway.Calls()
	f.r.DriftPeriod = time.Nanosecond
	f.askRotation(t, "now")
	for range 2 {
		f.reconcile(t)
	}
	p := f.provider(t)
	wantReady(t, p, metav1.ConditionFalse, openshellv1alpha1.ReasonProviderConflict)
	wantRefreshed(t, p, metav1.ConditionFalse, openshellv1alpha1.RefreshReasonProviderNotSynced)
	after := f.env.Gateway.Calls()
	for _, m := range []string{"ConfigureProviderRefresh", "RotateProviderCredential", "DeleteProviderRefresh"} {
		if after[m] != calls[m] {
			t.Errorf("%s called %d times at another owner's record", m, after[m]-calls[m])
		}
	}
}

// TestMaterialMetadataChangeIsNotSentAgain: a label on the material
// Secret (a new resourceVersion, the same data) configures nothing.
func TestMaterialMetadataChangeIsNotSentAgain(t *testing.T) {
	ctx := context.Background()
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.reconcile(t)
	m := &corev1.Secret{}
	if err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: materialName}, m); err != nil {
		t.Fatal(err)
	}
	m.Labels = map[string]string{"synced-by": "external-secrets"}
	if err := f.env.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	configures := f.env.Gateway.Calls()["ConfigureProviderRefresh"]
	f.reconcile(t)
	if n := f.env.Gateway.Calls()["ConfigureProviderRefresh"]; n != configures {
		t.Fatalf("a label on the material Secret configured the refresh again")
	}
	if got := f.provider(t).Status.Gateways[0].Refresh[0].MaterialResourceVersion; got != m.ResourceVersion {
		t.Errorf("material resourceVersion %q, want %q recorded", got, m.ResourceVersion)
	}
}

// TestRotationChecksTheRecordFirst: between two sweeps someone else made
// the provider record anew under the operator's name (the push has not
// compared it yet): a rotation asked then finds it by its ID and sends
// nothing (Refreshed=ProviderConflict).
func TestRotationChecksTheRecordFirst(t *testing.T) {
	ctx := context.Background()
	f := newRefreshFixture(t, nil, openshellv1alpha1.RefreshOAuth2RefreshToken)
	f.r.DriftPeriod = time.Hour
	f.reconcile(t)
	if _, err := f.env.Gateway.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Workspace: workspace, Name: provName}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Gateway.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Workspace: workspace,
		Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: provName}, Type: "anthropic", Credentials: map[string]string{"K": "mallory"}}}); err != nil {
		t.Fatal(err)
	}
	f.askRotation(t, "now")
	f.reconcile(t)
	c := wantRefreshed(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.ReasonProviderConflict)
	if !strings.Contains(c.Message, provName) {
		t.Errorf("message %q", c.Message)
	}
	if n := f.env.Gateway.Calls()["RotateProviderCredential"]; n != 0 {
		t.Fatalf("RotateProviderCredential called %d times at another owner's record", n)
	}
}
