package groupmember

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	userv1 "github.com/openshift/api/user/v1"
	userfake "github.com/openshift/client-go/user/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// TestLeft: an identity that names a Group which no longer lists the user,
// or which was deleted, is out of date; groups that are not Group objects,
// and the API server's own, are never taken for left.
func TestLeft(t *testing.T) {
	// openshift/client-go's fake answers no streaming list (client-go's
	// WatchListClient, on by default), which would leave the informer
	// unsynced; a real API server does.
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admins := &userv1.Group{ObjectMeta: metav1.ObjectMeta{Name: "team-a-admins"}, Users: userv1.OptionalNames{"alice", "bob"}}
	devs := &userv1.Group{ObjectMeta: metav1.ObjectMeta{Name: "team-a-devs"}, Users: userv1.OptionalNames{"alice"}}
	client := userfake.NewSimpleClientset(admins, devs)
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"team-a-admins", "team-a-devs", "idp:engineering", "system:authenticated"}}

	var unfollowed *Groups
	g.Expect(unfollowed.Left(alice)).To(BeEmpty(), "nil follows nothing")
	gs := &Groups{}
	g.Expect(gs.Left(alice)).To(BeEmpty(), "not synced: nothing is known")
	g.Expect(gs.Watch(ctx, client)).To(Succeed())
	g.Expect(gs.Left(alice)).To(BeEmpty(), "in every Group her identity names")

	// Removed from one Group.
	admins.Users = userv1.OptionalNames{"bob"}
	_, err := client.UserV1().Groups().Update(ctx, admins, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() string { return gs.Left(alice) }).WithTimeout(10 * time.Second).Should(Equal("team-a-admins"))
	g.Expect(gs.Left(&user.DefaultInfo{Name: "bob", Groups: []string{"team-a-admins"}})).To(BeEmpty())
	// A new session names her groups as they are now.
	g.Expect(gs.Left(&user.DefaultInfo{Name: "alice", Groups: []string{"team-a-devs", "idp:engineering"}})).To(BeEmpty())

	// A Group deleted.
	g.Expect(client.UserV1().Groups().Delete(ctx, "team-a-devs", metav1.DeleteOptions{})).To(Succeed())
	current := &user.DefaultInfo{Name: "alice", Groups: []string{"team-a-devs"}}
	g.Eventually(func() string { return gs.Left(current) }).WithTimeout(10 * time.Second).Should(Equal("team-a-devs"))
	// Created again with her in it: she is in it again.
	_, err = client.UserV1().Groups().Create(ctx, &userv1.Group{ObjectMeta: metav1.ObjectMeta{Name: "team-a-devs"}, Users: userv1.OptionalNames{"alice"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() string { return gs.Left(current) }).WithTimeout(10 * time.Second).Should(BeEmpty())
}
