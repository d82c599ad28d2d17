// Package tlsprofile turns OpenShift's cluster TLS security profile
// (apiserver.config.openshift.io/cluster spec.tlsSecurityProfile) into Go
// TLS settings, and keeps the operator's servers — webhook, metrics, OIDC
// issuer — on the current profile without a restart (Watcher).
//
// The OpenSSL→IANA cipher names are mapped here rather than taken from
// openshift/library-go's crypto package: library-go cannot be built here
// (its go.mod fails verification), and the table is small and fixed by the
// profiles openshift/api defines.
package tlsprofile

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	configv1 "github.com/openshift/api/config/v1"
)

// Settings are the parts of a tls.Config a profile decides.
type Settings struct {
	MinVersion uint16
	// CipherSuites apply to TLS 1.2 and older; Go does not make TLS 1.3
	// suites configurable (all of them are in every profile).
	CipherSuites []uint16
	Curves       []tls.CurveID
	// Profile names the profile, for logs and events.
	Profile string
}

// Apply sets the profile's fields on cfg.
func (s Settings) Apply(cfg *tls.Config) {
	cfg.MinVersion = s.MinVersion
	cfg.CipherSuites = slices.Clone(s.CipherSuites)
	cfg.CurvePreferences = slices.Clone(s.Curves)
}

// Default is what a nil profile means on OpenShift: Intermediate.
func Default() Settings {
	s, _ := Resolve(nil)
	return s
}

// Resolve returns the settings of profile (nil: Intermediate). Unknown
// cipher and group names are skipped, as OpenShift's own components do (a
// profile lists OpenSSL names some binaries do not implement); a profile
// that leaves no usable TLS 1.2 cipher while allowing TLS 1.2 is an error.
func Resolve(profile *configv1.TLSSecurityProfile) (Settings, error) {
	typ := configv1.TLSProfileIntermediateType
	if profile != nil && profile.Type != "" {
		typ = profile.Type
	}
	var spec *configv1.TLSProfileSpec
	switch typ {
	case configv1.TLSProfileCustomType:
		if profile.Custom == nil {
			return Settings{}, fmt.Errorf("TLS profile Custom has no custom settings")
		}
		spec = &profile.Custom.TLSProfileSpec
	default:
		spec = configv1.TLSProfiles[typ]
		if spec == nil {
			return Settings{}, fmt.Errorf("unknown TLS profile type %q", typ)
		}
	}
	s := Settings{Profile: string(typ)}
	var ok bool
	if s.MinVersion, ok = versions[spec.MinTLSVersion]; !ok {
		return Settings{}, fmt.Errorf("TLS profile %s: unknown minTLSVersion %q", typ, spec.MinTLSVersion)
	}
	for _, name := range spec.Ciphers {
		if id, ok := ciphers[name]; ok && !slices.Contains(s.CipherSuites, id) {
			s.CipherSuites = append(s.CipherSuites, id)
		}
	}
	for _, g := range spec.Groups {
		if id, ok := groups[g]; ok {
			s.Curves = append(s.Curves, id)
		}
	}
	if s.MinVersion < tls.VersionTLS13 && len(s.CipherSuites) == 0 {
		return Settings{}, fmt.Errorf("TLS profile %s allows %s but none of its ciphers (%s) is a TLS 1.2 cipher Go implements",
			typ, spec.MinTLSVersion, strings.Join(spec.Ciphers, ", "))
	}
	return s, nil
}

var versions = map[configv1.TLSProtocolVersion]uint16{
	configv1.VersionTLS10: tls.VersionTLS10,
	configv1.VersionTLS11: tls.VersionTLS11,
	configv1.VersionTLS12: tls.VersionTLS12,
	configv1.VersionTLS13: tls.VersionTLS13,
}

var groups = map[configv1.TLSGroup]tls.CurveID{
	configv1.TLSGroupX25519:             tls.X25519,
	configv1.TLSGroupSecP256r1:          tls.CurveP256,
	configv1.TLSGroupSecP384r1:          tls.CurveP384,
	configv1.TLSGroupSecP521r1:          tls.CurveP521,
	configv1.TLSGroupX25519MLKEM768:     tls.X25519MLKEM768,
	configv1.TLSGroupSecP256r1MLKEM768:  tls.SecP256r1MLKEM768,
	configv1.TLSGroupSecP384r1MLKEM1024: tls.SecP384r1MLKEM1024,
}

// ciphers maps the OpenSSL names the profiles use to Go's TLS 1.2 (and
// older) suites. TLS 1.3 names (TLS_AES_128_GCM_SHA256, ...) are absent on
// purpose: Go always enables every TLS 1.3 suite. Go does not implement
// DES-CBC3-SHA's 3DES in this role nor the SHA-384 CBC suites, so those are
// skipped, as OpenShift's own Go components skip them.
var ciphers = map[string]uint16{
	"ECDHE-ECDSA-AES128-GCM-SHA256": tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-RSA-AES128-GCM-SHA256":   tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-ECDSA-AES256-GCM-SHA384": tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-RSA-AES256-GCM-SHA384":   tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-ECDSA-CHACHA20-POLY1305": tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-RSA-CHACHA20-POLY1305":   tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-ECDSA-AES128-SHA256":     tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
	"ECDHE-RSA-AES128-SHA256":       tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256,
	"ECDHE-ECDSA-AES128-SHA":        tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
	"ECDHE-RSA-AES128-SHA":          tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
	"ECDHE-ECDSA-AES256-SHA":        tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	"ECDHE-RSA-AES256-SHA":          tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
	"AES128-GCM-SHA256":             tls.TLS_RSA_WITH_AES_128_GCM_SHA256,
	"AES256-GCM-SHA384":             tls.TLS_RSA_WITH_AES_256_GCM_SHA384,
	"AES128-SHA256":                 tls.TLS_RSA_WITH_AES_128_CBC_SHA256,
	"AES128-SHA":                    tls.TLS_RSA_WITH_AES_128_CBC_SHA,
	"AES256-SHA":                    tls.TLS_RSA_WITH_AES_256_CBC_SHA,
}
