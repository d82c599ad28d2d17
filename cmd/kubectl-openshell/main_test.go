package main

import (
	"net/url"
	"testing"
)

// TestSubresourceURL: a server URL with a path, or a trailing slash, as
// kubeconfigs may hold it, still names the subresource.
func TestSubresourceURL(t *testing.T) {
	for server, want := range map[string]string{
		"https://api.example:6443":        "https://api.example:6443/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/exec",
		"https://api.example:6443/":       "https://api.example:6443/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/exec",
		"https://proxy.example/k8s/prod/": "https://proxy.example/k8s/prod/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/exec",
		"https://proxy.example/k8s/prod":  "https://proxy.example/k8s/prod/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/exec",
	} {
		host, err := url.Parse(server)
		if err != nil {
			t.Fatal(err)
		}
		if got := subresourceURL(host, "team-a", "agent", "exec").String(); got != want {
			t.Errorf("%s: %s, want %s", server, got, want)
		}
	}
}
