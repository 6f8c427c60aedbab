package node

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// Checkpoints (docs/audit.md, "Checkpoints and the witness"): while a
// session is active its head is signed at least every
// DefaultCheckpointInterval and every DefaultCheckpointEvents events, and
// at once when it closes, and each signed head (events.Checkpoint) is kept
// in the checkpoint store (natslog.Checkpoints), per tenant, outside the
// session's subjects. So a log whose tail was cut after a checkpoint's head
// shows it (replay --verify), and the window a cut could go unseen in is
// bounded by the interval and the count.
//
// The checkpointer is fed, like the search indexer, the durable batches
// the session actors hand the node (actors.Durable): the session
// actor, its appends and its events are as they were. durable only notes
// the latest head in memory; one goroutine signs and writes the heads that
// are due, each tick of the interval (every session with new events) and
// when a session reaches the event count or closes (at once), with at most
// checkpointWriters writes in flight.

// Defaults of the checkpoints.
const (
	// DefaultCheckpointInterval is the longest a session's durable head
	// waits to be signed into a checkpoint while it is active.
	DefaultCheckpointInterval = time.Second
	// DefaultCheckpointEvents is how many events of a session make a
	// checkpoint due before the interval ends.
	DefaultCheckpointEvents = 256
	// checkpointWriters bounds the checkpoint writes in flight.
	checkpointWriters = 32
	// checkpointTimeout bounds one round of writes.
	checkpointTimeout = 30 * time.Second
	// checkpointCache bounds the sessions without unsigned events kept in
	// memory (their last revision, to write the next one without a read).
	checkpointCache = 10_000
)

// ckptHead is one session's head as the checkpointer knows it; the
// checkpointer's mu guards it.
type ckptHead struct {
	tenant, session string
	// chain is the session's rule, "" until known.
	chain events.Chain
	// last is the latest durable event, zero once it is signed; dirty says
	// it is not signed yet, pending how many events came since the last
	// checkpoint, due that a checkpoint is wanted before the next tick (the
	// count, or the close).
	last    events.Event
	dirty   bool
	pending int
	due     bool
	closed  bool
	// rev is the store's revision of the session's checkpoint.
	rev uint64
}

