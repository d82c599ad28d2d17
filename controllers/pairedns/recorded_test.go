package pairedns

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestARecordTheCacheHasNotSeenIsNotWrittenAgain: the tenant egress
// outcome the cache shows may predate this reconciler's last record of it
// (a kept paired namespace is read from the metadata cache). The API
// server's copy decides whether a record, and its Event, is due: a Warning
// was once announced twice.
func TestARecordTheCacheHasNotSeenIsNotWrittenAgain(t *testing.T) {
	const outcome = "Applied: 2 policies"
	ns := func(uid types.UID, annotation string, pending bool) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "paired", UID: uid}}
		if annotation != "" {
			n.Annotations = map[string]string{render.AnnotationTenantEgress: annotation}
		}
		if pending {
			n.Labels = map[string]string{render.LabelEgressPending: "true"}
		}
		return n
	}
	paired := pairedRef{name: "paired", uid: "uid-1"}
	for name, tc := range map[string]struct {
		live     *corev1.Namespace
		release  bool
		recorded bool
	}{
		"already recorded":                   {live: ns("uid-1", outcome, false), recorded: true},
		"recorded, released":                 {live: ns("uid-1", outcome, false), release: true, recorded: true},
		"recorded, still pending a release":  {live: ns("uid-1", outcome, true), release: true},
		"another outcome recorded":           {live: ns("uid-1", "NotWritten: x", false)},
		"nothing recorded":                   {live: ns("uid-1", "", false)},
		"a namespace of the name made again": {live: ns("uid-2", outcome, false)},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Reconciler{APIReader: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(tc.live).Build()}
			if got := r.recorded(context.Background(), paired, outcome, tc.release); got != tc.recorded {
				t.Fatalf("recorded = %v, want %v", got, tc.recorded)
			}
		})
	}
}
