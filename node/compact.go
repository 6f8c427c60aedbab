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

// compactor brings a session's snapshot up to date (natslog.Log.Compact)
// after each durable batch of its events and when its actor passivates, off
// every caller's path: the session's next read (its actor's rebuild after a
// crash or a takeover, a transcript, a watch) then costs one snapshot get
// and the log written since, not a walk through every block of the log its
// events span (docs/performance.md, "Session snapshots"). A session queued
// and not yet compacted is not queued twice, and the goroutine rests
// compactRest times as long as each compaction took, so it spends at most a
// quarter of one core and a busy node compacts each session less often. It
// runs one goroutine, owned by the node: stop ends it.
type compactor struct {
	log interface {
		Compact(ctx context.Context, tenant, session string) error
	}
	logger *slog.Logger
	in     chan [2]string
	// queued are the sessions in in, each queued once.
	mu     sync.Mutex
	queued map[[2]string]struct{}
	// gone are the deleted sessions, not to be written (deletion.go).
	gone *tombstones

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newCompactor(log interface {
	Compact(ctx context.Context, tenant, session string) error
}, logger *slog.Logger) *compactor {
	c := &compactor{log: log, logger: logger, in: make(chan [2]string, compactQueue), queued: map[[2]string]struct{}{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.run()
	return c
}

// add queues a session unless it is queued already; it never blocks.
func (c *compactor) add(tenant, session string) {
	k := [2]string{tenant, session}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.queued[k]; ok {
		return
	}
	select {
	case c.in <- k:
		c.queued[k] = struct{}{}
	default:
	}
}

// durable queues the session after a durable batch of its events.
func (c *compactor) durable(tenant, session string, _ []events.Event) {
	c.add(tenant, session)
}

func (c *compactor) run() {
	defer c.wg.Done()
	for {
		select {
		case k := <-c.in:
			// Unmarked first: a batch made durable during the compaction
			// queues the session again.
			c.mu.Lock()
			delete(c.queued, k)
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
