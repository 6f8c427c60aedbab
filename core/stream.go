package core

import (
	"errors"
	"fmt"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/permission"
	"github.com/callsheet/callsheet/tool"
)

// Streamed turns (docs/spec.md §8): the harness posts a turn's calls in
// batches while the model still streams, and ends the turn when the
// model's response is complete. In the log a streamed turn is TurnOpened,
// one CallsAdded per batch, and TurnEnded; a posted turn stays one
// TurnReceived. Everything after the record is the same for both: the
// schedule admits each call as it arrives (Schedule.Append), Progress
// requests, commits in call order, and completes the turn once it has
// ended and every call is committed.

// Errors of the streamed-turn decisions.
var (
	// ErrTurnEnded is returned for new calls to a streamed turn that has
	// ended: its calls are fixed.
	ErrTurnEnded = errors.New("core: the streamed turn has ended")
	// ErrBatchOrder is returned for a batch that does not follow the
	// calls recorded (its from is not their count), and for an end whose
	// count of calls is not the turn's: a batch was lost or reordered.
	ErrBatchOrder = errors.New("core: the batch does not follow the recorded calls")
	// ErrTurnTooLarge is returned for a batch that would take its turn
	// past the calls a turn may hold.
	ErrTurnTooLarge = errors.New("core: too many calls in one turn")
)

// BatchInput is one batch of a streamed turn as the harness sent it, plus
// the settings in force.
type BatchInput struct {
	Turn  string
	Calls []events.CallSpec
	// From is where the harness says the batch starts (the index of its
	// first call in the turn), or -1 when it does not say.
	From int
	// ParallelToolCalls and Cap are the turn's settings, the harness's
	// wishes already combined with the session's (the shell's work): they
	// open the turn, and a later batch that carries other ones conflicts.
	// Settings marks them as given by the harness; without it a later
	// batch is not checked against them.
	ParallelToolCalls bool
	Cap               int
	Settings          bool
	// MaxCalls bounds the calls the turn may hold (limits.calls_per_turn);
	// 0 for no bound.
	MaxCalls int
	// Plan is the pre-phase's input; Overrides are by index in the batch.
	Plan PlanInput
}

