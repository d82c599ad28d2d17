package relayload_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/internal/scheme"
)

func issuer(t *testing.T) *oidc.Issuer {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	i := &oidc.Issuer{URL: "https://issuer.example", Client: c, SecretNamespace: "operator", SecretName: "keys"}
	if err := i.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return i
}

// TestOnlyTheRelaysLoadCounts: a Lease reads back as its replica's load
// only as the relay signed it. Whoever else may write Leases in the
// relay's namespace cannot inflate the counts (scaling the relay up, or
// filling a user's limit on every replica) by writing one, changing a
// signed one, or moving one to another pod.
func TestOnlyTheRelaysLoadCounts(t *testing.T) {
	keys := issuer(t)
	load := relayload.Load{Sessions: 3, Users: map[string]int{"dave": 2, "erin": 1}, Namespaces: map[string]int{"team-a": 3}}
	replica := relayload.Replica{Pod: "relay-7d9f-abcde", UID: "uid-1"}
	o, err := relayload.Render("operator", replica, load, keys)
	if err != nil {
		t.Fatal(err)
	}
	if o.Name != relayload.Name(replica.Pod) || o.Labels[relayload.Label] != "true" || o.OwnerReferences[0].UID != replica.UID {
		t.Fatalf("rendered %s %v %v", o.Name, o.Labels, o.OwnerReferences)
	}
	got, err := relayload.Read(o, keys)
	if err != nil || got.Sessions != 3 || got.Users["dave"] != 2 || got.Namespaces["team-a"] != 3 {
		t.Fatalf("read back: %+v %v", got, err)
	}
	for name, forge := range map[string]func(){
		"more sessions": func() { o.Annotations["openshell.ai/load"] = `{"sessions":3000,"users":{"dave":16}}` },
		"another pod":   func() { o.OwnerReferences[0].UID = "uid-2" },
		"no owner":      func() { o.OwnerReferences = nil },
		"another name":  func() { o.Name = relayload.Name("relay-other") },
		"no signature":  func() { delete(o.Annotations, "openshell.ai/signature") },
		"another key": func() {
			o.Annotations["openshell.ai/signature"] = mustRender(t, issuer(t), replica, load).Annotations["openshell.ai/signature"]
		},
		"another namespace": func() { o.Namespace = "elsewhere" },
		"a finalizer":       func() { o.Finalizers = []string{"example.com/keep"} },
		"being deleted":     func() { o.DeletionTimestamp = &metav1.Time{Time: time.Now()} },
		"a second owner": func() {
			o.OwnerReferences = append(o.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "keep", UID: "uid-3"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			saved := o.DeepCopy()
			defer func() { o = saved }()
			forge()
			if _, err := relayload.Read(o, keys); err == nil {
				t.Fatal("a changed Lease was believed")
			}
		})
	}
}

func mustRender(t *testing.T, keys relayload.Signer, r relayload.Replica, l relayload.Load) *coordinationv1.Lease {
	t.Helper()
	o, err := relayload.Render("operator", r, l, keys)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestScaling: the admin's environment, each mistake named; the
// recommendation within the bounds.
func TestScaling(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := relayload.ScalingFromEnv(env(nil))
	if err != nil || s != relayload.DefaultScaling {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{relayload.EnvMaxReplicas: "ten"}, "RELAY_MAX_REPLICAS=\"ten\": want a whole number"},
		{map[string]string{relayload.EnvMinReplicas: "1"}, "RELAY_MIN_REPLICAS=1: the relay keeps at least 2 replicas"},
		{map[string]string{relayload.EnvMinReplicas: "5", relayload.EnvMaxReplicas: "3"}, "RELAY_MAX_REPLICAS=3 is below RELAY_MIN_REPLICAS=5"},
		{map[string]string{relayload.EnvSessionsPerReplica: "0"}, "at least one session"},
	} {
		if _, err := relayload.ScalingFromEnv(env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.env, err, tc.want)
		}
	}
	if s, err := relayload.ScalingFromEnv(env(map[string]string{relayload.EnvMaxReplicas: "0"})); err != nil || s.Enabled() {
		t.Errorf("RELAY_MAX_REPLICAS=0 turns scaling off: %+v %v", s, err)
	}
	p := relayload.Scaling{Min: 2, Max: 5, SessionsPerReplica: 300, ScaleDownDelay: time.Minute}
	for sessions, want := range map[int]int32{0: 2, 300: 2, 601: 3, 1200: 4, 100000: 5} {
		if got := p.Recommend(sessions); got != want {
			t.Errorf("Recommend(%d) = %d, want %d", sessions, got, want)
		}
	}
}
