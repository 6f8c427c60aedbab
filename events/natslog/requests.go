package natslog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
)

// Defaults for RequestOptions.
const (
	// DefaultAckWait is how long a delivered request may stay unacknowledged
	// before the server delivers it again. A worker extends it with
	// Request.InProgress while it works.
	DefaultAckWait = 30 * time.Second
	// DefaultMaxAckPending is how many requests of one class may be
	// delivered and unacknowledged at once, across all workers.
	DefaultMaxAckPending = 1000
	// DefaultInactiveThreshold is how long a node's request consumer stays
	// after its last pull: a node that is gone for longer loses it, and its
	// sessions' calls were requested again by their new owners.
	DefaultInactiveThreshold = 24 * time.Hour
)

type requestConfig struct {
	ackWait       time.Duration
	maxAckPending int
	inactive      time.Duration
}

// RequestOption configures Requests. Options validate their argument and
// return an error wrapping ErrInvalidOption.
type RequestOption func(*requestConfig) error

// WithAckWait sets the consumer's AckWait; default DefaultAckWait.
func WithAckWait(d time.Duration) RequestOption {
	return func(c *requestConfig) error {
		if d < time.Second {
			return fmt.Errorf("%w: ack wait %s: use at least 1s", ErrInvalidOption, d)
		}
		c.ackWait = d
		return nil
	}
}

// WithMaxAckPending sets the consumer's MaxAckPending; default
// DefaultMaxAckPending.
func WithMaxAckPending(n int) RequestOption {
	return func(c *requestConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: max ack pending %d: use at least 1", ErrInvalidOption, n)
		}
		c.maxAckPending = n
		return nil
	}
}

// WithInactiveThreshold sets how long a node's request consumer survives
// without a pull; default DefaultInactiveThreshold. It does not apply to
// the consumers of requests that name no node, which stay.
func WithInactiveThreshold(d time.Duration) RequestOption {
	return func(c *requestConfig) error {
		if d < time.Second {
			return fmt.Errorf("%w: inactive threshold %s: use at least 1s", ErrInvalidOption, d)
		}
		c.inactive = d
		return nil
	}
}

// RequestConsumer hands out the ToolCallRequested events of one concurrency
// class and one node, from every tenant and session, to the workers that
// share it. It is a durable pull consumer, safe for concurrent use:
//
//   - for a node N, "cs-req-<class>-N" on "cs.ev.*.*.req.<class>.N": the
//     requests N runs as the owner of their sessions. It delivers what was
//     stored after it was created (a new owner requests again what an
//     earlier owner left unclaimed, docs/spec.md §7) and goes away after
//     the inactive threshold without a pull;
//   - without a node, "cs-req-<class>" on "cs.ev.*.*.req.<class>": requests
//     any node may serve. It starts from the first such request ever stored.
//
// Delivery is at least once: see the package doc on redelivery.
type RequestConsumer struct {
	cons  jetstream.Consumer
	class string
	node  string
	log   *Log // resolves requests stored by reference
}

// Consumer creates (or updates) the durable consumer of a concurrency class
// (ClassExclusive, ClassParallelSafe or ClassIsolatedBackground) and a node
// ("" for requests that name none), and returns it. Errors wrap
// ErrInvalidOption, or are the server's.
func (l *Log) Consumer(ctx context.Context, class, node string, opts ...RequestOption) (*RequestConsumer, error) {
	return l.consumer(ctx, class, node, nil, opts...)
}

