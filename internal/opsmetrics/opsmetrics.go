// Package opsmetrics holds the operator's metric families that no one
// package owns: HTTP requests, harness tasks and workers, appends, leases,
// takeovers and index lag (docs/operations.md, "Metrics"). A node makes one
// Set on its registry (node.Node.OpsMetrics); the API and the node's parts
// count into it. Every method of a nil *Set does nothing, so a part built
// without metrics needs no check.
//
// Labels never hold an identity. The tenant label appears only when the
// config asks for it (metrics.tenant_labels), on the families that count a
// tenant's own work.
package opsmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RouteUnmatched is the route label of a request no route matched (an
// unknown path, or one refused before routing).
const RouteUnmatched = "unmatched"

// Harness task events, the values of callsheet_harness_tasks_total's event
// label.
const (
	TaskHanded    = "handed"    // a poll handed the task to a worker
	TaskCompleted = "completed" // the worker posted its result
	TaskFailed    = "failed"    // the worker posted a failure
	TaskTimedOut  = "timed_out" // the call's timeout passed first
	TaskLost      = "lost"      // the worker stopped heartbeating
)

// Set is the operator's metric families. Safe for concurrent use.
type Set struct {
	tenantLabels bool

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	tasks        *prometheus.CounterVec
	polls        *prometheus.GaugeVec
	appends      prometheus.Histogram
	renewals     prometheus.Counter
	losses       prometheus.Counter
	takeovers    prometheus.Counter
	indexLag     prometheus.Gauge
}

// New registers the families with reg. With tenantLabels the HTTP request
// counter, the harness task counter and the poll gauge carry a "tenant"
// label. It fails when reg already holds a family of the same name.
func New(reg prometheus.Registerer, tenantLabels bool) (*Set, error) {
	var tenant []string
	if tenantLabels {
		tenant = []string{"tenant"}
	}
	s := &Set{
		tenantLabels: tenantLabels,
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "callsheet_http_requests_total", Help: "HTTP API requests answered, by route pattern, method and status class (2xx, 4xx, ...).",
		}, append([]string{"route", "method", "code"}, tenant...)),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "callsheet_http_request_duration_seconds", Help: "Time to answer an HTTP API request, by route pattern and method (a held poll or a turn waiting on its calls counts whole).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"route", "method"}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "callsheet_harness_tasks_total", Help: "Harness tool tasks by event: handed to a worker, completed, failed, timed_out, lost.",
		}, append([]string{"event"}, tenant...)),
		polls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "callsheet_harness_polls_waiting", Help: "Workers' polls (POST /v1/workers/poll, and a complete or fail with next) held on this node, waiting for a task.",
		}, tenant),
		appends: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "callsheet_append_seconds", Help: "Time of one append to the event log, until JetStream acknowledged it.",
			Buckets: prometheus.ExponentialBuckets(0.00002, 4, 10),
		}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "callsheet_lease_renewals_total", Help: "Renewals of this node's lease.",
		}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "callsheet_lease_losses_total", Help: "Times this node lost its lease (it could not renew it in time, or another process took it).",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "callsheet_takeovers_total", Help: "Sessions this node took over from another node.",
		}),
		indexLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "callsheet_index_lag_events", Help: "Events written to the log but not yet in the session search index.",
		}),
	}
	for _, c := range []prometheus.Collector{s.httpRequests, s.httpDuration, s.tasks, s.polls, s.appends, s.renewals, s.losses, s.takeovers, s.indexLag} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// TenantLabels reports whether the families carry a tenant label.
func (s *Set) TenantLabels() bool { return s != nil && s.tenantLabels }

// StatusClass is the code label of an HTTP status: "2xx", "4xx", ...
func StatusClass(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return string(rune('0'+status/100)) + "xx"
}

// HTTPRequest counts one answered request. route is the pattern's path
// ("/v1/sessions/{s}/turns") or RouteUnmatched; tenant is ignored without
// tenant labels.
func (s *Set) HTTPRequest(route, method string, status int, tenant string, d time.Duration) {
	if s == nil {
		return
	}
	labels := []string{route, method, StatusClass(status)}
	if s.tenantLabels {
		labels = append(labels, tenant)
	}
	s.httpRequests.WithLabelValues(labels...).Inc()
	s.httpDuration.WithLabelValues(route, method).Observe(d.Seconds())
}

// Task counts a harness task event (TaskHanded, ...) of tenant.
func (s *Set) Task(event, tenant string, n int) {
	if s == nil || n <= 0 {
		return
	}
	s.tasks.WithLabelValues(s.tenant(event, tenant)...).Add(float64(n))
}

// PollWaiting adds delta (+1 when a poll starts waiting, -1 when it ends)
// to tenant's held polls.
func (s *Set) PollWaiting(tenant string, delta int) {
	if s == nil {
		return
	}
	var labels []string
	if s.tenantLabels {
		labels = []string{tenant}
	}
	s.polls.WithLabelValues(labels...).Add(float64(delta))
}

func (s *Set) tenant(v, tenant string) []string {
	if s.tenantLabels {
		return []string{v, tenant}
	}
	return []string{v}
}

// Appended observes one append's time.
func (s *Set) Appended(d time.Duration) {
	if s != nil {
		s.appends.Observe(d.Seconds())
	}
}

// LeaseRenewed counts a renewal of the node's lease.
func (s *Set) LeaseRenewed() {
	if s != nil {
		s.renewals.Inc()
	}
}

// LeaseLost counts a loss of the node's lease.
func (s *Set) LeaseLost() {
	if s != nil {
		s.losses.Inc()
	}
}

// TookOver counts n sessions taken over from another node.
func (s *Set) TookOver(n int) {
	if s != nil && n > 0 {
		s.takeovers.Add(float64(n))
	}
}

// IndexLag sets how many logged events the search index has yet to take.
func (s *Set) IndexLag(events int) {
	if s != nil {
		s.indexLag.Set(float64(events))
	}
}
