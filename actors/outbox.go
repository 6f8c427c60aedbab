package actors

import (
	"context"
	"errors"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/retry"
)

// pending is an event decided but not yet durable, and what to do once it is
// (after) or once it is known it never will be (fail).
type pending struct {
	ev events.Event
	// call is ev's payload when ev is a ToolCallRequested: handed to the
	// node's tool actor once durable (Calls.Offer) without decoding.
	call *events.ToolCallRequested
	// dispatched: call went to the tool actor when it was decided
	// (Session.handover), not once durable.
	dispatched bool
	// claimable: call may have its claim decided with it, if a worker is
	// free when its append starts (Session.claimWithRequests); worker is
	// that worker, handed the call once durable, freed if it never is.
	claimable bool
	worker    heldWorker
	after     func()
	fail      func(error)
}

// outbox is the append pipeline of one session: events the actor decided
// wait in queued; at most one append is in flight (appending), guarded on the
// last durable event; once it is stored, its events' after callbacks run, in
// order, and whatever was queued meanwhile goes out as the next append. So a
// burst of decisions becomes one append, appends of one session never race
// each other, and nothing is acted on before it is in the log.
//
// The outbox holds no goroutine of its own between appends: start returns a
// function that performs the append, which the owner runs in a goroutine of
// its choice and whose result it hands back to done. Not safe for concurrent
// use: the session actor owns it.
type outbox struct {
	queued    []pending
	appending []pending
	// evs is appending's events, as the append in flight stores them.
	evs []events.Event
	// spare is a list of pending events done with (recycle), for queue to
	// fill again.
	spare []pending
	// durable is the Seq of the last event known to be in the log.
	durable uint64
}

// reset forgets everything and takes durable as the last stored Seq.
func (o *outbox) reset(durable uint64) {
	o.queued, o.appending, o.evs, o.durable = nil, nil, nil, durable
}

// queue adds an event to the next append.
func (o *outbox) queue(p pending) {
	if o.queued == nil {
		// A one-call turn decides six events: room for them at once, not
		// four growths of the slice.
		o.queued, o.spare = o.spare, nil
		if o.queued == nil {
			o.queued = make([]pending, 0, 8)
		}
	}
	o.queued = append(o.queued, p)
}

// idleAppending reports whether no append is in flight.
func (o *outbox) idleAppending() bool { return len(o.appending) == 0 }

// idle reports whether every decided event is durable.
func (o *outbox) idle() bool { return len(o.appending) == 0 && len(o.queued) == 0 }

// isDurable reports whether the event with seq is in the log.
func (o *outbox) isDurable(seq uint64) bool { return seq <= o.durable }

// start moves the queued events into the append in flight and returns the
// append to perform, or nil when an append is already in flight or nothing
// is queued. The append stores the events after the last durable event;
// gate, if not nil, is asked first and its error refuses the append without
// publishing anything.
func (o *outbox) start(ctx context.Context, log events.Log, tenant, session string, gate func() error) func() error {
	if len(o.appending) > 0 || len(o.queued) == 0 {
		return nil
	}
	o.appending, o.queued = o.queued, nil
	evs := make([]events.Event, len(o.appending))
	for i, p := range o.appending {
		evs[i] = p.ev
	}
	o.evs = evs
	expected := o.durable
	return func() error {
		return appendRetrying(ctx, log, tenant, session, expected, evs, gate)
	}
}

// done records the outcome of the append in flight. On success the events
// are durable and done returns them, in order, for the caller to act on
// (their after callbacks), and the list of the events the log stored (not
// modified since, the caller's to keep); on failure it returns the error
// and calls nothing: the caller decides (a session actor gives up its state
// and reloads). The caller hands stored back to recycle once through with it.
func (o *outbox) done(err error) (stored []pending, evs []events.Event, _ error) {
	if err != nil {
		return nil, nil, err
	}
	stored, evs = o.appending, o.evs
	o.appending, o.evs = nil, nil
	if len(stored) > 0 {
		o.durable = stored[len(stored)-1].ev.Seq
	}
	return stored, evs, nil
}

// recycle takes back a list done returned, which nothing uses any more, for
// the next events queued: a session's appends reuse one list.
func (o *outbox) recycle(stored []pending) {
	clear(stored) // its events and callbacks are the collector's
	if o.spare == nil && cap(stored) <= maxSpare {
		o.spare = stored[:0]
	}
}

// maxSpare bounds the list recycle keeps: one of a burst larger than that
// is left to the collector.
const maxSpare = 64

// fail tells whoever waits on an event that is not durable that it never
// will be, and forgets those events.
func (o *outbox) fail(err error) {
	for _, p := range append(o.appending, o.queued...) {
		if p.worker.held() {
			p.worker.release()
		}
		if p.fail != nil {
			p.fail(err)
		}
	}
	o.appending, o.queued, o.evs = nil, nil, nil
}

// appendAttempts bounds the tries of one append on transient errors, and
// appendBackoff spaces them.
const appendAttempts = 8

var appendBackoff = retry.Backoff{Initial: 20 * time.Millisecond, Factor: 2, Max: time.Second}

// appendRetrying retries transient failures: the append is idempotent (the
// message id is the event id), so a retry after a lost ack stores nothing
// twice. A conflict is not retried: the session changed under the writer.
// gate is asked before every try; its error ends the append at once (a node
// that may no longer act must not publish, docs/spec.md §7).
func appendRetrying(ctx context.Context, log events.Log, tenant, id string, expected uint64, evs []events.Event, gate func() error) error {
	return retry.Do(ctx, appendBackoff, appendAttempts, func(ctx context.Context, _ int) error {
		if gate != nil {
			if err := gate(); err != nil {
				return retry.Permanent(err)
			}
		}
		err := log.Append(ctx, tenant, id, expected, evs)
		if errors.Is(err, events.ErrConflict) {
			return retry.Permanent(err)
		}
		return err
	})
}
