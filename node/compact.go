package node

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// compactQueue bounds the sessions waiting for their snapshot; a session
// that finds it full is left to its next read, which writes the snapshot
// itself (events/natslog, snapshot.go).
const compactQueue = 1024

// compactTimeout bounds one session's compaction.
const compactTimeout = 30 * time.Second

// compactor brings the snapshot of each session whose actor passivated up
// to date (natslog.Log.Compact), off every caller's path: the session's next
// read (its actor's rebuild, a transcript, a watch) then costs one snapshot
// get and the log written since, not a walk through every block of the log
// its events span (docs/performance.md, "Replay"). It runs one goroutine,
// owned by the node: stop ends it.
type compactor struct {
	log interface {
		Compact(ctx context.Context, tenant, session string) error
	}
	logger *slog.Logger
	in     chan [2]string
	// gone are the deleted sessions, not to be written (deletion.go).
	gone *tombstones

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newCompactor(log interface {
	Compact(ctx context.Context, tenant, session string) error
}, logger *slog.Logger) *compactor {
	c := &compactor{log: log, logger: logger, in: make(chan [2]string, compactQueue)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.run()
	return c
}

// add queues a session; it never blocks.
func (c *compactor) add(tenant, session string) {
	select {
	case c.in <- [2]string{tenant, session}:
	default:
	}
}

func (c *compactor) run() {
	defer c.wg.Done()
	for {
		select {
		case k := <-c.in:
			release, ok := c.gone.hold(k[0], k[1])
			if !ok {
				continue
			}
			ctx, cancel := context.WithTimeout(c.ctx, compactTimeout)
			if err := c.log.Compact(ctx, k[0], k[1]); err != nil && c.ctx.Err() == nil {
				c.logger.Warn("snapshot failed; the session's next read writes it", "tenant", k[0], "session", k[1], "err", err)
			}
			cancel()
			release()
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
