package operatorenv

import (
	"slices"
	"strings"
	"testing"
)

func TestWatchNamespaces(t *testing.T) {
	for name, tt := range map[string]struct {
		in      string
		want    []string
		wantErr string
	}{
		"empty means all":          {in: "", want: nil},
		"blank means all":          {in: "  , ,", want: nil},
		"own namespace":            {in: "openshell", want: []string{"openshell"}},
		"several, trimmed":         {in: " a , b,c ", want: []string{"a", "b", "c"}},
		"duplicates dropped":       {in: "a,b,a", want: []string{"a", "b"}},
		"upper case rejected":      {in: "a,Bad", wantErr: `"Bad" is not a namespace name`},
		"wildcard rejected":        {in: "*", wantErr: `"*" is not a namespace name`},
		"too long rejected":        {in: strings.Repeat("a", 64), wantErr: "is not a namespace name"},
		"slash rejected":           {in: "a/b", wantErr: `"a/b" is not a namespace name`},
		"trailing comma tolerated": {in: "a,", want: []string{"a"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := WatchNamespaces(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("WatchNamespaces(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("WatchNamespaces(%q): %v", tt.in, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("WatchNamespaces(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRelatedImagesFromEnv(t *testing.T) {
	env := map[string]string{
		EnvRelatedImageGateway:         "registry.example/gw@sha256:" + strings.Repeat("a", 64),
		EnvRelatedImageSandbox:         "registry.example/sb@sha256:" + strings.Repeat("b", 64),
		EnvRelatedImageSandboxRuntime:  "registry.example/rt@sha256:" + strings.Repeat("c", 64),
		"RELATED_IMAGE_LEGACY_GATEWAY": "registry.example/gw@sha256:" + strings.Repeat("d", 64),
	}
	got := RelatedImagesFromEnv(func(k string) string { return env[k] })
	want := Releases{
		Default: RelatedImages{Gateway: env[EnvRelatedImageGateway], Sandbox: env[EnvRelatedImageSandbox], SandboxRuntime: env[EnvRelatedImageSandboxRuntime]},
		Legacy:  RelatedImages{Gateway: env["RELATED_IMAGE_LEGACY_GATEWAY"]},
	}
	if got != want {
		t.Fatalf("RelatedImagesFromEnv = %+v, want %+v", got, want)
	}
	if m, want := got.Missing(), []string{"RELATED_IMAGE_LEGACY_SANDBOX", "RELATED_IMAGE_LEGACY_SUPERVISOR", EnvRelatedImageSupervisor}; !slices.Equal(m, want) {
		t.Fatalf("Missing() = %v, want %v", m, want)
	}
	// Env is what RelatedImagesFromEnv reads back.
	back := map[string]string{}
	for _, kv := range got.Env() {
		k, v, _ := strings.Cut(kv, "=")
		back[k] = v
	}
	if again := RelatedImagesFromEnv(func(k string) string { return back[k] }); again != got {
		t.Fatalf("Env does not round-trip: %+v", again)
	}
}
