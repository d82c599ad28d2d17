package relay

import "k8s.io/apiserver/pkg/authentication/authenticator"

// ExternalAuthenticatorFor is an external port listener's authenticator
// over tokens (the TokenReview), for tests outside the package.
func ExternalAuthenticatorFor(tokens authenticator.Token) *ExternalAuthenticator {
	return &ExternalAuthenticator{tokens: tokens, failures: &sourceLimits{}}
}
