package tlsprofile

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	configv1 "github.com/openshift/api/config/v1"
	configv1client "github.com/openshift/client-go/config/clientset/versioned/typed/config/v1"
	configv1listers "github.com/openshift/client-go/config/listers/config/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
)

// ClusterAPIServer is the cluster-scoped APIServer config object holding
// the profile.
const ClusterAPIServer = "cluster"

// Watcher owns the TLS settings the operator's servers use. It starts on
// Intermediate (OpenShift's default, and a sound one elsewhere) and, where
// the APIServer config API is served, follows the cluster's profile.
type Watcher struct {
	current atomic.Pointer[Settings]
	// Log receives profile changes and refused profiles.
	Log logr.Logger
}

// NewWatcher starts on the default profile.
func NewWatcher() *Watcher {
	w := &Watcher{Log: logr.Discard()}
	d := Default()
	w.current.Store(&d)
	return w
}

// Current returns the settings in force.
func (w *Watcher) Current() Settings { return *w.current.Load() }

// ServerOption is a TLS option for a server (controller-runtime's TLSOpts
// or an http.Server's TLSConfig): every handshake is served with the
// settings in force at that moment, so a profile change needs no restart.
// The rest of cfg (certificate lookup, ALPN) is kept, including fields the
// server sets after its options run: the per-handshake copy is taken then.
func (w *Watcher) ServerOption(cfg *tls.Config) {
	base := cfg
	w.Current().Apply(cfg)
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		w.Current().Apply(c)
		return c, nil
	}
}

// Observe takes the profile of the APIServer object (nil: deleted, back to
// the default). A profile that cannot be served is refused and the
// settings in force are kept: a typo must not take the webhooks down.
func (w *Watcher) Observe(obj *configv1.APIServer) {
	var profile *configv1.TLSSecurityProfile
	if obj != nil {
		profile = obj.Spec.TLSSecurityProfile
	}
	s, err := Resolve(profile)
	if err != nil {
		w.Log.Error(err, "Keeping the TLS settings in force", "profile", w.Current().Profile)
		return
	}
	if prev := w.current.Swap(&s); !equal(*prev, s) {
		w.Log.Info("TLS security profile applied", "profile", s.Profile, "minVersion", tls.VersionName(s.MinVersion), "ciphers", len(s.CipherSuites))
	}
}

func equal(a, b Settings) bool {
	return a.Profile == b.Profile && a.MinVersion == b.MinVersion && slices.Equal(a.CipherSuites, b.CipherSuites) &&
		slices.Equal(a.Curves, b.Curves)
}

// Follow watches apiserver.config.openshift.io/cluster through
// openshift/client-go's typed config client and lister until ctx ends. It
// returns once the informer has synced, so the first handshake after it
// already uses the cluster's profile. The informer is built here over the
// typed client, as the generated one would be: the generated informer
// factory also links the config v1alpha1 clients, which do not compile
// against the openshift/api version the rest of the operator needs.
func (w *Watcher) Follow(ctx context.Context, cs configv1client.APIServersGetter) (configv1listers.APIServerLister, error) {
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ClusterAPIServer).String()
	}
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			byName(&o)
			return cs.APIServers().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			byName(&o)
			return cs.APIServers().Watch(ctx, o)
		},
	}, &configv1.APIServer{}, 10*time.Hour, cache.Indexers{})
	observe := func(o any) {
		if a, ok := o.(*configv1.APIServer); ok && a.Name == ClusterAPIServer {
			w.Observe(a)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, o any) { observe(o) },
		DeleteFunc: func(any) { w.Observe(nil) },
	}); err != nil {
		return nil, fmt.Errorf("watch the APIServer config: %w", err)
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("APIServer config informer did not sync: %w", ctx.Err())
	}
	return configv1listers.NewAPIServerLister(inf.GetIndexer()), nil
}

// Run is a manager runnable on every replica (each serves webhooks): where
// the APIServer config API is served it follows the cluster's profile;
// elsewhere (vanilla Kubernetes) it keeps the default and looks again every
// recheck, in case the API appears.
func (w *Watcher) Run(ctx context.Context, disc discovery.DiscoveryInterface, cs configv1client.APIServersGetter, recheck time.Duration) error {
	for {
		served, err := apiServerServed(disc)
		if err != nil {
			w.Log.Error(err, "Discovering the APIServer config API; keeping the TLS settings in force")
		}
		if served {
			if _, err := w.Follow(ctx, cs); err != nil {
				return err
			}
			<-ctx.Done()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(recheck):
		}
	}
}

func apiServerServed(disc discovery.DiscoveryInterface) (bool, error) {
	list, err := disc.ServerResourcesForGroupVersion(configv1.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == "apiservers" {
			return true, nil
		}
	}
	return false, nil
}
