package node

import (
	"context"
	"fmt"
	"strings"

	"github.com/anthdm/hollywood/actor"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/callsheet/callsheet/cluster"
)

// dial opens a connection to the node's NATS named name: to --nats with the
// node's credentials, or in-process to its embedded server.
func (n *Node) dial(name string) (*nats.Conn, error) {
	if n.server != nil {
		return n.server.Connect(name)
	}
	var opts []nats.Option
	if n.opts.NATSCredentials != "" {
		creds, err := cluster.LoadCredentials(n.opts.NATSCredentials)
		if err != nil {
			return nil, fmt.Errorf("node: nats credentials: %w", err)
		}
		opts = append(opts, creds.Option())
	}
	return cluster.Connect(n.opts.NATSURL, name, opts...)
}

// leaseConn opens the lease's own connection (cluster.LeaseOptions.Dial):
// its renewals never queue behind the node's reads and appends on the
// shared one.
func (n *Node) leaseConn() (*nats.Conn, error) {
	return n.dial("callsheet-lease-" + n.opts.Name)
}

// onLeaseLost stops every session actor: this node may not act, and by the
// time it holds a lease again another node may own its sessions. Each is
// rebuilt from the log on its next use; those stopped mid-work are brought
// back when the lease is held again (onLeaseRegained). It runs on the
// fleet goroutine.
func (n *Node) onLeaseLost() {
	if n.fleet.stopped == nil {
		n.fleet.stopped = map[cluster.SessionKey]bool{}
	}
	n.mu.Lock()
	pids := make([]*actor.PID, 0, len(n.sessions))
	for k, pid := range n.sessions {
		pids = append(pids, pid)
		if tenant, session, ok := strings.Cut(k, "/"); ok {
			n.fleet.stopped[cluster.SessionKey{Tenant: tenant, Session: session}] = true
		}
	}
	n.mu.Unlock()
	for _, pid := range pids {
		n.engine.Poison(pid)
	}
}

// onLeaseRegained brings back, once the node holds its lease again, the
// sessions whose actors onLeaseLost stopped while their logs end mid-work
// (a turn open, a call running): each is loaded from its log, owned again
// unless another node took it meanwhile, and goes on, as at start-up. The
// others are rebuilt when next used. It runs on the fleet goroutine.
func (n *Node) onLeaseRegained() {
	stopped := n.fleet.stopped
	n.fleet.stopped = nil
	var open []cluster.SessionKey
	for k := range stopped {
		ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
		last, ok, err := n.log.Last(ctx, k.Tenant, k.Session)
		cancel()
		if err != nil || (ok && !settled(last.Type)) {
			open = append(open, k)
		}
	}
	if len(open) > 0 {
		n.logf("holding its lease again: bringing back %d of the %d sessions whose actors stopped when it was lost", len(open), len(stopped))
		n.takeAll(open)
	}
}

// registerLeaseMetrics exports how close the node came to losing its
// lease (cluster.LeaseStats.LongestGap) on reg; the operator's families
// count its renewals and losses (OnRenewed, OnLost).
func registerLeaseMetrics(reg prometheus.Registerer, l *cluster.Lease) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "callsheet_lease_longest_gap_seconds",
		Help: "Longest time between two acknowledged writes of this node's lease since it started; it stops acting once that reaches the lease TTL less the margin."},
		func() float64 { return l.Stats().LongestGap.Seconds() }))
}