// checkpointer makes the checkpoints; the Node owns it (stop ends its
// goroutine once it has written what was due).
type checkpointer struct {
	store    *natslog.Checkpoints
	log      *natslog.Log
	key      ed25519.PrivateKey
	node     string
	logger   *slog.Logger
	interval time.Duration
	every    int

	mu    sync.Mutex
	heads map[cluster.SessionKey]*ckptHead
	// gone are the deleted sessions, not to be written (deletion.go).
	gone *tombstones
	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// openCheckpoints opens the checkpoint store and starts the checkpointer,
// or returns nil when opts.CheckpointInterval is negative (no checkpoints).
func openCheckpoints(ctx context.Context, st *store, opts Options, key ed25519.PrivateKey, gone *tombstones, logger *slog.Logger) (*checkpointer, error) {
	if opts.CheckpointInterval < 0 {
		return nil, nil
	}
	var cs *natslog.Checkpoints
	if err := st.await(ctx, "the checkpoint store "+natslog.DefaultCheckpointBucket, func(ctx context.Context) (err error) {
		cs, err = st.log.Checkpoints(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	c := &checkpointer{store: cs, log: st.log, key: key, node: opts.Name, logger: logger,
		interval: DefaultCheckpointInterval, every: DefaultCheckpointEvents,
		heads: map[cluster.SessionKey]*ckptHead{}, wake: make(chan struct{}, 1), done: make(chan struct{}), gone: gone}
	if opts.CheckpointInterval > 0 {
		c.interval = opts.CheckpointInterval
	}
	if opts.CheckpointEvents > 0 {
		c.every = opts.CheckpointEvents
	}
	c.wg.Add(1)
	go c.run()
	return c, nil
}

// durable notes the latest head of a session's durable batch.
func (c *checkpointer) durable(tenant, session string, evs []events.Event) {
	if len(evs) == 0 {
		return
	}
	last := evs[len(evs)-1]
	c.mu.Lock()
	k := sessionKey(tenant, session)
	h := c.heads[k]
	if h == nil {
		h = &ckptHead{tenant: tenant, session: session}
		c.heads[k] = h
	}
	if h.chain == "" {
		h.chain = chainOfBatch(tenant, session, evs)
	}
	if last.Seq > h.last.Seq || !h.dirty {
		h.last = last
	}
	h.dirty = true
	h.pending += len(evs)
	if closedBy(last) {
		h.closed, h.due = true, true
	}
	if h.pending >= c.every {
		h.due = true
	}
	due := h.due
	c.mu.Unlock()
	if due {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// chainOfBatch returns the rule a batch's session is linked by when the
// batch shows it (its first event, or a link between two of its events),
// else "".
func chainOfBatch(tenant, session string, evs []events.Event) events.Chain {
	if evs[0].Seq == 1 {
		return events.ChainOf(tenant, session, evs[0])
	}
	for i := 1; i < len(evs); i++ {
		for _, c := range []events.Chain{events.Chain2, events.Chain1} {
			if h, err := c.Hash(evs[i-1]); err == nil && h == evs[i].Prev {
				return c
			}
		}
	}
	return ""
}

// stop writes what is due (within checkpointTimeout) and ends the
// goroutine.
func (c *checkpointer) stop() {
	close(c.done)
	c.wg.Wait()
}

func (c *checkpointer) run() {
	defer c.wg.Done()
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			c.flush(true)
			return
		case <-tick.C:
			c.flush(true)
		case <-c.wake:
			c.flush(false)
		}
	}
}

// flush signs and writes the heads that are due: every unsigned one with
// all, else those marked due.
func (c *checkpointer) flush(all bool) {
	type job struct {
		h     *ckptHead
		chain events.Chain
		last  events.Event
		rev   uint64
		close bool
	}
	var jobs []job
	c.mu.Lock()
	for _, h := range c.heads {
		if !h.dirty || !(all || h.due) {
			continue
		}
		jobs = append(jobs, job{h: h, chain: h.chain, last: h.last, rev: h.rev, close: h.closed})
		h.dirty, h.due, h.pending = false, false, 0
	}
	c.evict()
	c.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(checkpointWriters)
	for _, j := range jobs {
		g.Go(func() error {
			rev, err := c.write(ctx, j.h, j.chain, j.last, j.rev, j.close)
			c.mu.Lock()
			defer c.mu.Unlock()
			if err != nil {
				// Due again at the next tick, unless a later head is.
				c.logger.Warn("checkpoint failed", "tenant", j.h.tenant, "session", j.h.session, "seq", j.last.Seq, "err", err)
				if !j.h.dirty {
					j.h.dirty = true
				}
				return nil
			}
			j.h.rev = rev
			switch {
			case j.close && !j.h.dirty:
				delete(c.heads, sessionKey(j.h.tenant, j.h.session))
			case !j.h.dirty:
				// Signed: the event (its data and encoding, about 1.5 KB)
				// is not needed again until the session's next batch sets
				// the next head; an idle session's head keeps only its
				// revision and rule.
				j.h.last = events.Event{}
			}
			return nil
		})
	}
	_ = g.Wait()
}

// write signs the head and stores it, finding the session's rule first if
// no batch showed it.
func (c *checkpointer) write(ctx context.Context, h *ckptHead, chain events.Chain, last events.Event, rev uint64, closed bool) (uint64, error) {
	release, ok := c.gone.hold(h.tenant, h.session)
	if !ok {
		return rev, nil // deleted
	}
	defer release()
	if chain == "" {
		first, ok, err := c.log.First(ctx, h.tenant, h.session)
		if err != nil || !ok {
			return rev, fmt.Errorf("reading the session's first event for its chain rule: %v (found: %v)", err, ok)
		}
		chain = events.ChainOf(h.tenant, h.session, first)
		c.mu.Lock()
		h.chain = chain
		c.mu.Unlock()
	}
	hash, err := chain.Hash(last)
	if err != nil {
		return rev, err
	}
	cp := events.SignCheckpoint(c.key, events.Checkpoint{Chain: chain, Tenant: h.tenant, Session: h.session, Seq: last.Seq, Hash: hash,
		Time: last.Time, Signed: time.Now().UTC(), Node: c.node, Closed: closed, IntervalMS: c.interval.Milliseconds(), Every: c.every})
	pub := c.key.Public().(ed25519.PublicKey)
	return c.store.Put(ctx, cp, rev, func(cur events.Checkpoint) bool { return cur.Verify(pub) == nil })
}

// evict drops sessions without unsigned events beyond checkpointCache.
// Called with mu held.
func (c *checkpointer) evict() {
	if len(c.heads) <= checkpointCache {
		return
	}
	for k, h := range c.heads {
		if len(c.heads) <= checkpointCache*9/10 {
			return
		}
		if !h.dirty {
			delete(c.heads, k)
		}
	}
}

// Checkpoints delivers the latest checkpoint of each of tenant's sessions
// (of session alone, when not ""), then, with follow, every new one until
// ctx ends; the channel is closed at the end. It fails when the node keeps
// no checkpoints (Options.CheckpointInterval negative).
func (n *Node) Checkpoints(ctx context.Context, tenant, session string, follow bool) (<-chan events.Checkpoint, error) {
	if n.checkpoints == nil {
		return nil, fmt.Errorf("%w: this node keeps no checkpoints", ErrNotFound)
	}
	ch, err := n.checkpoints.store.Watch(ctx, tenant, session, follow)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return ch, nil
}
