package stack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/test/framework"
)

// startProcess runs the operator binary with the flags and environment a
// Deployment would give it, metrics served in plain HTTP on loopback so the
// benchmark can read them, and waits until it serves.
func (s *Stack) startProcess() error {
	port, err := framework.FreePort()
	if err != nil {
		return err
	}
	s.metricsURL = "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	o := s.mgrOpts
	args := []string{
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(port), "--metrics-secure=false",
		"--health-probe-bind-address=0", "--oidc-issuer-url=" + o.OIDC.IssuerURL, "--oidc-bind-address=" + o.OIDC.BindAddress,
		"--enable-webhooks=" + strconv.FormatBool(o.Controllers.EnableWebhooks), "--leader-elect=" + strconv.FormatBool(o.LeaderElection),
	}
	if o.Controllers.EnableWebhooks {
		args = append(args, "--webhook-port="+strconv.Itoa(o.WebhookPort), "--webhook-cert-dir="+o.WebhookCertDir)
	}
	if o.LeaderElection {
		args = append(args, "--leader-election-namespace="+o.LeaderElectionNamespace)
	}
	args = append(args, s.procOpts.Args...)
	if o.SyncPeriod != nil {
		args = append(args, "--sync-period="+o.SyncPeriod.String())
	}
	env := []string{
		"KUBECONFIG=" + s.procOpts.Kubeconfig,
		operatorenv.EnvOperatorNamespace + "=" + o.OIDC.Namespace,
		operatorenv.EnvWatchNamespace + "=" + strings.Join(o.WatchNamespaces, ","),
		operatorenv.EnvGatewayNamespaces + "=" + strings.Join(o.Controllers.Platform.GatewayNamespaces, ","),
	}
	env = append(env, o.Controllers.Images.Env()...)
	env = append(env, s.procOpts.Env...)
	p, err := framework.StartProcessEnv(s.procOpts.Dir, "operator", s.procOpts.Binary, env, args...)
	if err != nil {
		return err
	}
	s.proc = p
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = framework.WaitFor(ctx, 100*time.Millisecond, func(context.Context) (bool, error) {
		if done, err := p.Exited(); done {
			return false, errors.Join(fmt.Errorf("operator exited"), err)
		}
		_, err := s.metrics()
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("operator process did not serve metrics: %w\n%s", err, p.Tail(4000))
	}
	return nil
}

// metricsClient reads the operator's metrics; a wedged process fails the
// read instead of hanging the benchmark.
var metricsClient = &http.Client{Timeout: 10 * time.Second}

// Pid is the operator's process ID; 0 when it runs in this process.
func (s *Stack) Pid() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

// metrics gathers the operator's metrics: from its endpoint in process
// mode, else from this process's controller-runtime registry.
func (s *Stack) metrics() (map[string]*dto.MetricFamily, error) {
	if s.procOpts == nil {
		mfs, err := metrics.Registry.Gather()
		out := map[string]*dto.MetricFamily{}
		for _, mf := range mfs {
			out[mf.GetName()] = mf
		}
		return out, err
	}
	resp, err := metricsClient.Get(s.metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.metricsURL, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// RequestCounts are the operator's API requests by verb. In process they
// come from a counting transport (watches apart, as WATCH); from a process,
// from client-go's rest_client_requests_total, where a watch is a GET.
// Counts restart with the process.
func (s *Stack) RequestCounts() (map[string]int, error) {
	if s.procOpts == nil {
		return s.Requests.Snapshot(), nil
	}
	mfs, err := s.metrics()
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, m := range mfs["rest_client_requests_total"].GetMetric() {
		out[label(m, "method")] += int(m.GetCounter().GetValue())
	}
	return out, nil
}

// Reconcile is one controller's reconcile count and total time.
type Reconcile struct {
	Count int
	Total time.Duration
}

// Reconciles are the reconciles run per controller (restart with the
// process in process mode).
func (s *Stack) Reconciles() (map[string]Reconcile, error) {
	mfs, err := s.metrics()
	if err != nil {
		return nil, err
	}
	out := map[string]Reconcile{}
	for _, m := range mfs["controller_runtime_reconcile_time_seconds"].GetMetric() {
		h := m.GetHistogram()
		out[label(m, "controller")] = Reconcile{Count: int(h.GetSampleCount()),
			Total: time.Duration(h.GetSampleSum() * float64(time.Second))}
	}
	return out, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// QueueDepth is the number of requests waiting in a controller's work
// queue (controller-runtime's workqueue_depth).
func (s *Stack) QueueDepth(controller string) (int, error) {
	mfs, err := s.metrics()
	if err != nil {
		return 0, err
	}
	for _, m := range mfs["workqueue_depth"].GetMetric() {
		if label(m, "name") == controller {
			return int(m.GetGauge().GetValue()), nil
		}
	}
	return 0, nil
}

// RestartProcessWith restarts the operator process with further flags
// instead of those it was started with (process mode only).
func (s *Stack) RestartProcessWith(args []string) error {
	if s.procOpts == nil {
		return errors.New("the operator runs in this process: its flags cannot change")
	}
	s.procOpts.Args = args
	return s.RestartManagerWith(nil)
}