// AddCalls decides the record of one batch of a streamed turn: TurnOpened
// and its CallsAdded when no turn of that id exists (the first batch), a
// CallsAdded when the turn is open. Each batch is planned as it arrives
// (the same Plan as a posted turn's, with the session's grants and the
// turn's escalations so far), and Progress then requests what the schedule
// admits.
//
// A batch every call of which is recorded, in the recorded order and
// identical (as Repeat compares calls), decides nothing: the caller
// answers from the record. Errors: ErrSessionClosed; ErrTurnInvalid (no
// turn id, no calls, a call without an id, a call id twice); ErrTurnActive
// (another turn runs); ErrTurnMismatch (the id names a posted turn, a call
// id recorded with another tool or arguments, a batch that mixes recorded
// and new calls, or settings other than the turn's); ErrTurnEnded (new
// calls after the end); ErrBatchOrder (From is not where the batch goes);
// ErrTurnTooLarge.
func AddCalls(s *Session, in BatchInput) ([]Draft, error) {
	if s.Closed {
		return nil, ErrSessionClosed
	}
	if in.Turn == "" {
		return nil, fmt.Errorf("%w: the turn has no id", ErrTurnInvalid)
	}
	if len(in.Calls) == 0 {
		return nil, fmt.Errorf("%w: the batch has no calls; post each call once the model has streamed it whole", ErrTurnInvalid)
	}
	seen := map[string]bool{}
	for i, c := range in.Calls {
		if c.ID == "" {
			return nil, fmt.Errorf("%w: calls[%d] has no id", ErrTurnInvalid, i)
		}
		if seen[c.ID] {
			return nil, fmt.Errorf("%w: calls[%d] repeats call id %q; every call of a turn needs its own id", ErrTurnInvalid, i, c.ID)
		}
		seen[c.ID] = true
	}
	calls := make([]events.CallSpec, len(in.Calls))
	for i, c := range in.Calls {
		calls[i] = recordable(c)
	}
	in.Calls = calls
	t, ok := s.turns[in.Turn]
	if !ok {
		return openTurn(s, in)
	}
	if !t.Streamed {
		return nil, fmt.Errorf("%w (turn id %q, session %s): it names a turn posted whole (POST /v1/sessions/{s}/turns), whose calls are fixed; stream the calls of a new turn under a new turn id",
			ErrTurnMismatch, in.Turn, s.ID)
	}
	if in.Settings && (in.ParallelToolCalls != t.ParallelToolCalls || max(in.Cap, 1) != t.Cap) {
		return nil, fmt.Errorf("%w (turn id %q, session %s): the turn was opened with parallel_tool_calls %t and cap %d, this batch asks for %t and %d; the first batch sets them, later ones leave them out or repeat them",
			ErrTurnMismatch, in.Turn, s.ID, t.ParallelToolCalls, t.Cap, in.ParallelToolCalls, max(in.Cap, 1))
	}
	repeat, err := batchRecorded(s, t, in)
	if err != nil || repeat {
		return nil, err
	}
	if !t.Open {
		return nil, fmt.Errorf("%w: turn %s of session %s ended (%s) with %s; its calls are fixed: post these under a new turn once it completes",
			ErrTurnEnded, t.ID, s.ID, endedWhy(t.EndReason), plural(len(t.Calls), "call"))
	}
	if in.From >= 0 && in.From != len(t.Calls) {
		return nil, fmt.Errorf("%w: turn %s holds %s and this batch says it starts at call %d; post the batches in order, each from the count of calls before it (a batch that was lost must be sent again first)",
			ErrBatchOrder, t.ID, plural(len(t.Calls), "call"), in.From)
	}
	if in.MaxCalls > 0 && len(t.Calls)+len(calls) > in.MaxCalls {
		return nil, fmt.Errorf("%w: turn %s holds %s and this batch adds %d; a turn holds at most %d (limits.calls_per_turn): end this turn and post the rest in the next",
			ErrTurnTooLarge, t.ID, plural(len(t.Calls), "call"), len(calls), in.MaxCalls)
	}
	return []Draft{batch(s, t.ID, len(t.Calls), escalated(t.Plan), in)}, nil
}

// openTurn decides TurnOpened and the first batch's CallsAdded.
func openTurn(s *Session, in BatchInput) ([]Draft, error) {
	if s.active != nil {
		return nil, fmt.Errorf("%w (turn %s): a streamed turn opens once the session's running turn completes", ErrTurnActive, s.active.ID)
	}
	if in.From > 0 {
		return nil, fmt.Errorf("%w: turn %s is not recorded and this batch says it starts at call %d; the first batch starts at 0 (send the earlier batches first)",
			ErrBatchOrder, in.Turn, in.From)
	}
	if in.MaxCalls > 0 && len(in.Calls) > in.MaxCalls {
		return nil, fmt.Errorf("%w: the batch has %d calls; a turn holds at most %d (limits.calls_per_turn)", ErrTurnTooLarge, len(in.Calls), in.MaxCalls)
	}
	return []Draft{
		{Type: events.TypeTurnOpened, Payload: events.TurnOpened{Turn: in.Turn, ParallelToolCalls: in.ParallelToolCalls, Cap: max(in.Cap, 1)}},
		batch(s, in.Turn, 0, false, in),
	}, nil
}

// batch is the CallsAdded of in's calls at from, planned with the
// session's grants and whether an earlier call of the turn escalated.
func batch(s *Session, turn string, from int, escalatedBefore bool, in BatchInput) Draft {
	p := in.Plan
	p.Policy.Grants = append(append([]permission.Grant(nil), p.Policy.Grants...), s.grants...)
	p.WorkspaceAway = s.WorkspaceAway
	p.EscalatedBefore = escalatedBefore
	plan := Plan(in.Calls, p)
	for i := range plan {
		plan[i].Index = from + i
	}
	return Draft{Type: events.TypeCallsAdded, Payload: events.CallsAdded{Turn: turn, From: from, Calls: in.Calls, Plan: plan}}
}

// escalated reports whether a call of plan escalated and was admitted: a
// turn counts escalation once (docs/spec.md §6).
func escalated(plan []events.PlanEntry) bool {
	for _, e := range plan {
		if e.Escalate && e.Blocked == "" {
			return true
		}
	}
	return false
}

