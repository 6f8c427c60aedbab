package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/callsheet/callsheet/internal/opsmetrics"
)

// registerOps registers the operator's families (internal/opsmetrics) and
// the gauges read from the node's state when scraped: MCP servers up and
// restarted, and whether this node holds its lease.
//
// Where each family is counted: appends by the actors' log (timedLog),
// lease renewals and losses by the lease's hooks (openFleet), takeovers by
// fleet.tookOver, the index lag by the indexer (search.go), harness tasks
// timed out and lost by the hub (taskSettled), the rest by the API.
func (n *Node) registerOps(reg prometheus.Registerer) error {
	ops, err := opsmetrics.New(reg, n.cfg.Metrics.TenantLabels)
	if err != nil {
		return err
	}
	if err := reg.Register(stateCollector{n}); err != nil {
		return err
	}
	n.ops = ops
	return nil
}

// OpsMetrics returns the operator's metric families the node registered,
// for the HTTP API to count into; nil before New has made them.
func (n *Node) OpsMetrics() *opsmetrics.Set { return n.ops }

var (
	mcpUpDesc = prometheus.NewDesc("callsheet_mcp_server_up",
		"1 while this node holds a session with the configured MCP server, else 0.", []string{"server"}, nil)
	mcpRestartsDesc = prometheus.NewDesc("callsheet_mcp_server_restarts_total",
		"Sessions with the MCP server established after the first: restarts of a stdio program, reconnections over HTTP.", []string{"server"}, nil)
	leaseHeldDesc = prometheus.NewDesc("callsheet_lease_held",
		"1 while this node holds its lease and may act on its sessions, else 0.", nil, nil)
)

// stateCollector reads the node's state when scraped, through its public
// methods.
type stateCollector struct{ n *Node }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- mcpUpDesc
	ch <- mcpRestartsDesc
	ch <- leaseHeldDesc
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.n.MCPStatus() {
		up := 0.0
		if st.Connected {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(mcpUpDesc, prometheus.GaugeValue, up, st.Server)
		ch <- prometheus.MustNewConstMetric(mcpRestartsDesc, prometheus.CounterValue, float64(max(st.Sessions-1, 0)), st.Server)
	}
	held := 0.0
	if c.n.NodeAlive(c.n.Name()) {
		held = 1
	}
	ch <- prometheus.MustNewConstMetric(leaseHeldDesc, prometheus.GaugeValue, held)
}
