// Package rbacchange tells when the cluster's RBAC last changed in a way
// that can take access away, per namespace and cluster-wide, so that an
// authorization the relay answered with a SubjectAccessReview is asked
// again when RBAC that could change the answer changed, and otherwise
// only every MaxAge, instead of on a short timer.
//
// On a short timer alone, the relay's rechecks were its largest cost to
// the kube-apiserver: a review costs it about 0.7 ms of CPU (make bench),
// and every replica asked one per workspace membership every 2 s and one
// per open session every 5 s, so 1,000 of each on two replicas cost it
// well over half a core, all the time, for answers that almost never
// change. RBAC only grants (it has no deny rule), so only an update or a
// deletion of a Role, RoleBinding, ClusterRole or ClusterRoleBinding can
// take access away: a namespaced one for its namespace, a cluster-scoped
// one for every namespace. Creations are not changes here.
//
// Answers from other authorizers (a webhook) change without any of those
// objects changing: MaxAge bounds how long such a revocation can go
// unnoticed. And the API server answers from its own informer, which may
// see a change after this package does (another API server of an HA
// control plane later still): an answer asked within Settle of the last
// change it could depend on is asked once more when Settle has passed.
//
// client-go's metadata informers serve here (there is no library that
// tracks RBAC changes for reauthorization); objects are kept with their
// name, namespace and resourceVersion only.
package rbacchange

import (
	"context"
	"fmt"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
)

// Defaults of Changes' bounds.
const (
	DefaultMaxAge = time.Minute
	DefaultSettle = 10 * time.Second
)

// Changes is the last time RBAC changed, cluster-wide and per namespace.
// The zero value knows of no change and is never synced, so every answer
// is stale: callers without a watch ask every time, as before.
type Changes struct {
	// MaxAge is how long an answer holds with no change (default
	// DefaultMaxAge); Settle how long after a change an answer must have
	// been asked to count (default DefaultSettle).
	MaxAge, Settle time.Duration
	// Now is the clock changes are seen by, the one callers ask Fresh
	// with (nil: time.Now).
	Now func() time.Time
	// OnChange hears of every change (for a metric: a cluster whose
	// ClusterRoles churn gets little from this package); nil: none.
	OnChange func(clusterWide bool)

	mu      sync.Mutex
	synced  bool
	cluster time.Time
	byNS    map[string]time.Time
	pruned  time.Time // when byNS was last pruned
}

// Fresh says whether an answer about namespace asked at checked still
// holds at now: it is younger than MaxAge, it was asked after the last
// change it could depend on, and, if it was asked within Settle of that
// change, Settle has not passed yet. So a change costs each answer it
// could take back two questions: at the next look (the API server has
// usually seen the change by then, and a revocation ends at once), and
// once Settle has passed (in case it had not).
func (c *Changes) Fresh(namespace string, checked, now time.Time) bool {
	if c == nil {
		return false
	}
	maxAge, settle := c.bounds()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced || now.Sub(checked) >= maxAge {
		return false
	}
	last := c.cluster
	if t := c.byNS[namespace]; t.After(last) {
		last = t
	}
	switch {
	case !checked.After(last):
		return false // asked before the change
	case checked.Sub(last) < settle:
		return now.Sub(last) < settle // asked again once Settle has passed
	}
	return true
}

func (c *Changes) bounds() (maxAge, settle time.Duration) {
	maxAge, settle = c.MaxAge, c.Settle
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	if settle <= 0 {
		settle = DefaultSettle
	}
	return maxAge, settle
}

// changed records a change in namespace ("" for a cluster-scoped object)
// seen at now. At most once per Settle it forgets the namespaces whose last
// change no answer can depend on any more (older than MaxAge+Settle: every
// answer asked before it has expired), so churn across many namespaces
// costs no scan per event.
func (c *Changes) changed(namespace string, now time.Time) {
	if c.OnChange != nil {
		c.OnChange(namespace == "")
	}
	maxAge, settle := c.bounds()
	c.mu.Lock()
	defer c.mu.Unlock()
	if namespace == "" {
		c.cluster = now
		return
	}
	if c.byNS == nil {
		c.byNS = map[string]time.Time{}
	}
	c.byNS[namespace] = now
	if now.Sub(c.pruned) < settle {
		return
	}
	c.pruned = now
	for ns, t := range c.byNS {
		if now.Sub(t) > maxAge+settle {
			delete(c.byNS, ns)
		}
	}
}

