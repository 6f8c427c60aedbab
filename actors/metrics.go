package actors

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callsheet/callsheet/events"
)

// Decider kinds, the values of callsheet_approvals_total's decider label.
const (
	// DeciderPrincipal: an authenticated principal decided (through the
	// API, or a Go program's Node.Approve).
	DeciderPrincipal = "principal"
	// DeciderTimeout: nobody decided within the approval timeout.
	DeciderTimeout = "timeout"
)

// ApprovalTimeoutBy is the decider the log records for an approval denied by
// its timeout (config.ReservedPrincipal keeps every token from naming it).
const ApprovalTimeoutBy = "approval-timeout"

// deciderKind maps the decider recorded in an event to its kind. Metrics are
// served to every tenant's token (and scraped into systems that outlive
// the log's access rules), so no label carries who decided: only what kind
// of decider it was (docs/spec.md §10 "Provenance").
func deciderKind(by string) string {
	if by == ApprovalTimeoutBy {
		return DeciderTimeout
	}
	return DeciderPrincipal
}

// Metrics are the runtime's Prometheus metrics. A nil *Metrics records
// nothing. No label holds an identity (a principal, a token, a tenant, a
// session): labels are tools, outcomes, block categories, event types,
// concurrency classes, rule ids and decider kinds.
type Metrics struct {
	calls      *prometheus.CounterVec
	handler    *prometheus.HistogramVec
	queueWait  *prometheus.HistogramVec
	capWait    *prometheus.HistogramVec
	capQueued  *prometheus.GaugeVec
	events     *prometheus.CounterVec
	turns      prometheus.Counter
	inflight   *prometheus.GaugeVec
	sessions   prometheus.Gauge
	panics     prometheus.Counter
	callPanics prometheus.Counter
	approvals  *prometheus.CounterVec
	denials    *prometheus.CounterVec
	asks       *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "callsheet_calls_total", Help: "Committed call results by tool, outcome and block category.",
		}, []string{"tool", "outcome", "block"}),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "callsheet_call_handler_seconds", Help: "Time a tool's handler ran, per attempt.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12),
		}, []string{"tool"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "callsheet_call_queue_wait_seconds", Help: "Time from a call's request to its claim.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 12),
		}, []string{"class"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "callsheet_events_total", Help: "Events decided by this node, by type.",
		}, []string{"type"}),
		turns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "callsheet_turns_completed_total", Help: "Turns completed by this node.",
		}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "callsheet_calls_in_flight", Help: "Calls running on this node's tool actors, by concurrency class.",
		}, []string{"class"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "callsheet_sessions_live", Help: "Session actors alive on this node.",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "callsheet_session_panics_total", Help: "Session actors stopped by a panic in their handling (a bug): the caller got an internal error, the session restarts from its log.",
		}),
		callPanics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "callsheet_call_panics_total", Help: "Calls whose handling by a tool actor panicked outside the tool's run (a bug): the attempt settled as lost.",
		}),
	}
	m.approvals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "callsheet_approvals_total", Help: "Approval decisions by tool, decision and the kind of decider (principal or timeout; never who).",
	}, []string{"tool", "decision", "decider"})
	m.denials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "callsheet_denials_total", Help: "Calls blocked as denied, by tool and the rule that denied them.",
	}, []string{"tool", "rule"})
	m.asks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "callsheet_approval_requests_total", Help: "Approval requests by tool and the rule that asked.",
	}, []string{"tool", "rule"})
	m.capWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "callsheet_fleet_cap_wait_seconds", Help: "Time a call waited for a slot of its tool's fleet-wide cap.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"tool"})
	m.capQueued = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "callsheet_fleet_cap_waiting", Help: "Calls on this node waiting for a slot of their tool's fleet-wide cap.",
	}, []string{"tool"})
	reg.MustRegister(m.calls, m.handler, m.queueWait, m.events, m.turns, m.inflight, m.sessions, m.panics, m.callPanics, m.approvals, m.denials, m.asks, m.capWait, m.capQueued)
	return m
}

// decided counts an event this node decided (not ones replayed on load).
func (m *Metrics) decided(ev events.Event, payload any) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(string(ev.Type)).Inc()
	switch ev.Type {
	case events.TypeResultCommitted:
		if p, ok := payload.(*events.ResultCommitted); ok {
			r := p.Result
			m.calls.WithLabelValues(r.Name, string(r.Outcome), string(r.Block)).Inc()
		}
	case events.TypeTurnCompleted:
		m.turns.Inc()
	case events.TypeApprovalRequested, events.TypeApprovalGranted, events.TypeApprovalDenied, events.TypeDispatchBlocked:
		switch p := payload.(type) {
		case *events.ApprovalRequested:
			m.asks.WithLabelValues(p.Name, p.Rule).Inc()
		case *events.ApprovalGranted:
			m.approvals.WithLabelValues(p.Name, "allow", deciderKind(p.By)).Inc()
		case *events.ApprovalDenied:
			m.approvals.WithLabelValues(p.Name, "deny", deciderKind(p.By)).Inc()
		case *events.DispatchBlocked:
			if p.Category == events.BlockDenied {
				m.denials.WithLabelValues(p.Name, p.Rule).Inc()
			}
		}
	}
}

func (m *Metrics) handled(tool string, d time.Duration) {
	if m != nil {
		m.handler.WithLabelValues(tool).Observe(d.Seconds())
	}
}

func (m *Metrics) waited(class string, d time.Duration) {
	if m != nil {
		m.queueWait.WithLabelValues(class).Observe(d.Seconds())
	}
}

func (m *Metrics) capWaiting(tool string, delta float64) {
	if m != nil {
		m.capQueued.WithLabelValues(tool).Add(delta)
	}
}

func (m *Metrics) capWaited(tool string, d time.Duration) {
	if m != nil {
		m.capWait.WithLabelValues(tool).Observe(d.Seconds())
	}
}

func (m *Metrics) running(class string, delta float64) {
	if m != nil {
		m.inflight.WithLabelValues(class).Add(delta)
	}
}

// SessionLive moves the live-session gauge.
func (m *Metrics) SessionLive(delta float64) {
	if m != nil {
		m.sessions.Add(delta)
	}
}

// panicked counts a session actor stopped by a panic.
func (m *Metrics) panicked() {
	if m != nil {
		m.panics.Inc()
	}
}

// callPanicked counts a call whose handling by a tool actor panicked.
func (m *Metrics) callPanicked() {
	if m != nil {
		m.callPanics.Inc()
	}
}
