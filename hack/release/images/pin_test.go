package images

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPinFile resolves tags against a real registry (in memory, on
// loopback): a single image and a multi-arch index are pinned to the digest
// the registry serves, pinned lines and comments are kept, a second run
// changes nothing, and an unresolvable tag leaves the file untouched.
func TestPinFile(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	push := func(ref string, content string) v1.Image {
		t.Helper()
		l, err := Layer([]File{{Path: "/f", Mode: 0o644, Data: []byte(content)}})
		if err != nil {
			t.Fatal(err)
		}
		img, err := Build(Config{}, l)
		if err != nil {
			t.Fatal(err)
		}
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(tag, img, remote.WithTransport(srv.Client().Transport)); err != nil {
			t.Fatal(err)
		}
		return img
	}
	gateway := push(host+"/nvidia/gateway:1.0", "gateway")
	amd, arm := push(host+"/nvidia/supervisor:amd64", "amd"), push(host+"/nvidia/supervisor:arm64", "arm")
	index := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	supTag, _ := name.NewTag(host + "/nvidia/supervisor:1.0")
	if err := remote.WriteIndex(supTag, index, remote.WithTransport(srv.Client().Transport)); err != nil {
		t.Fatal(err)
	}
	gwDigest, _ := gateway.Digest()
	idxDigest, _ := index.Digest()

	file := filepath.Join(t.TempDir(), "images.yaml")
	already := host + "/nvidia/base@sha256:" + strings.Repeat("a", 64)
	in := "# comment kept\noperator: quay.io/x/op@sha256:" + strings.Repeat("b", 64) + "\nrelated:\n" +
		"  RELATED_IMAGE_GATEWAY: " + host + "/nvidia/gateway:1.0\n" +
		"  RELATED_IMAGE_SUPERVISOR: " + host + "/nvidia/supervisor:1.0\n" +
		"  RELATED_IMAGE_SANDBOX: " + already + "\n"
	if err := os.WriteFile(file, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}

	pinned, err := PinFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(pinned) != 2 {
		t.Fatalf("pinned %v, want the gateway and the supervisor", pinned)
	}
	raw, _ := os.ReadFile(file)
	want := "# comment kept\noperator: quay.io/x/op@sha256:" + strings.Repeat("b", 64) + "\nrelated:\n" +
		"  RELATED_IMAGE_GATEWAY: " + host + "/nvidia/gateway@" + gwDigest.String() + "\n" +
		"  RELATED_IMAGE_SUPERVISOR: " + host + "/nvidia/supervisor@" + idxDigest.String() + "\n" +
		"  RELATED_IMAGE_SANDBOX: " + already + "\n"
	if string(raw) != want {
		t.Fatalf("pinned file:\n%s\nwant:\n%s", raw, want)
	}

	// Idempotent.
	if again, err := PinFile(file); err != nil || len(again) != 0 {
		t.Fatalf("second run pinned %v, %v; want nothing", again, err)
	}

	// A tag the registry does not have: an error naming it, the file unchanged.
	bad := strings.Replace(in, "gateway:1.0", "gateway:9.9", 1)
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PinFile(file); err == nil || !strings.Contains(err.Error(), "gateway:9.9") {
		t.Fatalf("unknown tag: got %v, want an error naming gateway:9.9", err)
	}
	if raw, _ := os.ReadFile(file); string(raw) != bad {
		t.Fatalf("a failed pin rewrote the file:\n%s", raw)
	}
}
