package v1alpha1

import (
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
)

// Host is the host of the external ports' URL, in lower case: the one they
// are published at, or, while Published is False, the one the gateway
// holds a claim on. "" when there is no https URL.
func (s *ExternalPortsStatus) Host() string {
	if s == nil || s.URL == "" {
		return ""
	}
	u, err := url.Parse(s.URL)
	if err != nil || u.Scheme != "https" {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// PublishedHost is Host while Published is True, "" otherwise. The
// external ports controller decides who keeps a host by it, and the relay
// serves a gateway's sandboxes at it alone (only the operator writes a
// gateway's status).
func (s *ExternalPortsStatus) PublishedHost() string {
	if s == nil || !meta.IsStatusConditionTrue(s.Conditions, ExternalPortsConditionPublished) {
		return ""
	}
	return s.Host()
}
