package testgateway

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// Provider credential refresh (0.1): the four RPCs of the 0.1.5
// descriptors, with the handler rules established for the pre-0.1 source
// (docs/real-components.md): only the four gateway-minted strategies are
// configured; material naming a token endpoint (token_url, token_uri,
// sts_endpoint_url) is refused; secret_material_keys must be material
// keys; AWS STS needs the provider's profile to declare that refresh for
// the credential; configuring does not mint, the refresh worker does (RunRefreshWorker
// plays one tick of it) and Rotate mints at once; a mint writes the
// credential, and the additional outputs the profile declares for it, into
// the provider record, a new resource version; an
// UpdateProvider that writes or deletes a refreshed key is refused; deleting
// a refresh leaves the minted value; deleting the provider deletes its
// refreshes. What the stand-in mints is a counter, not a token endpoint's
// answer; FailRefresh makes mints fail, as an endpoint refusing would.

// refreshKey names one refreshed credential.
type refreshKey struct{ ws, provider, key string }

// refreshState is one configured refresh.
type refreshState struct {
	material   map[string]string
	secretKeys []string
	// outputs are the other credentials a mint writes (the profile's
	// additional outputs).
	outputs []string
	st      *v01.ProviderCredentialRefreshStatus
}

// refreshFailure is what mints answer while FailRefresh holds.
type refreshFailure struct {
	code, msg string
	action    v01.ProviderCredentialRefreshRecoveryAction
}

// Mint lifetime and margin, the handler's defaults (max_lifetime 3600 s,
// refresh_before 300 s).
const (
	mintLifetime  = time.Hour
	refreshBefore = 5 * time.Minute
	// retryAfterFailure is the worker's fixed retry after a failed mint.
	retryAfterFailure = time.Minute
)

// mintable are the strategies the gateway mints itself.
var mintable = []v01.ProviderCredentialRefreshStrategy{
	v01.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_OAUTH2_REFRESH_TOKEN,
	v01.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_OAUTH2_CLIENT_CREDENTIALS,
	v01.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_GOOGLE_SERVICE_ACCOUNT_JWT,
	v01.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_AWS_STS_ASSUME_ROLE,
}

func (s *v01Server) ConfigureProviderRefresh(_ context.Context, in *v01.ConfigureProviderRefreshRequest) (*v01.ConfigureProviderRefreshResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	if err := validRefresh(in); err != nil {
		return nil, err
	}
	return idempotent(s.g, in, func() (*v01.ConfigureProviderRefreshResponse, error) {
		g := s.g
		g.mu.Lock()
		defer g.mu.Unlock()
		k, err := g.refreshKeyOf(in.GetWorkspaceScope().GetWorkspace(), in.GetProvider(), in.GetCredentialKey())
		if err != nil {
			return nil, err
		}
		binding := g.profileRefreshLocked(k)
		if in.GetStrategy() == v01.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_AWS_STS_ASSUME_ROLE &&
			binding.GetStrategy() != in.GetStrategy() {
			return nil, status.Error(codes.FailedPrecondition, "aws_sts_assume_role requires the provider profile to declare an aws_sts_assume_role refresh for the credential")
		}
		var outputs []string
		for _, o := range binding.GetAdditionalOutputs() {
			outputs = append(outputs, o.GetCredential())
		}
		st := &v01.ProviderCredentialRefreshStatus{Provider: k.provider, ProviderId: g.providers[wsName{k.ws, k.provider}].GetMetadata().GetId(),
			CredentialKey: k.key, Strategy: in.GetStrategy(), Status: "configured", ExpirationTime: in.GetExpirationTime()}
		if old, ok := g.refreshes[k]; ok {
			st.LastRefreshTime = old.st.GetLastRefreshTime()
		}
		g.refreshes[k] = &refreshState{material: maps.Clone(in.GetMaterial()), secretKeys: slices.Clone(in.GetSecretMaterialKeys()), outputs: outputs, st: st}
		return &v01.ConfigureProviderRefreshResponse{Status: proto.Clone(st).(*v01.ProviderCredentialRefreshStatus)}, nil
	})
}

