package actors

import (
	"fmt"
	"time"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
)

// Streamed turns (docs/spec.md §8): the session actor records each batch
// of calls as it arrives (core.AddCalls), so Progress requests a call the
// moment the schedule admits it, and ends the turn when the harness says
// so (core.EndTurn) or when no batch came within the session's
// StreamTimeout (a timer, armed from the last batch's recorded time, so it
// holds across a restart).

type (
	// AddCalls records one batch of a streamed turn's calls; the first
	// batch of a turn id opens it. Reply gets the batch's answer once it is
	// durable, or once the record is for a batch sent again.
	AddCalls struct {
		Turn  string
		Calls []events.CallSpec
		// From is where the harness says the batch starts, -1 when it does
		// not say.
		From int
		// ParallelToolCalls and Cap are the harness's settings for the
		// turn, when it gave them: false makes every call run alone, and
		// Cap lowers the session's parallel-safe cap (never raises it).
		ParallelToolCalls *bool
		Cap               *int
		// Overrides are the middleware's verdicts by index in the batch.
		Overrides map[int]core.Override
		// Hooked says the before-tool hooks ran over the batch (Overrides
		// are their verdicts) or the node has none; a batch to record that
		// is not Hooked is answered NeedHooks and records nothing.
		Hooked bool
		Reply  chan BatchReply
	}
	// EndTurn ends a streamed turn and answers as SubmitTurn does: once
	// the end is durable (Wait false) or the turn complete (Wait true).
	// Calls, when above 0, is how many calls the harness sent.
	EndTurn struct {
		Turn  string
		Calls int
		Wait  bool
		Reply chan TurnReply
	}
	// WaitTurn answers a turn once it is complete and durable, as
	// SubmitTurn with Wait does, and records nothing: an unknown turn is
	// answered at once, not Found. The node waits for a streamed turn's
	// completion with it.
	WaitTurn struct {
		ID    string
		Reply chan TurnReply
	}
	// streamDue fires when a streamed turn may have been open for its
	// timeout since its last batch (seq).
	streamDue struct {
		turn string
		seq  uint64
	}
)

// BatchReply answers AddCalls.
type BatchReply struct {
	// Turn is the turn's id; From is the index of the batch's first call,
	// Calls how many calls the turn holds. Open is false once the turn has
	// ended. ParallelToolCalls and Cap are the turn's settings.
	Turn              string
	From, Calls       int
	Open              bool
	ParallelToolCalls bool
	Cap               int
	// Recorded is true for a batch that was recorded before: the answer
	// is the record's, and nothing was recorded now.
	Recorded bool
	// NeedHooks: the batch is new and was not Hooked; send it again with
	// the hooks' verdicts.
	NeedHooks bool
	Err       error
}

func (m AddCalls) refuse(err error) { reply(m.Reply, BatchReply{Err: err}) }

func (m AddCalls) handle(s *Session) {
	if !s.state.Opened {
		m.refuse(fmt.Errorf("%w: session %s was never opened", events.ErrNotFound, s.id))
		return
	}
	par, cap := s.settings.ParallelToolCalls, s.settings.Cap
	if m.ParallelToolCalls != nil && !*m.ParallelToolCalls {
		par = false
	}
	if m.Cap != nil && *m.Cap < cap {
		cap = *m.Cap
	}
	plan := s.settings.Plan
	plan.Overrides = m.Overrides
	drafts, err := core.AddCalls(s.state, core.BatchInput{
		Turn: m.Turn, Calls: m.Calls, From: m.From,
		ParallelToolCalls: par, Cap: cap, Settings: m.ParallelToolCalls != nil || m.Cap != nil,
		MaxCalls: s.settings.CallsPerTurn, Plan: plan,
	})
	switch {
	case err != nil:
		m.refuse(err)
	case len(drafts) == 0:
		// Sent again: answered from the record, once it is durable.
		s.watch(func() bool {
			r := s.batchView(m.Turn, m.Calls[0].ID)
			r.Recorded = true
			reply(m.Reply, r)
			return true
		}, m.refuse)
	case !m.Hooked:
		reply(m.Reply, BatchReply{Turn: m.Turn, NeedHooks: true})
	default:
		first := m.Calls[0].ID
		s.decide(drafts, func() { reply(m.Reply, s.batchView(m.Turn, first)) }, m.refuse)
		s.progress()
	}
}

