package imagepolicy

import (
	"context"
	"fmt"
	"sort"
	"sync"

	configv1 "github.com/openshift/api/config/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// Cache keeps compiled policies by namespaced name, UID and resourceVersion, so that the
// webhook and the sandbox controller compile a policy once per change
// rather than once per decision (compiling 10,000 entries takes tens of
// milliseconds; deciding takes well under a microsecond).
type Cache struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]cached
}

type cached struct {
	uid             types.UID
	resourceVersion string
	policy          *Policy
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{entries: map[types.NamespacedName]cached{}} }

// Get returns the compiled form of p, compiling it if p changed.
func (c *Cache) Get(p *openshellv1alpha1.OpenShellImagePolicy) *Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	if e, ok := c.entries[key]; ok && e.uid == p.UID && e.resourceVersion == p.ResourceVersion {
		return e.policy
	}
	compiled := Compile(p.Name, p.Spec)
	c.entries[key] = cached{p.UID, p.ResourceVersion, compiled}
	return compiled
}

// Forget drops a deleted policy.
func (c *Cache) Forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

// Len is the number of cached policies.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// PoliciesIn lists and compiles the image policies of one namespace, in
// name order. Policies being deleted no longer count.
func (c *Cache) PoliciesIn(ctx context.Context, r client.Reader, namespace string) ([]*Policy, error) {
	list := &openshellv1alpha1.OpenShellImagePolicyList{}
	// Without a deep copy: every admission and every sandbox reconcile lists
	// the namespace's policies, and copying a 10,000-entry allowlist each
	// time is garbage the webhook pays for in tail latency. Nothing here
	// writes to the listed objects; Compile only reads them, and only on a
	// new resourceVersion.
	if err := r.List(ctx, list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list image policies in %s: %w", namespace, err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	out := make([]*Policy, 0, len(list.Items))
	for i := range list.Items {
		if !list.Items[i].DeletionTimestamp.IsZero() {
			continue
		}
		out = append(out, c.Get(&list.Items[i]))
	}
	return out, nil
}

// Enforcement is the gateway's choice for its sandboxes; a missing gateway
// gets the API defaults (Enforce, allow namespaces without a policy).
func Enforcement(gw *openshellv1alpha1.OpenShellGateway) openshellv1alpha1.ImagePolicyEnforcement {
	e := openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyEnforce, WhenNoPolicy: openshellv1alpha1.NoPolicyAllow}
	if gw == nil {
		return e
	}
	if gw.Spec.ImagePolicy.Mode != "" {
		e.Mode = gw.Spec.ImagePolicy.Mode
	}
	if gw.Spec.ImagePolicy.WhenNoPolicy != "" {
		e.WhenNoPolicy = gw.Spec.ImagePolicy.WhenNoPolicy
	}
	e.PlatformAllowlist = gw.Spec.ImagePolicy.PlatformAllowlist
	e.HonorClusterMirrors = gw.Spec.ImagePolicy.HonorClusterMirrors
	return e
}

// Check decides a sandbox's image with its namespace's policies and the
// gateway's enforcement. With enforcement Disabled every image is allowed.
func (c *Cache) Check(ctx context.Context, r client.Reader, sb *openshellv1alpha1.OpenShellSandbox, gw *openshellv1alpha1.OpenShellGateway) (Decision, openshellv1alpha1.ImagePolicyEnforcement, error) {
	enf := Enforcement(gw)
	if enf.Mode == openshellv1alpha1.ImagePolicyDisabled {
		return Decision{Allowed: true, Reason: ReasonPolicyDisabled,
			Message: "the gateway disables image policy checks"}, enf, nil
	}
	policies, err := c.PoliciesIn(ctx, r, sb.Namespace)
	if err != nil {
		return Decision{}, enf, err
	}
	// The cluster's mirror sets add to a namespace's allowlist; a namespace
	// without one on a gateway that allows that stays unrestricted.
	if enf.HonorClusterMirrors && (len(policies) > 0 || enf.WhenNoPolicy == openshellv1alpha1.NoPolicyDeny) {
		cluster, err := c.clusterMirrors(ctx, r)
		if err != nil {
			return Decision{}, enf, err
		}
		if cluster != nil {
			policies = append(policies, cluster)
		}
	}
	d := Evaluate(sb.Spec.Image, policies, Options{Namespace: sb.Namespace, WhenNoPolicy: enf.WhenNoPolicy})
	if d.Allowed && d.Reason != ReasonDefaultImage && gw != nil && len(enf.PlatformAllowlist) > 0 {
		d = c.withinPlatform(d, sb.Namespace, gw, enf)
	}
	return d, enf, nil
}

