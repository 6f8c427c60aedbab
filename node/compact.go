package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/callsheet/callsheet/events"
)

// compactQueue bounds the sessions waiting for their snapshot; a session
// that finds it full is left to its next read, which writes the snapshot
// itself (events/natslog, snapshot.go).
const compactQueue = 1024

// compactTimeout bounds one session's compaction.
const compactTimeout = 30 * time.Second

// compactRest is how many times as long as a compaction the compactor
// waits before the next.
const compactRest = 3

// A session's batches are compacted together: once none came for
// CompactQuiet, or CompactMaxDelay after the first not yet compacted, so a
// session that keeps writing is compacted about once a second, not after
// every batch. compactTick is how often the compactor looks; compactPending
// bounds the sessions waiting so (one more is left to its next read).
const (
	CompactQuiet    = 250 * time.Millisecond
	CompactMaxDelay = time.Second
	compactTick     = 100 * time.Millisecond
	compactPending  = 1 << 16
)

// compactor brings a session's snapshot up to date (natslog.Log.Compact)
// after its durable batches (CompactQuiet, CompactMaxDelay) and when its
// actor passivates, off every caller's path: the session's next read (its
// actor's rebuild after a crash or a takeover, a transcript, a watch) then
// costs one snapshot get and the log written since, not a walk through
// every block of the log its events span (docs/performance.md, "Session
// snapshots"). A session queued and not yet compacted is not queued twice,
// and the goroutine rests compactRest times as long as each compaction
// took, so it spends at most a quarter of one core. It runs one goroutine,
// owned by the node: stop ends it.
type compactor struct {
	log    compactLog
	logger *slog.Logger
	in     chan [2]string
	mu     sync.Mutex
	// queued are the sessions in in, each queued once; pending those with
	// batches not yet compacted, not yet due.
	queued  map[[2]string]struct{}
	pending map[[2]string]pendingBatches
	// pendingPeak is the most sessions pending since pending was last
	// made anew: a Go map keeps the room of its largest size, so once a
	// burst has drained the map is replaced (shrinkPending).
	pendingPeak int
	// idle are the queued sessions whose actors passivated: their tips are
	// dropped once compacted, so an idle session holds no tip memory.
	idle map[[2]string]struct{}
	// gone are the deleted sessions, not to be written (deletion.go).
	gone *tombstones

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// pendingBatches are when a session's first and last batches not yet
// compacted were durable.
type pendingBatches struct{ first, last time.Time }

// compactLog is what the compactor needs of the log (natslog.Log).
type compactLog interface {
	Compact(ctx context.Context, tenant, session string) error
	ForgetTip(tenant, session string)
}

func newCompactor(log compactLog, logger *slog.Logger) *compactor {
	c := &compactor{
		log: log, logger: logger, in: make(chan [2]string, compactQueue),
		queued: map[[2]string]struct{}{}, pending: map[[2]string]pendingBatches{},
		idle: map[[2]string]struct{}{},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.run()
	return c
}

// add queues a session now (its actor passivated) unless it is queued
// already; it never blocks. A session that finds the queue full has its
// tip dropped at once: its next read writes the snapshot, and an idle
// session holds no tip memory either way.
func (c *compactor) add(tenant, session string) {
	k := [2]string{tenant, session}
	c.mu.Lock()
	delete(c.pending, k)
	c.shrinkPending()
	queued := c.queue(k)
	if queued {
		c.idle[k] = struct{}{}
	}
	c.mu.Unlock()
	if !queued {
		c.log.ForgetTip(tenant, session)
	}
}

// queue queues k unless it is queued already or the queue is full; c.mu is
// held.
func (c *compactor) queue(k [2]string) bool {
	if _, ok := c.queued[k]; ok {
		return true
	}
	select {
	case c.in <- k:
		c.queued[k] = struct{}{}
		return true
	default:
		return false
	}
}

// durable notes a durable batch of the session's events; it never blocks.
func (c *compactor) durable(tenant, session string, _ []events.Event) {
	k, now := [2]string{tenant, session}, time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.idle, k)
	if p, ok := c.pending[k]; ok {
		p.last = now
		c.pending[k] = p
	} else if len(c.pending) < compactPending {
		c.pending[k] = pendingBatches{first: now, last: now}
		c.pendingPeak = max(c.pendingPeak, len(c.pending))
	}
}

// pendingShrink is the peak past which a drained pending map is replaced.
const pendingShrink = 256

// shrinkPending replaces pending with an empty map once it has drained
// after holding more than pendingShrink sessions; c.mu is held.
func (c *compactor) shrinkPending() {
	if len(c.pending) == 0 && c.pendingPeak > pendingShrink {
		c.pending, c.pendingPeak = map[[2]string]pendingBatches{}, 0
	}
}

// due queues the pending sessions due at now; one that finds the queue
// full stays pending.
func (c *compactor) due(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, p := range c.pending {
		if (now.Sub(p.last) >= CompactQuiet || now.Sub(p.first) >= CompactMaxDelay) && c.queue(k) {
			delete(c.pending, k)
		}
	}
	c.shrinkPending()
}

func (c *compactor) run() {
	defer c.wg.Done()
	tick := time.NewTicker(compactTick)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			c.due(now)
		case k := <-c.in:
			// Unmarked first: a batch made durable during the compaction
			// makes the session pending again.
			c.mu.Lock()
			delete(c.queued, k)
			_, idle := c.idle[k]
			delete(c.idle, k)
			c.mu.Unlock()
			release, ok := c.gone.hold(k[0], k[1])
			if !ok {
				continue
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(c.ctx, compactTimeout)
			if err := c.log.Compact(ctx, k[0], k[1]); err != nil && c.ctx.Err() == nil {
				c.logger.Warn("snapshot failed; the session's next read writes it", "tenant", k[0], "session", k[1], "err", err)
			}
			if idle {
				c.log.ForgetTip(k[0], k[1])
			}
			cancel()
			release()
			select {
			case <-time.After(compactRest * time.Since(start)):
			case <-c.ctx.Done():
				return
			}
		case <-c.ctx.Done():
			return
		}
	}
}

// stop ends the goroutine, abandoning the sessions still queued.
func (c *compactor) stop() {
	c.cancel()
	c.wg.Wait()
}
