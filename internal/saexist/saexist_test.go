package saexist

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"
)

func TestGone(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	sa := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "chatbot", ResourceVersion: "1"}}
	kube := metadatafake.NewSimpleMetadataClient(scheme, sa)
	const chatbot = "system:serviceaccount:team-a:chatbot"

	var a *Accounts
	if a.Gone(chatbot) {
		t.Fatal("a nil Accounts says gone")
	}
	a = &Accounts{}
	if a.Gone(chatbot) {
		t.Fatal("gone before the informer synced")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.Watch(ctx, kube); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user string
		gone bool
	}{
		{chatbot, false},
		{"system:serviceaccount:team-a:other", true},
		{"system:serviceaccount:team-b:chatbot", true},
		{"dave", false},
		{"system:serviceaccount:malformed", false},
	} {
		if got := a.Gone(tc.user); got != tc.gone {
			t.Errorf("Gone(%q) = %t, want %t", tc.user, got, tc.gone)
		}
	}
	if err := kube.Resource(corev1.SchemeGroupVersion.WithResource("serviceaccounts")).Namespace("team-a").Delete(ctx, "chatbot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !a.Gone(chatbot) {
		if time.Now().After(deadline) {
			t.Fatal("the deleted ServiceAccount is not gone within 10s")
		}
		time.Sleep(time.Millisecond) // the informer delivers on its own goroutine
	}
}