// withinPlatform holds an allowed image to the gateway's platform
// allowlist, the ceiling of every tenant allowlist on it.
func (c *Cache) withinPlatform(d Decision, ns string, gw *openshellv1alpha1.OpenShellGateway, enf openshellv1alpha1.ImagePolicyEnforcement) Decision {
	ref, err := ParseReference(d.Reference)
	if err != nil {
		return d // it parsed once already
	}
	ceiling := c.platform(gw, enf.PlatformAllowlist)
	if ceiling.match(ref) != nil {
		return d
	}
	return Decision{Reference: d.Reference, Reason: ReasonImageNotAllowedByPlatform,
		Message: fmt.Sprintf("image %s is allowed in namespace %s but outside gateway %s/%s's platform allowlist (spec.imagePolicy.platformAllowlist), which every tenant allowlist stays within; %s",
			ref.Normalized, ns, gw.Namespace, gw.Name, closestHint(ref, []*Policy{ceiling}))}
}

// ClusterMirrorsPolicy names the allowlist the cluster's
// ImageDigestMirrorSets make, in decisions and messages.
const ClusterMirrorsPolicy = "cluster ImageDigestMirrorSets"

// +kubebuilder:rbac:groups=config.openshift.io,resources=imagedigestmirrorsets,verbs=list;watch

// clusterMirrors compiles the cluster's ImageDigestMirrorSets into one
// digest-only allowlist (nil when there are none or the API is not served),
// recompiled when any of them changes.
func (c *Cache) clusterMirrors(ctx context.Context, r client.Reader) (*Policy, error) {
	list := &configv1.ImageDigestMirrorSetList{}
	if err := r.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list ImageDigestMirrorSets: %w", err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	version := ""
	var spec openshellv1alpha1.OpenShellImagePolicySpec
	for _, idms := range list.Items {
		version += string(idms.UID) + "/" + idms.ResourceVersion + ";"
		for _, m := range idms.Spec.ImageDigestMirrors {
			mirrors := make([]string, 0, len(m.Mirrors))
			for _, mm := range m.Mirrors {
				mirrors = append(mirrors, string(mm))
			}
			spec.Mirrors = append(spec.Mirrors, openshellv1alpha1.ImageMirror{Source: m.Source, Mirrors: mirrors})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := types.NamespacedName{Name: "cluster:imagedigestmirrorsets"}
	if e, ok := c.entries[key]; ok && e.resourceVersion == version {
		return e.policy, nil
	}
	spec.RequireDigest = ptr.To(true) // a mirror set redirects pulls by digest only
	p := Compile(ClusterMirrorsPolicy, spec)
	c.entries[key] = cached{"", version, p}
	return p, nil
}

// platform compiles a gateway's platform allowlist, once per generation.
func (c *Cache) platform(gw *openshellv1alpha1.OpenShellGateway, list []string) *Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := types.NamespacedName{Namespace: "gateway:" + gw.Namespace, Name: gw.Name}
	version := fmt.Sprintf("%s/%d", gw.UID, gw.Generation)
	if e, ok := c.entries[key]; ok && e.resourceVersion == version {
		return e.policy
	}
	p := Compile("platform allowlist", openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: list, RequireDigest: ptr.To(false)})
	c.entries[key] = cached{gw.UID, version, p}
	return p
}