// validRefresh is the handler's checks of a configure request that need
// no state.
func validRefresh(in *v01.ConfigureProviderRefreshRequest) error {
	switch {
	case strings.TrimSpace(in.GetProvider()) == "":
		return status.Error(codes.InvalidArgument, "provider is required")
	case strings.TrimSpace(in.GetCredentialKey()) == "":
		return status.Error(codes.InvalidArgument, "credential_key is required")
	case !envKey.MatchString(in.GetCredentialKey()):
		return status.Error(codes.InvalidArgument, "credential_key must be a valid environment variable name")
	case in.GetStrategy() == v01.ProviderCredentialRefreshStrategy_PROVIDER_CREDENTIAL_REFRESH_STRATEGY_UNSPECIFIED:
		return status.Error(codes.InvalidArgument, "refresh strategy is required")
	case !slices.Contains(mintable, in.GetStrategy()):
		return status.Errorf(codes.InvalidArgument, "refresh strategy '%s' is not gateway-mintable; update current credentials with provider update instead", in.GetStrategy())
	case len(in.GetMaterial()) > 64:
		return status.Error(codes.InvalidArgument, "material exceeds maximum entries")
	}
	for _, k := range []string{"token_url", "token_uri"} {
		if strings.TrimSpace(in.GetMaterial()[k]) != "" {
			return status.Error(codes.InvalidArgument, "refresh token endpoints must be defined by the provider profile, not material")
		}
	}
	if _, ok := in.GetMaterial()["sts_endpoint_url"]; ok {
		return status.Error(codes.InvalidArgument, "sts_endpoint_url material is not permitted")
	}
	for _, k := range in.GetSecretMaterialKeys() {
		if _, ok := in.GetMaterial()[k]; !ok {
			return status.Errorf(codes.InvalidArgument, "secret_material_keys entry '%s' is not present in material", k)
		}
	}
	return nil
}

// refreshKeyOf checks the workspace and provider exist; g.mu held.
func (g *Gateway) refreshKeyOf(workspace, provider, key string) (refreshKey, error) {
	ws, err := g.workspaceOf(workspace)
	if err != nil {
		return refreshKey{}, err
	}
	if _, ok := g.providers[wsName{ws, provider}]; !ok {
		return refreshKey{}, status.Error(codes.NotFound, "provider not found")
	}
	return refreshKey{ws, provider, key}, nil
}

func (s *v01Server) RotateProviderCredential(_ context.Context, in *v01.RotateProviderCredentialRequest) (*v01.RotateProviderCredentialResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	return idempotent(s.g, in, func() (*v01.RotateProviderCredentialResponse, error) {
		g := s.g
		g.mu.Lock()
		defer g.mu.Unlock()
		k, err := g.refreshKeyOf(in.GetWorkspaceScope().GetWorkspace(), in.GetProvider(), in.GetCredentialKey())
		if err != nil {
			return nil, err
		}
		r, ok := g.refreshes[k]
		if !ok {
			return nil, status.Error(codes.NotFound, "provider refresh state not found")
		}
		if err := g.mintLocked(k, r, time.Now()); err != nil {
			return nil, err
		}
		return &v01.RotateProviderCredentialResponse{Status: proto.Clone(r.st).(*v01.ProviderCredentialRefreshStatus)}, nil
	})
}

func (s *v01Server) GetProviderRefreshStatus(_ context.Context, in *v01.GetProviderRefreshStatusRequest) (*v01.GetProviderRefreshStatusResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	if strings.TrimSpace(in.GetProvider()) == "" {
		return nil, status.Error(codes.InvalidArgument, "provider is required")
	}
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	k, err := g.refreshKeyOf(in.GetWorkspaceScope().GetWorkspace(), in.GetProvider(), in.GetCredentialKey())
	if err != nil {
		return nil, err
	}
	out := &v01.GetProviderRefreshStatusResponse{}
	for rk, r := range g.refreshes {
		if rk.ws == k.ws && rk.provider == k.provider && (k.key == "" || rk.key == k.key) {
			out.Credentials = append(out.Credentials, proto.Clone(r.st).(*v01.ProviderCredentialRefreshStatus))
		}
	}
	slices.SortFunc(out.Credentials, func(a, b *v01.ProviderCredentialRefreshStatus) int {
		return strings.Compare(a.CredentialKey, b.CredentialKey)
	})
	return out, nil
}

func (s *v01Server) DeleteProviderRefresh(_ context.Context, in *v01.DeleteProviderRefreshRequest) (*v01.DeleteProviderRefreshResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	return idempotent(s.g, in, func() (*v01.DeleteProviderRefreshResponse, error) {
		g := s.g
		g.mu.Lock()
		defer g.mu.Unlock()
		absent := &v01.DeleteProviderRefreshResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT}
		k, err := g.refreshKeyOf(in.GetWorkspaceScope().GetWorkspace(), in.GetProvider(), in.GetCredentialKey())
		if status.Code(err) == codes.NotFound && in.GetAllowMissing() {
			return absent, nil
		}
		if err != nil {
			return nil, err
		}
		if _, ok := g.refreshes[k]; !ok {
			if in.GetAllowMissing() {
				return absent, nil
			}
			return nil, status.Error(codes.NotFound, "provider refresh state not found")
		}
		delete(g.refreshes, k)
		return &v01.DeleteProviderRefreshResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_COMPLETED}, nil
	})
}

