package saexist

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/openshell/openshell-operator/test/metadatafake"
)

func TestGone(t *testing.T) {
	ctx := context.Background()
	sa := metadatafake.Object("v1", "ServiceAccount", "team-a", "chatbot")
	sa.UID = "uid-1"
	kube := metadatafake.New(t, sa)
	chatbot := &user.DefaultInfo{Name: "system:serviceaccount:team-a:chatbot", UID: "uid-1"}

	var a *Accounts
	if a.Gone(ctx, chatbot) {
		t.Fatal("a nil Accounts says gone")
	}
	a = &Accounts{}
	if a.Gone(ctx, chatbot) {
		t.Fatal("gone before the informer synced")
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := a.Watch(wctx, kube); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		u    user.Info
		gone bool
	}{
		{chatbot, false},
		{&user.DefaultInfo{Name: chatbot.Name}, false},              // no UID: any object of the name
		{&user.DefaultInfo{Name: chatbot.Name, UID: "uid-0"}, true}, // an earlier ServiceAccount of that name
		{&user.DefaultInfo{Name: "system:serviceaccount:team-a:other"}, true},
		{&user.DefaultInfo{Name: "system:serviceaccount:team-b:chatbot"}, true},
		{&user.DefaultInfo{Name: "dave"}, false},
		{&user.DefaultInfo{Name: "system:serviceaccount:malformed"}, false},
	} {
		if got := a.Gone(ctx, tc.u); got != tc.gone {
			t.Errorf("Gone(%s, uid %q) = %t, want %t", tc.u.GetName(), tc.u.GetUID(), got, tc.gone)
		}
	}

	<-kube.Watching("serviceaccounts")
	if err := kube.Resource(resource).Namespace("team-a").Delete(ctx, "chatbot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The informer delivers on its own goroutine.
	NewWithT(t).Eventually(func() bool {
		_, cached, _ := a.store.GetByKey("team-a/chatbot")
		return cached
	}).WithTimeout(10*time.Second).WithPolling(time.Millisecond).Should(BeFalse(), "the deletion did not reach the cache")
	if !a.Gone(ctx, chatbot) {
		t.Error("a deleted ServiceAccount is not gone")
	}
}

// TestAnAbsenceIsConfirmed: a cache behind its watch (a ServiceAccount
// created since) ends nothing that exists.
func TestAnAbsenceIsConfirmed(t *testing.T) {
	sa := metadatafake.Object("v1", "ServiceAccount", "team-a", "new")
	sa.UID = "uid-new"
	a := &Accounts{store: toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), client: metadatafake.New(t, sa)}
	if a.Gone(context.Background(), &user.DefaultInfo{Name: "system:serviceaccount:team-a:new", UID: "uid-new"}) {
		t.Error("a ServiceAccount missing from the cache but live is gone")
	}
	if !a.Gone(context.Background(), &user.DefaultInfo{Name: "system:serviceaccount:team-a:new", UID: "uid-old"}) {
		t.Error("a ServiceAccount re-created under its name is not gone")
	}
}
