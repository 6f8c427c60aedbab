package api

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/callsheet/callsheet/node"
)

// readiness is the answer of GET /readyz.
type readiness struct {
	Status string `json:"status"`
	// Reason says why the node does not serve, in plain words.
	Reason string `json:"reason,omitempty"`
}

// Operator is the operator's handler (cmd/callsheet-node --metrics-listen):
//
//   - GET /metrics: the node's registry (every tenant's counts), OpenMetrics
//     when the scraper asks for it, else the text format;
//   - GET /healthz: 200 while the process answers, from before the node has
//     started (a fleet's node may wait minutes for its peers);
//   - GET /readyz: 200 {"status":"ready"} while the node serves (node.Ready:
//     JetStream answers, and in a fleet the node holds its lease), else 503
//     {"status":"not_ready","reason":"..."}, starting included.
//
// It asks for no token: serve it on an address only operators and their
// scrapers reach. Safe for concurrent use.
type Operator struct {
	node    atomic.Pointer[node.Node]
	metrics atomic.Pointer[http.Handler]
	mux     *http.ServeMux
}

// NewOperator returns an Operator that reports a node starting until Serve
// gives it the node.
func NewOperator() *Operator {
	o := &Operator{mux: http.NewServeMux()}
	o.mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		h := o.metrics.Load()
		if h == nil {
			msg := "this node's metrics go to a registerer it was given, not one it can serve"
			if o.node.Load() == nil {
				msg = "the node is starting: its metrics follow once it serves"
			}
			writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, msg))
			return
		}
		(*h).ServeHTTP(w, r)
	})
	o.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	o.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		n := o.node.Load()
		if n == nil {
			writeJSON(w, http.StatusServiceUnavailable, readiness{Status: "not_ready", Reason: "the node is starting (opening its store; in a fleet, waiting for a majority of its servers)"})
			return
		}
		if err := n.Ready(r.Context()); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, readiness{Status: "not_ready", Reason: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, readiness{Status: "ready"})
	})
	return o
}

// Serve makes o report on n.
func (o *Operator) Serve(n *node.Node) {
	if g := n.Gatherer(); g != nil {
		var h http.Handler = promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true})
		o.metrics.Store(&h)
	}
	o.node.Store(n)
}

// ServeHTTP serves the three routes; anything else is 404.
func (o *Operator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := o.mux.Handler(r); pattern == "" {
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, "the operator's listener serves GET /metrics, /healthz and /readyz"))
		return
	}
	o.mux.ServeHTTP(w, r)
}
