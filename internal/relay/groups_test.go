package relay

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	userv1 "github.com/openshift/api/user/v1"
	userfake "github.com/openshift/client-go/user/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/groupmember"
	scheme2 "github.com/openshell/openshell-operator/internal/scheme"
)

// TestAUserWhoLeftAGroupLosesTheirAccess: alice's access came through an
// OpenShift Group; once the Group no longer lists her, her open session
// ends and her membership is revoked, though every review asked with the
// identity she began with still allows it (fourth read, R2). bob, still in
// the Group, keeps both.
func TestAUserWhoLeftAGroupLosesTheirAccess(t *testing.T) {
	t.Setenv("KUBE_FEATURE_WatchListClient", "false") // groupmember's TestLeft says why
	ctx := ctrl.LoggerInto(context.Background(), logr.Discard())
	admins := &userv1.Group{ObjectMeta: metav1.ObjectMeta{Name: "team-a-admins"}, Users: userv1.OptionalNames{"alice", "bob"}}
	users := userfake.NewSimpleClientset(admins)
	groups := &groupmember.Groups{}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := groups.Watch(wctx, users); err != nil {
		t.Fatal(err)
	}
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"team-a-admins", "system:authenticated"}}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"team-a-admins", "system:authenticated"}}
	tk := leaseTokens(t)
	tk.Reader, tk.Groups = tk.Leases, groups
	// The reviews allow both whatever happens: the identity they are asked
	// with still names the Group.
	tk.Authz = &countingAuthz{allow: map[string]bool{"alice": true, "bob": true}, asked: map[string]int{}}
	for _, u := range []*user.DefaultInfo{alice, bob} {
		if err := tk.record(ctx, member("team-a", u.Name), lease{user: u, expires: time.Now().Add(time.Hour), grant: exchanged}); err != nil {
			t.Fatal(err)
		}
	}
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "sb", UID: "u1"},
		Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "x"}}
	s := &Server{Reader: fake.NewClientBuilder().WithScheme(scheme2.New()).WithObjects(sb).Build(), Authz: tk.Authz, Groups: groups}
	if why, err := s.stillAllowed(ctx, alice, "create", sb, SubresourceExec, true); err != nil || why != "" {
		t.Fatalf("while in the group: %q, %v", why, err)
	}

	admins.Users = userv1.OptionalNames{"bob"}
	if _, err := users.UserV1().Groups().Update(ctx, admins, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, func() bool { return groups.Left(alice) != "" }, "alice's removal seen")
	why, err := s.stillAllowed(ctx, alice, "create", sb, SubresourceExec, true)
	if err != nil || !strings.Contains(why, "alice is no longer in group team-a-admins") {
		t.Errorf("her open session goes on: %q, %v", why, err)
	}
	if why, err := s.stillAllowed(ctx, bob, "create", sb, SubresourceExec, true); err != nil || why != "" {
		t.Errorf("bob's session ends: %q, %v", why, err)
	}
	tk.recheck(ctx)
	if got := leaseUsers(t, tk); !maps.Equal(got, map[string]bool{"bob": true}) {
		t.Errorf("memberships after the removal: %v, want bob's only", got)
	}
}