// mintLocked mints k's credential into its provider record, or records
// the failure FailRefresh set; g.mu held.
func (g *Gateway) mintLocked(k refreshKey, r *refreshState, now time.Time) error {
	if f := g.refreshFail; f != nil {
		r.st.Status, r.st.LastError, r.st.FailureCode, r.st.RecoveryAction = "error", f.msg, f.code, f.action
		r.st.LastErrorTime, r.st.NextRefreshTime = timestamppb.New(now), timestamppb.New(now.Add(retryAfterFailure))
		return status.Error(codes.Unavailable, f.msg) // as a token endpoint that failed
	}
	p := g.providers[wsName{k.ws, k.provider}]
	if p.Credentials == nil {
		p.Credentials = map[string]string{}
	}
	g.minted++
	for _, key := range append([]string{k.key}, r.outputs...) {
		p.Credentials[key] = fmt.Sprintf("minted-%s-%d", key, g.minted)
	}
	p.Metadata.ResourceVersion++
	exp := now.Add(mintLifetime)
	r.st.Status, r.st.LastError, r.st.FailureCode, r.st.LastErrorTime = "refreshed", "", "", nil
	r.st.RecoveryAction = v01.ProviderCredentialRefreshRecoveryAction_PROVIDER_CREDENTIAL_REFRESH_RECOVERY_ACTION_UNSPECIFIED
	r.st.LastRefreshTime, r.st.ExpirationTime, r.st.NextRefreshTime = timestamppb.New(now), timestamppb.New(exp), timestamppb.New(exp.Add(-refreshBefore))
	return nil
}

// RunRefreshWorker is one tick of the gateway's refresh worker: it mints
// every credential whose refresh is due (never minted, failed, or near
// expiry) and returns how many it tried.
func (g *Gateway) RunRefreshWorker() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	now, n := time.Now(), 0
	for k, r := range g.refreshes {
		if r.st.GetStatus() == "refreshed" && r.st.GetNextRefreshTime().AsTime().After(now) {
			continue
		}
		n++
		_ = g.mintLocked(k, r, now) // a failure is recorded in the status
	}
	return n
}

// FailRefresh makes every mint fail with code, action and msg (the
// gateway's last_error) until called with msg "".
func (g *Gateway) FailRefresh(code string, action v01.ProviderCredentialRefreshRecoveryAction, msg string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshFail = nil
	if msg != "" {
		g.refreshFail = &refreshFailure{code: code, msg: msg, action: action}
	}
}

// RefreshMaterial is what the gateway was last configured with for one
// credential (tests check what the operator sent), and whether it was.
func (g *Gateway) RefreshMaterial(ws, provider, key string) (material map[string]string, secretKeys []string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.refreshes[refreshKey{ws, provider, key}]
	if !ok {
		return nil, nil, false
	}
	return maps.Clone(r.material), slices.Clone(r.secretKeys), true
}

// ProviderCredential is the value a provider holds for key, unredacted
// (tests check a refreshed value is not overwritten).
func (g *Gateway) ProviderCredential(ws, provider, key string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.providers[wsName{ws, provider}].GetCredentials()[key]
	return v, ok
}

// refreshedKeysLocked are the credential keys of a provider that a refresh
// owns; g.mu held.
func (g *Gateway) refreshedKeysLocked(ws, provider string) []string {
	var keys []string
	for k, r := range g.refreshes {
		if k.ws == ws && k.provider == provider {
			keys = append(append(keys, k.key), r.outputs...)
		}
	}
	return keys
}

// profileRefreshLocked is the refresh the provider's profile declares for
// k's credential (by name or env var), nil if none; g.mu held.
func (g *Gateway) profileRefreshLocked(k refreshKey) *v01.ProviderCredentialRefresh {
	p := g.providers[wsName{k.ws, k.provider}]
	prof := g.profiles[catalogKey{g.profileRefs[wsName{k.ws, k.provider}], p.GetType()}]
	for _, c := range prof.GetCredentials() {
		if c.GetName() == k.key || slices.Contains(c.GetEnvVars(), k.key) {
			return c.GetRefresh()
		}
	}
	return nil
}

// refreshOwned refuses an update that writes or deletes a refreshed
// credential.
func (g *Gateway) refreshOwned(in *v01.UpdateProviderRequest) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var owned []string
	for _, k := range g.refreshedKeysLocked(in.GetWorkspaceScope().GetWorkspace(), in.GetProvider().GetMetadata().GetName()) {
		if _, ok := in.GetProvider().GetCredentials()[k]; ok {
			owned = append(owned, k)
		}
	}
	if len(owned) == 0 {
		return nil
	}
	slices.Sort(owned)
	return status.Errorf(codes.FailedPrecondition, "credentials managed by provider refresh cannot be updated or deleted with provider update: %s; "+
		"use provider refresh rotate, configure, or delete", strings.Join(owned, ", "))
}

// forgetRefreshesLocked deletes a deleted provider's refreshes; g.mu held.
func (g *Gateway) forgetRefreshesLocked(ws, provider string) {
	for k := range g.refreshes {
		if k.ws == ws && k.provider == provider {
			delete(g.refreshes, k)
		}
	}
}