// batchRecorded reports whether every call of in is recorded in t at
// consecutive places and is the same call (a batch sent again), or none
// is (a new batch); anything between is ErrTurnMismatch, and so is a
// repeat whose From is not where it was recorded.
func batchRecorded(s *Session, t *Turn, in BatchInput) (bool, error) {
	at := map[string]int{}
	for i, c := range t.Calls {
		at[c.ID] = i
	}
	first, ok := at[in.Calls[0].ID]
	for k, c := range in.Calls {
		j, rec := at[c.ID]
		differs := func(format string, args ...any) error {
			return fmt.Errorf("%w (turn id %q, session %s): %s; a batch is recorded whole: send exactly a recorded batch again to have it answered from the record, or only calls the turn does not hold",
				ErrTurnMismatch, t.ID, s.ID, fmt.Sprintf(format, args...))
		}
		switch {
		case rec != ok && rec:
			return false, differs("calls[%d] (id %q) is recorded as call %d of the turn and calls[0] (id %q) is not recorded", k, c.ID, j, in.Calls[0].ID)
		case rec != ok:
			return false, differs("calls[0] (id %q) is recorded as call %d of the turn and calls[%d] (id %q) is not recorded", in.Calls[0].ID, first, k, c.ID)
		case !rec:
			continue
		case j != first+k:
			return false, differs("calls[%d] (id %q) is recorded as call %d, not %d", k, c.ID, j, first+k)
		case c.Name != t.Calls[j].Name:
			return false, differs("calls[%d] (id %q) names tool %q, the recorded call %q", k, c.ID, c.Name, t.Calls[j].Name)
		case !tool.SameArguments(c.Arguments, t.Calls[j].Arguments):
			return false, differs("calls[%d] (id %q) has other arguments than the recorded call", k, c.ID)
		}
	}
	if ok && in.From >= 0 && in.From != first {
		return false, fmt.Errorf("%w: this batch was recorded from call %d of turn %s, not from %d as it says", ErrBatchOrder, first, t.ID, in.From)
	}
	return ok, nil
}

func endedWhy(reason string) string {
	switch reason {
	case events.EndedByTimeout:
		return "no batch came within turns.stream_timeout"
	case events.EndedByCancel:
		return "the harness cancelled it"
	}
	return "the harness ended it"
}

// EndInput ends a streamed turn.
type EndInput struct {
	Turn string
	// Reason is events.EndedByHarness, EndedByTimeout or EndedByCancel.
	Reason string
	// Calls, when above 0, is how many calls the harness says it sent: an
	// end that does not match the record is refused (a batch was lost).
	Calls int
}

// EndTurn decides TurnEnded for an open streamed turn: no call is added
// after it, and the turn completes once every call is committed. An end
// of a turn that has ended decides nothing (the caller answers as for the
// turn). Errors: ErrTurnMismatch for a turn posted whole; ErrBatchOrder
// when in.Calls is not the number of calls recorded; ErrTurnInvalid for an
// unknown turn.
func EndTurn(s *Session, in EndInput) ([]Draft, error) {
	t, ok := s.turns[in.Turn]
	if !ok {
		return nil, fmt.Errorf("%w: session %s has no turn %q", ErrTurnInvalid, s.ID, in.Turn)
	}
	if !t.Streamed {
		return nil, fmt.Errorf("%w (turn id %q, session %s): it names a turn posted whole, which has no stream to end; GET the turn for its answer",
			ErrTurnMismatch, in.Turn, s.ID)
	}
	if in.Calls > 0 && in.Calls != len(t.Calls) {
		return nil, fmt.Errorf("%w: turn %s holds %s and the end says %d were sent; send the missing batches (each from the count before it), then end again",
			ErrBatchOrder, t.ID, plural(len(t.Calls), "call"), in.Calls)
	}
	if !t.Open {
		return nil, nil
	}
	causation := ""
	if in.Reason == events.EndedByTimeout {
		causation = t.BatchID
	}
	return []Draft{{Type: events.TypeTurnEnded, Causation: causation, Payload: events.TurnEnded{Turn: t.ID, Reason: in.Reason, Calls: len(t.Calls)}}}, nil
}