// batchView answers a batch whose first call is first.
func (s *Session) batchView(turn, first string) BatchReply {
	t, ok := s.state.Turn(turn)
	if !ok {
		return BatchReply{Err: fmt.Errorf("%w: turn %q", events.ErrNotFound, turn)}
	}
	r := BatchReply{Turn: t.ID, Calls: len(t.Calls), Open: t.Open, ParallelToolCalls: t.ParallelToolCalls, Cap: t.Cap}
	for i, c := range t.Calls {
		if c.ID == first {
			r.From = i
			break
		}
	}
	return r
}

func (m WaitTurn) refuse(err error) { reply(m.Reply, TurnReply{Err: err}) }

func (m WaitTurn) handle(s *Session) {
	if _, ok := s.state.Turn(m.ID); !ok {
		reply(m.Reply, TurnReply{})
		return
	}
	s.waiters[m.ID] = append(s.waiters[m.ID], SubmitTurn{ID: m.ID, Wait: true, Reply: m.Reply})
	s.notifyWaiters(m.ID)
}

func (m EndTurn) refuse(err error) { reply(m.Reply, TurnReply{Err: err}) }

func (m EndTurn) handle(s *Session) {
	if _, ok := s.state.Turn(m.Turn); !ok {
		m.refuse(fmt.Errorf("%w: turn %q of session %s", events.ErrNotFound, m.Turn, s.id))
		return
	}
	drafts, err := core.EndTurn(s.state, core.EndInput{Turn: m.Turn, Reason: events.EndedByHarness, Calls: m.Calls})
	if err != nil {
		m.refuse(err)
		return
	}
	id := m.Turn
	switch {
	case m.Wait:
		// Answered once the turn is complete and durable (notifyWaiters).
		s.waiters[id] = append(s.waiters[id], SubmitTurn{ID: id, Wait: true, Reply: m.Reply})
		if len(drafts) == 0 {
			s.notifyWaiters(id)
		}
	case len(drafts) == 0:
		s.watch(func() bool { reply(m.Reply, s.turnView(id)); return true }, m.refuse)
	}
	if len(drafts) > 0 {
		after := func() {}
		if !m.Wait {
			after = func() { reply(m.Reply, s.turnView(id)) }
		}
		s.decide(drafts, after, m.refuse)
		s.progress()
	}
}

// A timer's message has no caller; the next owner re-arms it from the log.
func (m streamDue) refuse(error) {}

func (m streamDue) handle(s *Session) {
	delete(s.timers, streamKey)
	t := s.state.Active()
	if t == nil || t.ID != m.turn || !t.Open {
		return
	}
	if t.BatchSeq != m.seq || s.deps.Clock.Now().Before(t.BatchAt.Add(s.settings.StreamTimeout)) {
		s.armStream() // a batch came since, or the clock was early
		return
	}
	drafts, err := core.EndTurn(s.state, core.EndInput{Turn: t.ID, Reason: events.EndedByTimeout})
	if err == nil {
		s.decide(drafts, nil, nil)
		s.progress()
	}
}

// streamKey names the stream timer in Session.timers: a session has at
// most one open streamed turn.
const streamKey = "stream"

// armStream keeps one timer for the open streamed turn, due its timeout
// after its last batch was recorded, and none when no turn is open.
func (s *Session) armStream() {
	t := s.state.Active()
	old, armed := s.timers[streamKey]
	if t == nil || !t.Streamed || !t.Open || s.settings.StreamTimeout <= 0 {
		if armed {
			old.Stop()
			delete(s.timers, streamKey)
		}
		return
	}
	if armed && s.streamSeq == t.BatchSeq {
		return
	}
	if armed {
		old.Stop()
	}
	wait := max(t.BatchAt.Add(s.settings.StreamTimeout).Sub(s.deps.Clock.Now()), 0)
	e, pid, msg := s.engine, s.pid, streamDue{turn: t.ID, seq: t.BatchSeq}
	s.timers[streamKey] = time.AfterFunc(wait, func() { e.Send(pid, msg) })
	s.streamSeq = t.BatchSeq
}