// consumer is Consumer with defaults that the Log's options override.
func (l *Log) consumer(ctx context.Context, class, node string, defaults []RequestOption, opts ...RequestOption) (*RequestConsumer, error) {
	if l.cfg.undispatched {
		return nil, fmt.Errorf("%w: this Log stores requests without dispatching them (WithDispatch(false)): it has no request consumers", ErrInvalidOption)
	}
	if !validClass(class) {
		return nil, fmt.Errorf("%w: concurrency class %q: want %s, %s or %s", ErrInvalidOption, class, ClassExclusive, ClassParallelSafe, ClassIsolatedBackground)
	}
	if node != "" && !tokenRE.MatchString(node) {
		return nil, fmt.Errorf("%w: node %q: use letters, digits, '_' or '-'", ErrInvalidOption, node)
	}
	cfg := requestConfig{ackWait: DefaultAckWait, maxAckPending: DefaultMaxAckPending, inactive: DefaultInactiveThreshold}
	all := append(append(append([]RequestOption(nil), defaults...), l.cfg.requests...), opts...)
	for _, o := range all {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	cc := jetstream.ConsumerConfig{
		Durable:       "cs-req-" + class,
		Description:   "callsheet tool requests of class " + class + " that name no node",
		FilterSubject: l.cfg.prefix + ".*.*.req." + class,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.ackWait,
		MaxAckPending: cfg.maxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    -1,
	}
	if node != "" {
		cc.Durable += "-" + node
		cc.Description = "callsheet tool requests of class " + class + " run by node " + node
		cc.FilterSubject += "." + node
		cc.DeliverPolicy = jetstream.DeliverNewPolicy
		cc.InactiveThreshold = cfg.inactive
	}
	cons, err := l.js.CreateOrUpdateConsumer(ctx, l.cfg.stream, cc)
	if err != nil {
		return nil, fmt.Errorf("natslog: request consumer %s: %w", cc.Durable, err)
	}
	return &RequestConsumer{cons: cons, class: class, node: node, log: l}, nil
}

// Requests opens the events.RequestSource of a subscription: the durable
// consumer of its class and node (Consumer) and a buffered pull of up to
// sub.Capacity requests on it (Stream). The consumer's MaxAckPending is four
// times the capacity (at least 64), so requests redelivered behind a full
// pool do not stall it, unless the Log's WithRequestOptions say otherwise.
// It implements events.Log.
func (l *Log) Requests(ctx context.Context, sub events.Subscription) (events.RequestSource, error) {
	c, err := l.consumer(ctx, sub.Class, sub.Node, []RequestOption{WithMaxAckPending(max(4*sub.Capacity, 64))})
	if err != nil {
		return nil, err
	}
	st, err := c.Stream(max(sub.Capacity, 1))
	if err != nil {
		return nil, err
	}
	return source{st}, nil
}

// source adapts a RequestStream to events.RequestSource.
type source struct{ s *RequestStream }

func (s source) Next(ctx context.Context) (events.Request, error) {
	r, err := s.s.Next(ctx)
	if err != nil {
		return nil, err
	}
	return request{r}, nil
}

func (s source) Stop() { s.s.Stop() }

// request adapts a Request to events.Request. Ack does not wait for the
// server's confirmation: a lost ack only means a redelivery, which the claim
// makes harmless.
type request struct{ r *Request }

func (r request) Event() events.Event             { return r.r.Event }
func (r request) Call() *events.ToolCallRequested { return &r.r.Call }
func (r request) Ack() error                      { return r.r.AckNow() }
func (r request) Nak(d time.Duration) error       { return r.r.Nak(d) }
func (r request) Term() error                     { return r.r.Term() }
func (r request) InProgress() error               { return r.r.InProgress() }

// Class returns the consumer's concurrency class.
func (c *RequestConsumer) Class() string { return c.class }

// Node returns the node whose requests the consumer delivers ("" for
// requests that name none).
func (c *RequestConsumer) Node() string { return c.node }

// Request is one delivered ToolCallRequested event. Exactly one of Ack, Nak
// or Term settles it; until then the server redelivers it after AckWait.
type Request struct {
	// Event is the stored event; Call is its decoded payload.
	Event events.Event
	Call  events.ToolCallRequested
	// Delivered counts deliveries of this message, from 1; more than 1 is a
	// redelivery (a crash can also redeliver with 1: see the package doc).
	Delivered uint64
	// StreamSeq is the message's stream sequence.
	StreamSeq uint64

	msg jetstream.Msg
}

// Ack acknowledges the request and waits until the server has recorded it.
func (r *Request) Ack(ctx context.Context) error { return r.msg.DoubleAck(ctx) }

// Nak asks for redelivery after delay (0: at once).
func (r *Request) Nak(delay time.Duration) error {
	if delay > 0 {
		return r.msg.NakWithDelay(delay)
	}
	return r.msg.Nak()
}

// Term tells the server never to deliver the request again.
func (r *Request) Term() error { return r.msg.Term() }

// InProgress resets the request's AckWait: a worker calls it while it works.
func (r *Request) InProgress() error { return r.msg.InProgress() }

// Next waits for one request until ctx ends (a context without deadline
// waits for ever, one pull request after another). A message that does not
// decode as a ToolCallRequested event is terminated, so it is never
// delivered again, and skipped. Errors wrap ctx.Err() or are the server's.
func (c *RequestConsumer) Next(ctx context.Context) (*Request, error) {
	for {
		m, err := c.cons.Next(jetstream.FetchContext(ctx))
		if ctx.Err() != nil {
			return nil, fmt.Errorf("next %s request: %w", c.class, ctx.Err())
		}
		if errors.Is(err, nats.ErrTimeout) {
			continue // the pull request expired; ask again
		}
		if err != nil {
			return nil, fmt.Errorf("next %s request: %w", c.class, err)
		}
		if r, err := c.log.decodeRequest(ctx, m); err == nil {
			return r, nil
		}
	}
}

// Fetch waits until at least one request is available or ctx ends, and
// returns it with up to max-1 more that are already waiting. Undecodable
// messages are terminated and skipped.
func (c *RequestConsumer) Fetch(ctx context.Context, max int) ([]*Request, error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: fetch %d requests: use at least 1", ErrInvalidOption, max)
	}
	first, err := c.Next(ctx)
	if err != nil {
		return nil, err
	}
	out := []*Request{first}
	if max == 1 {
		return out, nil
	}
	batch, err := c.cons.FetchNoWait(max - 1)
	if err != nil {
		return out, nil // the first request stands; the rest come next time
	}
	for m := range batch.Messages() {
		if r, err := c.log.decodeRequest(ctx, m); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// decodeRequest decodes a delivered message into its request, resolving
// the request if it was stored by reference. An undecodable message is
// terminated; one whose payload cannot be fetched now (ctx ended, the server
// busy) is left for redelivery.
func (l *Log) decodeRequest(ctx context.Context, m jetstream.Msg) (*Request, error) {
	r := &Request{msg: m}
	if md, err := m.Metadata(); err == nil {
		r.Delivered, r.StreamSeq = md.NumDelivered, md.Sequence.Stream
	}
	// A request travels last in its pack (with the events decided before it).
	var ev events.Event
	st, err := decodeLastStored(m.Data())
	if err == nil {
		ev, err = l.resolve(ctx, st)
		if err != nil && !errors.Is(err, ErrBadReference) {
			_ = m.NakWithDelay(refRetry) // the payload could not be fetched now: later
			return nil, fmt.Errorf("request %s stream seq %d: %w", m.Subject(), r.StreamSeq, err)
		}
	}
	if err == nil && ev.Type != events.TypeToolCallRequested {
		err = fmt.Errorf("event %s has type %s", ev.ID, ev.Type)
	}
	if err == nil {
		err = events.DecodeInto(ev, &r.Call) // as events.Decode would, at its speed
	}
	if err != nil {
		_ = m.TermWithReason("undecodable request")
		return nil, fmt.Errorf("undecodable request %s stream seq %d: %w", m.Subject(), r.StreamSeq, err)
	}
	r.Event = ev
	return r, nil
}

// RequestStream is a long-lived pull on a RequestConsumer that keeps up to
// max requests buffered, so a worker takes the next request without a round
// trip to the server. Not safe for concurrent use: one fetch loop owns it,
// and must Stop it.
type RequestStream struct {
	it    jetstream.MessagesContext
	class string
	log   *Log
}

// Stream starts a buffered pull of up to max requests (a pool's capacity).
// Buffered requests count against AckWait like delivered ones: keep max at
// what the worker can start at once.
func (c *RequestConsumer) Stream(max int) (*RequestStream, error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: stream of %d requests: use at least 1", ErrInvalidOption, max)
	}
	it, err := c.cons.Messages(jetstream.PullMaxMessages(max))
	if err != nil {
		return nil, fmt.Errorf("stream %s requests: %w", c.class, err)
	}
	return &RequestStream{it: it, class: c.class, log: c.log}, nil
}

// Next waits for the next request until ctx ends. A message that does not
// decode is terminated and skipped.
func (s *RequestStream) Next(ctx context.Context) (*Request, error) {
	for {
		m, err := s.it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			return nil, fmt.Errorf("next %s request: %w", s.class, ctx.Err())
		}
		if err != nil {
			return nil, fmt.Errorf("next %s request: %w", s.class, err)
		}
		if r, err := s.log.decodeRequest(ctx, m); err == nil {
			return r, nil
		}
	}
}

// Stop ends the pull; buffered requests not taken go back to the server.
func (s *RequestStream) Stop() { s.it.Stop() }

// AckNow acknowledges without waiting for the server's confirmation: a lost
// ack only means a redelivery, which claims make harmless.
func (r *Request) AckNow() error { return r.msg.Ack() }
