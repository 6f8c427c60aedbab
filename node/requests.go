package node

import (
	"context"
	"time"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// requestAckWait bounds how long a request delivered to a worker that died
// before claiming it waits before another worker gets it. Workers ack right
// after the claim is durable, so a short wait costs nothing in normal runs.
const requestAckWait = 5 * time.Second

// requests opens the request consumer of a concurrency class.
func (n *Node) requests(ctx context.Context, class string, capacity int) (actors.RequestSource, error) {
	c, err := n.log.Requests(ctx, class, natslog.WithAckWait(requestAckWait), natslog.WithMaxAckPending(max(capacity*4, 64)))
	if err != nil {
		return nil, err
	}
	st, err := c.Stream(capacity)
	if err != nil {
		return nil, err
	}
	n.streams = append(n.streams, st)
	return requestSource{st}, nil
}

type requestSource struct{ s *natslog.RequestStream }

func (s requestSource) Next(ctx context.Context) (actors.Request, error) {
	r, err := s.s.Next(ctx)
	if err != nil {
		return nil, err
	}
	return request{r}, nil
}

type request struct{ r *natslog.Request }

func (r request) Event() events.Event             { return r.r.Event }
func (r request) Call() *events.ToolCallRequested { return &r.r.Call }
func (r request) Ack() error                      { return r.r.AckNow() }
func (r request) Nak(d time.Duration) error       { return r.r.Nak(d) }
func (r request) Term() error                     { return r.r.Term() }
func (r request) InProgress() error               { return r.r.InProgress() }

// objectStore adapts the natslog object store to what the actors need.
