package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// APIUsage records which RBAC rules a client's requests exercised: a
// rest.Config transport wrapper that reads each request as the API
// server's authorizer does (verb, group, resource, subresource and name,
// including a list or watch narrowed to one name by a metadata.name field
// selector; a watch that streams the initial list counts as the list it
// replaces), and the roles each RoleBinding or ClusterRoleBinding it
// writes refers to (what `bind` authorizes). Requests refused with 403 do
// not count.
type APIUsage struct {
	// paused: requests still in flight after the client's owner stopped
	// (an event broadcaster flushing after its manager returned, say) are
	// not part of what is being measured.
	paused    atomic.Bool
	mu        sync.Mutex
	seen      map[string]bool
	bound     map[string]bool
	forbidden map[string]bool
}

var requestInfo = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// Wrap is a rest.Config WrapTransport.
func (u *APIUsage) Wrap(next http.RoundTripper) http.RoundTripper {
	return usageRoundTripper(func(r *http.Request) (*http.Response, error) {
		var body []byte
		if r.Body != nil && (r.Method == http.MethodPost || r.Method == http.MethodPatch || r.Method == http.MethodPut) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			_ = r.Body.Close()
			body = b
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		resp, err := next.RoundTrip(r)
		if err != nil || u.paused.Load() {
			return resp, err
		}
		info, ierr := requestInfo.NewRequestInfo(r)
		if ierr != nil || !info.IsResourceRequest {
			return resp, err
		}
		if resp.StatusCode == http.StatusForbidden {
			// A write into a terminating namespace is refused by admission
			// (NamespaceLifecycle), not by RBAC: not what is measured.
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b))
			if bytes.Contains(b, []byte("because it is being terminated")) {
				return resp, err
			}
			u.mu.Lock()
			if u.forbidden == nil {
				u.forbidden = map[string]bool{}
			}
			u.forbidden[ruleKey(info.APIGroup, info.Resource, info.Verb)+" in "+info.Namespace] = true
			u.mu.Unlock()
			return resp, err
		}
		u.record(info, body)
		if r.Method == http.MethodPatch && resp.StatusCode == http.StatusCreated {
			// A server-side apply that created the object: the API server
			// authorized create as well as patch.
			createInfo := *info
			createInfo.Verb = "create"
			u.record(&createInfo, nil)
		}
		if info.Verb == "watch" && r.URL.Query().Get("sendInitialEvents") == "true" {
			// A streaming list (client-go's WatchListClient): the informer's
			// list, which falls back to a plain LIST on servers without it.
			listInfo := *info
			listInfo.Verb = "list"
			u.record(&listInfo, nil)
		}
		return resp, err
	})
}

type usageRoundTripper func(*http.Request) (*http.Response, error)

func (f usageRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func ruleKey(group, resource, verb string) string {
	if group == "" {
		group = "core"
	}
	return group + "/" + resource + " " + verb
}

func (u *APIUsage) record(info *request.RequestInfo, body []byte) {
	res := info.Resource
	if info.Subresource != "" {
		res += "/" + info.Subresource
	}
	k := ruleKey(info.APIGroup, res, info.Verb)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen, u.bound = map[string]bool{}, map[string]bool{}
	}
	u.seen[k] = true
	if info.Name != "" {
		u.seen[k+" "+info.Name] = true
	}
	if info.APIGroup == rbacv1.GroupName && (info.Resource == "rolebindings" || info.Resource == "clusterrolebindings") && len(body) > 0 {
		var b struct {
			RoleRef rbacv1.RoleRef `json:"roleRef"`
		}
		if json.Unmarshal(body, &b) == nil && b.RoleRef.Name != "" {
			u.bound[strings.ToLower(b.RoleRef.Kind)+"s/"+b.RoleRef.Name] = true
		}
	}
}

// Unused lists every group/resource verb (and resource name) the rules
// grant that no recorded request used, except those in exempt (keyed
// "group/resource verb"; each value says which authorization check uses
// the rule instead).
func (u *APIUsage) Unused(rules []rbacv1.PolicyRule, exempt map[string]string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					k := ruleKey(g, res, v)
					if _, ok := exempt[k]; ok {
						continue
					}
					names := r.ResourceNames
					if len(names) == 0 {
						if !u.seen[k] {
							out = append(out, k)
						}
						continue
					}
					for _, n := range names {
						used := u.seen[k+" "+n]
						if v == "bind" {
							used = u.bound[res+"/"+n]
						}
						if !used {
							out = append(out, fmt.Sprintf("%s (resourceName %s)", k, n))
						}
					}
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Pause stops recording until Resume.
func (u *APIUsage) Pause() { u.paused.Store(true) }

// Resume records again.
func (u *APIUsage) Resume() { u.paused.Store(false) }

// Forbidden lists the "group/resource verb in namespace" of requests the
// API server refused with 403.
func (u *APIUsage) Forbidden() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return sortedKeys(u.forbidden)
}

// Seen lists the recorded "group/resource verb" keys.
func (u *APIUsage) Seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return sortedKeys(u.seen)
}

func sortedKeys(m map[string]bool) []string {
	return slices.Sorted(maps.Keys(m))
}