// setSynced starts trusting the informers at now, which counts as a
// change: one made just before their first list was never seen as one,
// and the API server may not have seen it yet either.
func (c *Changes) setSynced(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced = true
	c.cluster = now
}

func (c *Changes) clock() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// kinds are the RBAC resources whose changes can take access away.
var kinds = []schema.GroupVersionResource{
	rbacv1.SchemeGroupVersion.WithResource("roles"),
	rbacv1.SchemeGroupVersion.WithResource("rolebindings"),
	rbacv1.SchemeGroupVersion.WithResource("clusterroles"),
	rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"),
}

// Watch follows the four RBAC kinds (list and watch on each, cluster-wide)
// until ctx ends; it returns once their informers have synced, after
// which answers can be fresh.
//
// Memory: the informers keep each object slimmed to its name, namespace
// and resourceVersion. Their first list arrives object by object where the
// API server serves streaming lists (client-go asks for them by default);
// elsewhere it is one response, as large as the objects' metadata.
func (c *Changes) Watch(ctx context.Context, client metadata.Interface) error {
	factory := metadatainformer.NewSharedInformerFactory(client, 0)
	for _, gvr := range kinds {
		inf := factory.ForResource(gvr).Informer()
		if err := inf.SetTransform(slim); err != nil {
			return fmt.Errorf("watch %s: %w", gvr.Resource, err)
		}
		if err := inf.SetWatchErrorHandler(c.watchFailed); err != nil {
			return fmt.Errorf("watch %s: %w", gvr.Resource, err)
		}
		if _, err := inf.AddEventHandler(c.handler()); err != nil {
			return fmt.Errorf("watch %s: %w", gvr.Resource, err)
		}
	}
	factory.Start(ctx.Done())
	for gvr, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the %s informer did not sync", gvr.Resource)
		}
	}
	c.setSynced(c.clock())
	go func() { <-ctx.Done(); factory.Shutdown() }()
	return nil
}

// watchFailed counts a failed list or watch as a cluster-wide change: what
// changed while it was down may never be delivered (a watch resumed from
// its last resourceVersion delivers it; a relist after an expired one
// only diffs what it kept). Answers are asked again at the next look and
// after Settle, and while it stays down every retry that fails counts
// again; a revocation made during a long outage then waits for MaxAge.
func (c *Changes) watchFailed(r *toolscache.Reflector, err error) {
	toolscache.DefaultWatchErrorHandler(context.Background(), r, err)
	c.changed("", c.clock())
}

// handler records updates and deletions; a creation only grants.
func (c *Changes) handler() toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(metav1.Object)
			n, ok2 := cur.(metav1.Object)
			if ok1 && ok2 && o.GetResourceVersion() == n.GetResourceVersion() {
				return // a relist that found it unchanged
			}
			c.changed(namespaceOf(cur), c.clock())
		},
		DeleteFunc: func(obj any) { c.changed(namespaceOf(obj), c.clock()) },
	}
}

// slim keeps what the store keys by (namespace and name) and the handlers
// read (namespace and resourceVersion): RBAC objects' annotations can hold
// their whole last-applied spec.
func slim(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, ResourceVersion: m.ResourceVersion}}, nil
	}
	return obj, nil
}

// namespaceOf is a changed object's namespace ("" for a cluster-scoped
// one, or one whose deletion the informer only inferred).
func namespaceOf(obj any) string {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		if o, ok := d.Obj.(metav1.Object); ok {
			return o.GetNamespace()
		}
		ns, _, err := toolscache.SplitMetaNamespaceKey(d.Key)
		if err != nil {
			return "" // unknown: counts as cluster-wide
		}
		return ns
	}
	if o, ok := obj.(metav1.Object); ok {
		return o.GetNamespace()
	}
	return ""
}
