package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// Streamed turns (docs/spec.md §8): a harness posts a turn's calls as the
// model streams them, each batch recorded and scheduled as it arrives, and
// ends the turn when the model's response is complete.

// BatchOptions are what a batch of a streamed turn may say beyond its
// calls.
type BatchOptions struct {
	// From is where the harness says the batch starts (the count of calls
	// it posted to the turn before), or -1 when it does not say. A batch
	// that does not start there is refused (ErrConflict): one was lost.
	From int
	// ParallelToolCalls false runs every call of the turn alone; Cap lowers
	// the session's parallel-safe cap for the turn. Either is nil when not
	// given; the first batch sets them, and a later one that gives other
	// ones conflicts.
	ParallelToolCalls *bool
	Cap               *int
}

// Batch answers a batch of a streamed turn.
type Batch struct {
	Turn string `json:"turn"`
	// Status is StatusOpen, or StatusEnded once the turn has ended (a
	// batch sent again after the end is answered so).
	Status string `json:"status"`
	// From is the index of the batch's first call in the turn, Size how
	// many calls the batch holds (the next batch starts at From+Size, also
	// for a batch answered from the record), Calls how many the turn holds.
	From  int `json:"from"`
	Size  int `json:"size"`
	Calls int `json:"calls"`
	// ParallelToolCalls and Cap are the turn's settings, as recorded.
	ParallelToolCalls bool `json:"parallel_tool_calls"`
	Cap               int  `json:"cap"`
}

// Statuses of a streamed turn's batch answer.
const (
	StatusOpen  = "open"
	StatusEnded = "ended"
)

// AddCalls records a batch of calls of the streamed turn turn of session,
// opening the turn with its first batch, and answers once the batch is
// durable. Each call starts as soon as the schedule admits it (a
// parallel-safe call at once, an exclusive one once the calls before it
// settled). A batch sent again (its calls recorded, identical) is answered
// from the record and runs nothing, without running the hooks again.
//
// Errors: ErrInvalid (no turn id, one over 200 bytes, no calls, a call
// without an id, an id twice); ErrTooLarge (past limits.calls_per_turn);
// ErrLimited (limits.calls_in_flight_per_tenant); ErrConflict (another turn
// runs; the turn ended; the batch does not follow the calls recorded; other
// settings than the turn's); an error wrapping core.ErrTurnMismatch
// (CodeTurnIDReused: the id names a posted turn, or a recorded call differs);
// ErrHookFailed; ErrNotFound.
func (n *Node) AddCalls(ctx context.Context, tenant, session, turn string, calls []events.CallSpec, o BatchOptions) (_ Batch, err error) {
	defer code(&err)
	switch {
	case turn == "":
		return Batch{}, fmt.Errorf("%w: the turn has no id: a streamed turn is named by the harness (the provider's response id)", ErrInvalid)
	case len(turn) > 200:
		return Batch{}, fmt.Errorf("%w: turn id is %d bytes; at most 200", ErrInvalid, len(turn))
	}
	if err := n.quotas.checkCallsPerTurn(tenant, len(calls)); err != nil {
		return Batch{}, err
	}
	rec, err := n.reg.record(ctx, tenant, session)
	if err != nil {
		return Batch{}, err
	}
	// The batch's calls count as in flight until the turn completes; a
	// batch not recorded gives its count back.
	first, err := n.quotas.admitCalls(tenant, session, turn, len(calls))
	if err != nil {
		return Batch{}, err
	}
	recorded := false
	defer func() {
		// A caller gone before the answer may have had its batch
		// recorded: its count stays until the turn's watch ends it.
		unsure := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
		switch {
		case !recorded && !unsure:
			n.quotas.uncount(tenant, session, turn, len(calls), first)
		case first:
			n.turns.watch(tenant, session, turn, nil, false)
		}
	}()
	msg := actors.AddCalls{Turn: turn, Calls: calls, From: o.From, ParallelToolCalls: o.ParallelToolCalls, Cap: o.Cap, Hooked: !n.hooks.before()}
	r, err := n.addCalls(ctx, tenant, session, msg)
	if err == nil && r.NeedHooks {
		// A new batch: the hooks run over it once, before it is recorded.
		if msg.Overrides, err = n.hooks.preHooks(ctx, tenant, session, turn, rec.Agent, calls); err != nil {
			return Batch{}, err
		}
		msg.Hooked = true
		r, err = n.addCalls(ctx, tenant, session, msg)
	}
	if err != nil {
		return Batch{}, err
	}
	recorded = !r.Recorded
	status := StatusOpen
	if !r.Open {
		status = StatusEnded
	}
	return Batch{Turn: r.Turn, Status: status, From: r.From, Size: len(calls), Calls: r.Calls, ParallelToolCalls: r.ParallelToolCalls, Cap: r.Cap}, nil
}

func (n *Node) addCalls(ctx context.Context, tenant, session string, msg actors.AddCalls) (actors.BatchReply, error) {
	r, err := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan actors.BatchReply) actors.Message {
		m := msg
		m.Reply = reply
		return m
	}, func(r actors.BatchReply) error { return r.Err })
	if err != nil {
		return r, err
	}
	return r, streamErr(session, msg.Turn, r.Err)
}

// streamErr maps what the session actor refused a streamed turn's batch or
// end with to the node's errors.
func streamErr(session, turn string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, core.ErrTurnInvalid):
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	case errors.Is(err, core.ErrTurnTooLarge):
		return fmt.Errorf("%w: %v", ErrTooLarge, err)
	case errors.Is(err, core.ErrTurnMismatch):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, core.ErrTurnEnded), errors.Is(err, core.ErrBatchOrder):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	case errors.Is(err, core.ErrTurnActive):
		return fmt.Errorf("%w: %v; end it (or wait for it), then open turn %s", ErrConflict, err, turn)
	case errors.Is(err, actors.ErrBusy):
		return fmt.Errorf("%w: %v", ErrBusy, err)
	case errors.Is(err, core.ErrSessionClosed):
		return fmt.Errorf("%w: session %s is closed; open a new one", ErrConflict, session)
	case errors.Is(err, events.ErrNotFound):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return err
}

// EndTurn ends the streamed turn turn of session: no call is added after
// it. With wait it answers once every call is committed, as SubmitTurn
// does; without, once the end is durable (status running until then).
// calls, when above 0, is how many calls the harness posted: an end that
// does not match the turn is refused (ErrConflict), so a lost batch is
// not silently left out. Ending a turn that ended answers the same and
// records nothing. Errors: ErrNotFound; an error wrapping
// core.ErrTurnMismatch for a turn posted whole; ErrConflict.
func (n *Node) EndTurn(ctx context.Context, tenant, session, turn string, calls int, wait bool) (_ projections.Turn, err error) {
	defer code(&err)
	r, err := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan actors.TurnReply) actors.Message {
		return actors.EndTurn{Turn: turn, Calls: calls, Wait: wait, Reply: reply}
	}, turnErr)
	if err != nil {
		return projections.Turn{}, err
	}
	if r.Err != nil {
		if errors.Is(r.Err, events.ErrNotFound) {
			return projections.Turn{}, fmt.Errorf("%w: session %s has no turn %q: a streamed turn is opened by its first batch (POST .../turns/%s/calls)", ErrNotFound, session, turn, turn)
		}
		return projections.Turn{}, streamErr(session, turn, r.Err)
	}
	return r.Turn, nil
}
