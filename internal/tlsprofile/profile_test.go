package tlsprofile

import (
	"crypto/tls"
	"strings"
	"testing"

	configv1 "github.com/openshift/api/config/v1"
)

func TestResolve(t *testing.T) {
	custom := func(min configv1.TLSProtocolVersion, ciphers ...string) *configv1.TLSSecurityProfile {
		return &configv1.TLSSecurityProfile{Type: configv1.TLSProfileCustomType, Custom: &configv1.CustomTLSProfile{
			TLSProfileSpec: configv1.TLSProfileSpec{MinTLSVersion: min, Ciphers: ciphers, Groups: []configv1.TLSGroup{configv1.TLSGroupX25519, "no-such-group"}}}}
	}
	for name, tc := range map[string]struct {
		in      *configv1.TLSSecurityProfile
		min     uint16
		ciphers int
		err     string
	}{
		"nil is Intermediate": {in: nil, min: tls.VersionTLS12, ciphers: 6},
		"empty type":          {in: &configv1.TLSSecurityProfile{}, min: tls.VersionTLS12, ciphers: 6},
		"Old":                 {in: &configv1.TLSSecurityProfile{Type: configv1.TLSProfileOldType}, min: tls.VersionTLS10, ciphers: 17},
		"Modern":              {in: &configv1.TLSSecurityProfile{Type: configv1.TLSProfileModernType}, min: tls.VersionTLS13},
		"Custom":              {in: custom(configv1.VersionTLS12, "ECDHE-RSA-AES256-GCM-SHA384", "unknown-cipher", "ECDHE-RSA-AES256-GCM-SHA384"), min: tls.VersionTLS12, ciphers: 1},
		"Custom TLS 1.3 only": {in: custom(configv1.VersionTLS13, "TLS_AES_128_GCM_SHA256"), min: tls.VersionTLS13},
		"Custom without spec": {in: &configv1.TLSSecurityProfile{Type: configv1.TLSProfileCustomType}, err: "has no custom settings"},
		"Custom no Go cipher": {in: custom(configv1.VersionTLS12, "DES-CBC3-SHA"), err: "none of its ciphers (DES-CBC3-SHA)"},
		"unknown type":        {in: &configv1.TLSSecurityProfile{Type: "Paranoid"}, err: `unknown TLS profile type "Paranoid"`},
		"unknown min version": {in: custom("VersionTLS99", "ECDHE-RSA-AES256-GCM-SHA384"), err: `unknown minTLSVersion "VersionTLS99"`},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Resolve(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.MinVersion != tc.min || len(s.CipherSuites) != tc.ciphers {
				t.Fatalf("min %s, %d ciphers; want %s, %d", tls.VersionName(s.MinVersion), len(s.CipherSuites), tls.VersionName(tc.min), tc.ciphers)
			}
			if tc.in != nil && tc.in.Type == configv1.TLSProfileCustomType && (len(s.Curves) != 1 || s.Curves[0] != tls.X25519) {
				t.Fatalf("curves %v, want [X25519]", s.Curves)
			}
		})
	}
}

// TestEveryProfileCipherIsKnown: the Old and Intermediate profiles'
// TLS 1.2 names all map to Go suites, except the ones left out on purpose.
func TestEveryProfileCipherIsKnown(t *testing.T) {
	skipped := map[string]bool{"DES-CBC3-SHA": true, "ECDHE-ECDSA-AES256-SHA384": true, "ECDHE-RSA-AES256-SHA384": true, "AES256-SHA256": true}
	for _, typ := range []configv1.TLSProfileType{configv1.TLSProfileOldType, configv1.TLSProfileIntermediateType} {
		for _, c := range configv1.TLSProfiles[typ].Ciphers {
			if _, ok := ciphers[c]; !ok && !strings.HasPrefix(c, "TLS_") && !skipped[c] {
				t.Errorf("%s: cipher %s has no mapping", typ, c)
			}
		}
	}
}
