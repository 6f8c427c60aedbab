package node

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/callsheet/callsheet/cluster"
)

// credentialsOption is the nats.Option presenting the credentials file at
// path, or none for an empty path.
func credentialsOption(path string) ([]nats.Option, error) {
	if path == "" {
		return nil, nil
	}
	creds, err := cluster.LoadCredentials(path)
	if err != nil {
		return nil, fmt.Errorf("node: nats credentials: %w", err)
	}
	return []nats.Option{creds.Option()}, nil
}

// leaseDial is the lease's cluster.LeaseOptions.Dial: a connection of its
// own to the node's NATS (in-process to the embedded server, or to --nats
// with the node's credentials), so its renewals never queue behind the
// node's reads and appends on the shared one.
func leaseDial(st *store, opts Options) func() (*nats.Conn, error) {
	name := "callsheet-lease-" + opts.Name
	return func() (*nats.Conn, error) {
		if st.server != nil {
			return st.server.Connect(name)
		}
		nopts, err := credentialsOption(opts.NATSCredentials)
		if err != nil {
			return nil, err
		}
		return cluster.Connect(st.url, name, nopts...)
	}
}

// onLeaseLost stops every session actor: this node may not act, and by the
// time it holds a lease again another node may own its sessions. Each is
// rebuilt from the log on its next use; those stopped mid-work are brought
// back once the lease is held again (onLeaseRegained). It runs on the
// fleet goroutine.
func (f *fleet) onLeaseLost() {
	if f.stopped == nil {
		f.stopped = map[cluster.SessionKey]bool{}
	}
	for _, k := range f.reg.liveSessions() {
		f.stopped[k] = true
	}
	f.reg.retireAll()
	f.observer.abandon("this node lost its lease")
}

// onLeaseRegained brings back, once the node holds its lease again, the
// sessions whose actors onLeaseLost stopped while their logs end mid-work
// (a turn open, a call running): each is loaded from its log, owned again
// unless another node took it meanwhile, and goes on, as at start-up. The
// others are rebuilt when next used. It runs on the fleet goroutine.
func (f *fleet) onLeaseRegained() {
	stopped := f.stopped
	f.stopped = nil
	var open []cluster.SessionKey
	for k := range stopped {
		ctx, cancel := context.WithTimeout(f.sup.Context(), replyTimeout)
		last, ok, err := f.store.log.Last(ctx, k.Tenant, k.Session)
		cancel()
		if err != nil || (ok && !settled(last.Type)) {
			open = append(open, k)
		}
	}
	if len(open) > 0 {
		f.logger.Info("holding its lease again: bringing back the sessions whose actors stopped mid-work when it was lost", "sessions", len(open), "stopped", len(stopped))
		f.takeAll(f.sup.Context(), open)
	}
}

// liveSessions are the sessions whose actors live on this node now.
func (r *registry) liveSessions() []cluster.SessionKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]cluster.SessionKey, 0, len(r.pids))
	for k := range r.pids {
		out = append(out, k)
	}
	return out
}

// registerLeaseMetrics exports how close the node came to losing its
// lease (cluster.LeaseStats.LongestGap) on reg; the operator's families
// count its renewals and losses (OnRenewed, OnLost).
func registerLeaseMetrics(reg prometheus.Registerer, l *cluster.Lease) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "callsheet_lease_longest_gap_seconds",
		Help: "Longest time between two acknowledged writes of this node's lease since it started; it stops acting once that reaches the lease TTL less the margin."},
		func() float64 { return l.Stats().LongestGap.Seconds() }))
}
