package relay

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The relay's metric names. Sessions are what a replica carries, and what
// to scale the relay on (docs/consumer-access.md); labels stay
// low-cardinality: subresources and refusal reasons, never users,
// namespaces or sandboxes.
const (
	MetricSessions        = "openshell_relay_sessions"
	MetricSessionsStarted = "openshell_relay_sessions_started_total"
	MetricSessionRefusals = "openshell_relay_session_refusals_total"
	MetricSessionBytes    = "openshell_relay_session_bytes_total"
	// MetricReauthorizations counts the SubjectAccessReviews that open
	// sessions and memberships cost the kube-apiserver, by check;
	// MetricRBACFollowed is 1 once RBAC changes are followed (until then
	// every check asks).
	MetricReauthorizations = "openshell_relay_reauthorizations_total"
	MetricRBACFollowed     = "openshell_relay_rbac_followed"
	// MetricRBACChanges counts the RBAC changes that made answers stale,
	// by scope (namespace, cluster): ClusterRoles that churn make every
	// answer stale each time.
	MetricRBACChanges = "openshell_relay_rbac_changes_total"
	// MetricServiceAccountsFollowed is 1 once deleted ServiceAccounts are
	// seen (their sessions end, their memberships go).
	MetricServiceAccountsFollowed = "openshell_relay_serviceaccounts_followed"
	// MetricGroupsFollowed is 1 once OpenShift Groups are followed (a user
	// removed from one loses the sessions and memberships it gave them).
	MetricGroupsFollowed = "openshell_relay_groups_followed"
)

// Checks of MetricReauthorizations.
const (
	CheckSession    = "session"
	CheckMembership = "membership"
)

// Refusal reasons of MetricSessionRefusals.
const (
	RefusedUserLimit      = "user_limit"
	RefusedNamespaceLimit = "namespace_limit"
	RefusedRequesterLimit = "requester_limit"
	RefusedReplicaLimit   = "replica_limit"
	RefusedDraining       = "draining"
)

// Metrics counts a relay's sessions. A nil *Metrics counts nothing.
type Metrics struct {
	open     *prometheus.GaugeVec
	started  *prometheus.CounterVec
	refusals *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	reauth   *prometheus.CounterVec
	followed prometheus.Gauge
	changes  *prometheus.CounterVec
	accounts prometheus.Gauge
	groups   prometheus.Gauge
}

// NewMetrics registers the relay's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricSessions,
			Help: "Sessions (exec, log, portforward) open on this relay replica, by subresource."}, []string{"subresource"}),
		started: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSessionsStarted,
			Help: "Sessions this relay replica started, by subresource."}, []string{"subresource"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSessionRefusals,
			Help: "Sessions this relay replica refused for a limit or its shutdown, by reason."}, []string{"reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSessionBytes,
			Help: "Bytes ended sessions moved through this relay replica: in from users, out to them."}, []string{"direction"}),
		reauth: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReauthorizations,
			Help: "SubjectAccessReviews this relay replica asked again for open sessions and workspace memberships, by check."}, []string{"check"}),
		followed: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricRBACFollowed,
			Help: "1 once this relay replica follows RBAC changes, so that sessions and memberships are authorized again only after one; 0 while every check asks."}),
		groups: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricGroupsFollowed,
			Help: "1 once this relay replica follows OpenShift Groups, so that a user removed from one loses the sessions and memberships it gave them; 0 where they are not served or not yet followed."}),
		accounts: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricServiceAccountsFollowed,
			Help: "1 once this relay replica follows ServiceAccounts, so that a deleted one's sessions end and its memberships go; 0 while they last as long as RBAC names it."}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRBACChanges,
			Help: "RBAC changes (updates, deletions, failed watches) after which this relay replica authorizes answers of their scope again, by scope (namespace, cluster)."}, []string{"scope"}),
	}
	// A process that builds a second relay (a test's second replica)
	// shares the first one's collectors.
	var err error
	if m.open, err = register(reg, m.open); err != nil {
		return nil, err
	}
	if m.started, err = register(reg, m.started); err != nil {
		return nil, err
	}
	if m.refusals, err = register(reg, m.refusals); err != nil {
		return nil, err
	}
	if m.bytes, err = register(reg, m.bytes); err != nil {
		return nil, err
	}
	if m.reauth, err = register(reg, m.reauth); err != nil {
		return nil, err
	}
	if m.followed, err = register(reg, m.followed); err != nil {
		return nil, err
	}
	if m.changes, err = register(reg, m.changes); err != nil {
		return nil, err
	}
	if m.groups, err = register(reg, m.groups); err != nil {
		return nil, err
	}
	if m.accounts, err = register(reg, m.accounts); err != nil {
		return nil, err
	}
	m.changes.WithLabelValues("namespace")
	m.changes.WithLabelValues("cluster")
	m.reauth.WithLabelValues(CheckSession)
	m.reauth.WithLabelValues(CheckMembership)
	for _, sub := range []string{SubresourceExec, SubresourceLog, SubresourcePortForward} {
		m.open.WithLabelValues(sub)
		m.started.WithLabelValues(sub)
	}
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m *Metrics) opened(sub string) {
	if m != nil {
		m.open.WithLabelValues(sub).Inc()
		m.started.WithLabelValues(sub).Inc()
	}
}

func (m *Metrics) closed(sub string, in, out int64) {
	if m != nil {
		m.open.WithLabelValues(sub).Dec()
		m.bytes.WithLabelValues("in").Add(float64(in))
		m.bytes.WithLabelValues("out").Add(float64(out))
	}
}

func (m *Metrics) refused(reason string) {
	if m != nil {
		m.refusals.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) reauthorized(check string) {
	if m != nil {
		m.reauth.WithLabelValues(check).Inc()
	}
}

// RBACFollowed reports that RBAC changes are followed from now on.
func (m *Metrics) RBACFollowed() {
	if m != nil {
		m.followed.Set(1)
	}
}

// RBACChanged counts an RBAC change (rbacchange.Changes.OnChange).
func (m *Metrics) RBACChanged(clusterWide bool) {
	if m == nil {
		return
	}
	scope := "namespace"
	if clusterWide {
		scope = "cluster"
	}
	m.changes.WithLabelValues(scope).Inc()
}

// ServiceAccountsFollowed reports that deleted ServiceAccounts are seen
// from now on.
func (m *Metrics) ServiceAccountsFollowed() {
	if m != nil {
		m.accounts.Set(1)
	}
}

// GroupsFollowed reports that OpenShift Groups are followed from now on.
func (m *Metrics) GroupsFollowed() {
	if m != nil {
		m.groups.Set(1)
	}
}
