package node

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/events"
)

// Retention (docs/spec.md §7): every node sweeps, every
// Options.RetentionSweep, each tenant with a retention for its sessions
// that the search index holds as closed for longer, and deletes those it
// serves (DeleteSession: the owner deletes, any other node is told it is
// not the owner and leaves it), with a receipt by events.RetentionPrincipal.
// The deletions log receipts a session once, whichever nodes race to delete
// it. The sweep also removes, once, what may have landed on a deleted
// session's subjects after its deletion (a read or append in flight then).

// Defaults of the sweep.
const (
	// DefaultRetentionSweep is how often a node sweeps.
	DefaultRetentionSweep = 30 * time.Second
	// sweepBatch bounds the sessions one sweep deletes per tenant; the
	// next sweep takes the rest.
	sweepBatch = 500
	// tombstoneSettle is how long after a deletion the sweep purges its
	// session's subjects once more.
	tombstoneSettle = 10 * time.Second
)

// startRetention starts the sweep in a goroutine of the node's supervisor,
// unless Options.RetentionSweep is negative.
func (n *Node) startRetention() {
	every := n.opts.RetentionSweep
	if every < 0 {
		return
	}
	if every == 0 {
		every = DefaultRetentionSweep
	}
	n.sup.Go(func(ctx context.Context) {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n.Sweep(ctx)
		}
	})
}

// SweepResult is what one sweep did, per tenant.
type SweepResult struct {
	// Deleted are the sessions this node deleted; Elsewhere those another
	// node serves (it deletes them); Failed says why a deletion failed.
	Deleted, Elsewhere []string
	Failed             map[string]string
}

// Sweep deletes, for every tenant with a retention, the closed sessions
// past it that this node serves (the sweep goroutine calls it every
// Options.RetentionSweep), and purges the subjects of sessions deleted
// more than tombstoneSettle ago once more. It returns what it did, by
// tenant.
func (n *Node) Sweep(ctx context.Context) map[string]*SweepResult {
	out := map[string]*SweepResult{}
	ts := n.Tenants().Tenants
	now := time.Now()
	for _, tenant := range slices.Sorted(maps.Keys(ts)) {
		keep := ts[tenant].Retention.Std()
		if keep <= 0 {
			continue
		}
		ids, err := n.store.search.Expired(ctx, tenant, now.Add(-keep), sweepBatch)
		if err != nil {
			n.logger.Warn("retention: finding closed sessions failed", "tenant", tenant, "retention", keep, "err", err)
			continue
		}
		res := &SweepResult{Failed: map[string]string{}}
		out[tenant] = res
		for _, id := range ids {
			_, err := n.DeleteSession(ctx, tenant, id, events.RetentionPrincipal, events.DeletedByRetention)
			var no *NotOwnerError
			switch {
			case err == nil:
				res.Deleted = append(res.Deleted, id)
			case errors.As(err, &no):
				res.Elsewhere = append(res.Elsewhere, id)
			case errors.Is(err, ErrNotFound):
				// Deleted meanwhile (by another node's sweep, or a DELETE).
			default:
				res.Failed[id] = err.Error()
				if ctx.Err() != nil {
					return out
				}
			}
		}
		if len(res.Deleted) > 0 || len(res.Failed) > 0 {
			n.logger.Info("retention: closed sessions deleted", "tenant", tenant, "retention", keep, "deleted", len(res.Deleted), "failed", len(res.Failed), "failures", res.Failed)
		}
	}
	for _, k := range n.gone.settled(now.Add(-tombstoneSettle)) {
		if m, err := n.store.log.PurgeMessages(ctx, k[0], k[1]); err != nil {
			n.logger.Warn("deleted session: purging its subjects again failed", "tenant", k[0], "session", k[1], "err", err)
		} else if m > 0 {
			n.logger.Info("deleted session: messages written after its deletion removed", "tenant", k[0], "session", k[1], "messages", m)
		}
	}
	return out
}

// settled returns the tombstones set before t that were not returned
// before, and marks them returned.
func (g *tombstones) settled(t time.Time) [][2]string {
	g.swept.Lock()
	defer g.swept.Unlock()
	if g.done == nil {
		g.done = map[cluster.SessionKey]bool{}
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out [][2]string
	for k, at := range g.set {
		if at.Before(t) && !g.done[k] {
			g.done[k] = true
			out = append(out, [2]string{k.Tenant, k.Session})
		}
	}
	for k := range g.done {
		if _, ok := g.set[k]; !ok {
			delete(g.done, k)
		}
	}
	return out
}
