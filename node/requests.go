package node

import (
	"context"
	"time"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/events"
)

// requestAckWait bounds how long a request delivered to a worker that died
// before claiming it waits before another worker gets it. Workers ack right
// after the claim is durable, so a short wait costs nothing in normal runs.
const requestAckWait = 5 * time.Second

// requests opens the request source of a concurrency class.
func (n *Node) requests(ctx context.Context, class string, capacity int) (actors.RequestSource, error) {
	// Only the owner of a session runs its calls (docs/spec.md §7): this
	// node takes the requests addressed to it.
	// In a cluster the consumer is replicated, and a node restarted after a
	// kill finds the consumer it led waiting for a new leader (docs/facts.md:
	// 4-9 s): wait for it, as for the streams.
	var src events.RequestSource
	if err := n.await(ctx, "the "+class+" request consumer", func(ctx context.Context) (err error) {
		src, err = n.log.Requests(ctx, events.Subscription{Class: class, Node: n.opts.Name, Capacity: capacity})
		return err
	}); err != nil {
		return nil, err
	}
	n.streams = append(n.streams, src)
	return src, nil
}
