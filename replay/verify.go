package replay

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/callsheet/callsheet/events"
)

// Problem is one thing Verify found wrong with a log, or a warning about
// something that is not wrong but worth saying (a turn still running).
type Problem struct {
	// Seq is the event the problem is about; 0 for the log as a whole.
	Seq uint64
	// Warning is true when the log is sound but incomplete: a live session
	// has a running turn, or the log holds event types this build does not
	// know.
	Warning bool
	// Message says what is wrong, naming turns, calls and attempts.
	Message string
	// at is the position in the log the problem is about (the log's length
	// for the log as a whole), and rank its order among problems at one
	// position, for sorting.
	at, rank int
}

// String renders "seq N: message", prefixed with "warning: " for a warning.
func (p Problem) String() string {
	s := p.Message
	if p.Seq > 0 {
		s = fmt.Sprintf("seq %d: %s", p.Seq, s)
	}
	if p.Warning {
		s = "warning: " + s
	}
	return s
}

// Failed reports whether any problem is not a warning.
func Failed(ps []Problem) bool {
	return slices.ContainsFunc(ps, func(p Problem) bool { return !p.Warning })
}

// Verify checks the integrity of one session's log, given in stored order,
// and returns every problem it finds, in log order (problems about the log
// as a whole last). It is VerifyLog without options: it checks the hash
// chain (chain.go), reports signatures without checking them, and checks
// that:
//
//   - sequences run 1..N without gaps or duplicates, and event ids are unique;
//   - every envelope names tenant and session;
//   - a causation, when set, names an earlier event, or a turn's request
//     key (the turn's id) from its TurnReceived on;
//   - payloads decode, and the first event is the one SessionOpened;
//   - a turn is received (TurnReceived) or opened (TurnOpened) only once
//     and only when the one before completed; a streamed turn's batches
//     (CallsAdded) come while it is open, each from the count of calls
//     before it, its TurnEnded once with that count, and its TurnCompleted
//     after the end;
//   - every call event names a received turn, a call index inside it and
//     that call's id;
//   - every call of a turn is committed exactly once, in call order, and the
//     turn then completes; the last turn may still be running (a warning);
//   - ownership epochs count up by one from 1;
//   - every ToolCallStarted follows a ToolCallRequested of the same
//     attempt, no attempt is requested twice by one owner or claimed
//     twice, and every started
//     attempt ends (ToolCallCompleted, ToolCallFailed or
//     ToolCallIndeterminate) exactly once, unless its turn is still running.
//
// Verify is pure: no clock, no I/O.
func Verify(tenant, session string, evs []events.Event) []Problem {
	return VerifyLog(tenant, session, evs, VerifyOptions{}).Problems
}

func newVerifier(tenant, session string) *verifier {
	return &verifier{
		tenant: tenant, session: session,
		ids:      map[string]uint64{},
		turns:    map[string]*turnState{},
		attempts: map[attemptKey]*attemptState{},
	}
}

type turnState struct {
	id        string
	seq       uint64
	calls     []events.CallSpec
	committed int
	completed bool
	// streamed: opened by TurnOpened; open until its TurnEnded.
	streamed, open bool
}

type attemptKey struct {
	turn    string
	index   int
	attempt int
}

type attemptState struct {
	call                    string
	requested, started, end uint64 // the seq of each step, 0 if not seen
}

type verifier struct {
	tenant, session string
	problems        []Problem
	// cur is the position of the event being checked.
	cur int
	// wantSeq is the next sequence expected.
	wantSeq  uint64
	ids      map[string]uint64
	turns    map[string]*turnState
	order    []*turnState
	attempts map[attemptKey]*attemptState
	// started lists attempts in the order they started, for the final check.
	started []attemptKey
	opened  bool
	unknown map[events.Type]bool
	// epoch and ownedSince are the latest OwnershipTaken's epoch and seq.
	epoch      uint64
	ownedSince uint64
}

func (v *verifier) add(seq uint64, format string, args ...any) {
	v.problems = append(v.problems, Problem{Seq: seq, Message: fmt.Sprintf(format, args...), at: v.cur})
}

func (v *verifier) warn(seq uint64, format string, args ...any) {
	v.problems = append(v.problems, Problem{Seq: seq, Warning: true, Message: fmt.Sprintf(format, args...), at: v.cur})
}

func (v *verifier) check(i int, ev events.Event) {
	seq := ev.Seq
	// Sequence: 1..N, no gaps, no duplicates.
	want := v.wantSeq + 1
	switch {
	case seq == want:
	case seq > want:
		if seq == want+1 {
			v.add(seq, "sequence gap: event %d is missing", want)
		} else {
			v.add(seq, "sequence gap: events %d..%d are missing", want, seq-1)
		}
	default:
		v.add(seq, "sequence goes back: event %d (%s) follows event %d; a sequence is stored twice or out of order", seq, ev.Type, v.wantSeq)
	}
	v.wantSeq = max(v.wantSeq, seq)

	// Envelope.
	if ev.Tenant != v.tenant || ev.Session != v.session {
		v.add(seq, "envelope names tenant %q session %q, want tenant %q session %q", ev.Tenant, ev.Session, v.tenant, v.session)
	}
	if ev.ID == "" {
		v.add(seq, "event has no id")
	} else if first, ok := v.ids[ev.ID]; ok {
		v.add(seq, "event id %s repeats event %d: an event was stored twice", ev.ID, first)
	}
	if ev.Causation != "" {
		_, isEvent := v.ids[ev.Causation]
		_, isTurn := v.turns[ev.Causation]
		if !isEvent && !isTurn && !receives(ev, ev.Causation) {
			v.add(seq, "causation %q names no earlier event of the session", ev.Causation)
		}
	}
	if ev.ID != "" {
		if _, ok := v.ids[ev.ID]; !ok {
			v.ids[ev.ID] = seq
		}
	}

	// Payload.
	if i == 0 && ev.Type != events.TypeSessionOpened {
		v.add(seq, "the first event is %s, want SessionOpened", ev.Type)
	}
	p, err := events.Decode(ev)
	if err != nil {
		if known(ev.Type) {
			v.add(seq, "undecodable %s payload: %v", ev.Type, err)
		} else if !v.unknown[ev.Type] {
			if v.unknown == nil {
				v.unknown = map[events.Type]bool{}
			}
			v.unknown[ev.Type] = true
			v.warn(seq, "event type %q is not known to this build: its events are not checked", ev.Type)
		}
		return
	}
	switch p := p.(type) {
	case *events.SessionOpened:
		if v.opened {
			v.add(seq, "SessionOpened again: a session opens once")
		}
		v.opened = true
	case *events.TurnReceived:
		if t := v.newTurn(seq, p.Turn); t != nil {
			if len(p.Plan) != len(p.Calls) {
				v.add(seq, "turn %s has %d calls but a plan of %d entries", p.Turn, len(p.Calls), len(p.Plan))
			}
			t.calls = p.Calls
		}
	case *events.TurnOpened:
		if t := v.newTurn(seq, p.Turn); t != nil {
			t.streamed, t.open = true, true
		}
	case *events.CallsAdded:
		v.callsAdded(seq, p)
	case *events.TurnEnded:
		t := v.turns[p.Turn]
		switch {
		case t == nil:
			v.add(seq, "TurnEnded names turn %q that was never received", p.Turn)
		case !t.streamed:
			v.add(seq, "TurnEnded names turn %s, which was posted whole (TurnReceived), not streamed", p.Turn)
		case !t.open:
			v.add(seq, "turn %s ended twice", p.Turn)
		default:
			t.open = false
			if p.Calls != len(t.calls) {
				v.add(seq, "turn %s ended with %d calls, it holds %d", p.Turn, p.Calls, len(t.calls))
			}
		}
	case *events.ToolCallRequested:
		if v.call(seq, ev.Type, p.CallRef) == nil {
			return
		}
		k := attemptKey{p.Turn, p.Index, p.Attempt}
		a := v.attempt(k, p.Call)
		if p.Attempt < 1 {
			v.add(seq, "call %s (turn %s) requests attempt %d; attempts count from 1", p.Call, p.Turn, p.Attempt)
		}
		// A new owner requests again what an earlier owner requested and
		// nobody claimed (docs/spec.md §7); anything else is a duplicate.
		if a.requested != 0 && (a.started != 0 || a.requested > v.ownedSince) {
			v.add(seq, "attempt %d of call %s (turn %s) requested again (first at seq %d)", p.Attempt, p.Call, p.Turn, a.requested)
			return
		}
		a.requested = seq
	case *events.ToolCallStarted:
		if v.call(seq, ev.Type, p.CallRef) == nil {
			return
		}
		k := attemptKey{p.Turn, p.Index, p.Attempt}
		a := v.attempt(k, p.Call)
		switch {
		case a.started != 0:
			v.add(seq, "attempt %d of call %s (turn %s) claimed twice (first at seq %d, now by worker %q)", p.Attempt, p.Call, p.Turn, a.started, p.Worker)
			return
		case a.requested == 0:
			v.add(seq, "attempt %d of call %s (turn %s) started without a ToolCallRequested for that attempt", p.Attempt, p.Call, p.Turn)
		}
		a.started = seq
		v.started = append(v.started, k)
	case *events.ToolCallCompleted:
		v.ended(seq, ev.Type, p.CallRef, p.Attempt)
	case *events.ToolCallFailed:
		v.ended(seq, ev.Type, p.CallRef, p.Attempt)
	case *events.ToolCallIndeterminate:
		v.ended(seq, ev.Type, p.CallRef, p.Attempt)
	case *events.DispatchBlocked:
		v.call(seq, ev.Type, p.CallRef)
	case *events.FileCheckpointed:
		v.call(seq, ev.Type, p.CallRef)
	case *events.RetryScheduled:
		v.call(seq, ev.Type, p.CallRef)
	case *events.CallCancelled:
		v.call(seq, ev.Type, p.CallRef)
	case *events.ResultCommitted:
		v.committed(seq, p)
	case *events.TurnCompleted:
		t := v.turns[p.Turn]
		switch {
		case t == nil:
			v.add(seq, "TurnCompleted names turn %q that was never received", p.Turn)
		case t.completed:
			v.add(seq, "turn %s completed twice", p.Turn)
		case t.open:
			v.add(seq, "turn %s completed while open: a streamed turn completes after its TurnEnded", p.Turn)
			t.completed = true
		case t.committed != len(t.calls):
			v.add(seq, "turn %s completed with %d of its %d results committed", p.Turn, t.committed, len(t.calls))
			t.completed = true
		default:
			t.completed = true
		}
	case *events.OwnershipTaken:
		if p.Node == "" || p.Epoch != v.epoch+1 {
			v.add(seq, "OwnershipTaken by %q at epoch %d follows epoch %d: epochs count up by one and name a node", p.Node, p.Epoch, v.epoch)
		}
		v.epoch, v.ownedSince = p.Epoch, seq
	case *events.RetryNoticeIssued:
		if v.turns[p.Turn] == nil {
			v.add(seq, "RetryNoticeIssued is carried by turn %q that was never received", p.Turn)
		}
	}
}

// newTurn records a turn received (TurnReceived) or opened (TurnOpened)
// at seq, or returns nil after reporting a second one of its id.
func (v *verifier) newTurn(seq uint64, id string) *turnState {
	if _, ok := v.turns[id]; ok {
		v.add(seq, "turn %s received twice", id)
		return nil
	}
	if n := len(v.order); n > 0 && !v.order[n-1].completed {
		prev := v.order[n-1]
		v.add(seq, "turn %s received while turn %s was still running (%d of %d results committed)", id, prev.id, prev.committed, len(prev.calls))
	}
	t := &turnState{id: id, seq: seq}
	v.turns[id] = t
	v.order = append(v.order, t)
	return t
}

// callsAdded checks a streamed turn's batch: an open streamed turn, the
// batch starting where the recorded calls end, a plan entry per call.
func (v *verifier) callsAdded(seq uint64, p *events.CallsAdded) {
	t := v.turns[p.Turn]
	switch {
	case t == nil:
		v.add(seq, "CallsAdded names turn %q that was never received", p.Turn)
		return
	case !t.streamed:
		v.add(seq, "CallsAdded names turn %s, which was posted whole (TurnReceived), not streamed", p.Turn)
		return
	case !t.open:
		v.add(seq, "calls added to turn %s after it ended", p.Turn)
		return
	case p.From != len(t.calls):
		v.add(seq, "calls added to turn %s from index %d; it holds %d calls", p.Turn, p.From, len(t.calls))
		return
	case len(p.Plan) != len(p.Calls):
		v.add(seq, "turn %s: a batch of %d calls with a plan of %d entries", p.Turn, len(p.Calls), len(p.Plan))
	}
	for i, e := range p.Plan {
		if e.Index != p.From+i {
			v.add(seq, "turn %s: plan entry %d of the batch names index %d, want %d", p.Turn, i, e.Index, p.From+i)
			break
		}
	}
	t.calls = append(t.calls[:len(t.calls):len(t.calls)], p.Calls...)
}

// call checks that a call event names a received turn, an index inside it
// and that call's id, and returns the turn, or nil after reporting.
func (v *verifier) call(seq uint64, typ events.Type, ref events.CallRef) *turnState {
	t := v.turns[ref.Turn]
	switch {
	case t == nil:
		v.add(seq, "%s for call %s names turn %q that was never received", typ, ref.Call, ref.Turn)
		return nil
	case ref.Index < 0 || ref.Index >= len(t.calls):
		v.add(seq, "%s for call %s names index %d; turn %s has %d calls", typ, ref.Call, ref.Index, ref.Turn, len(t.calls))
		return nil
	case t.calls[ref.Index].ID != ref.Call:
		v.add(seq, "%s names call %q at index %d of turn %s, which is call %q", typ, ref.Call, ref.Index, ref.Turn, t.calls[ref.Index].ID)
	}
	return t
}

func (v *verifier) attempt(k attemptKey, call string) *attemptState {
	a := v.attempts[k]
	if a == nil {
		a = &attemptState{call: call}
		v.attempts[k] = a
	}
	return a
}

func (v *verifier) ended(seq uint64, typ events.Type, ref events.CallRef, attempt int) {
	if v.call(seq, typ, ref) == nil {
		return
	}
	a := v.attempt(attemptKey{ref.Turn, ref.Index, attempt}, ref.Call)
	switch {
	case a.end != 0:
		v.add(seq, "attempt %d of call %s (turn %s) ends twice (first at seq %d)", attempt, ref.Call, ref.Turn, a.end)
		return
	case a.started == 0:
		v.add(seq, "%s for attempt %d of call %s (turn %s), which never started", typ, attempt, ref.Call, ref.Turn)
	}
	a.end = seq
}

func (v *verifier) committed(seq uint64, p *events.ResultCommitted) {
	t := v.call(seq, events.TypeResultCommitted, p.CallRef)
	if t == nil {
		return
	}
	switch {
	case t.completed:
		v.add(seq, "result of call %s committed after turn %s completed", p.Call, p.Turn)
	case p.Index < t.committed:
		v.add(seq, "result of call %s (index %d, turn %s) committed twice", p.Call, p.Index, p.Turn)
		return
	case p.Index > t.committed:
		v.add(seq, "result of call %s (index %d, turn %s) committed out of call order: index %d is not committed yet", p.Call, p.Index, p.Turn, t.committed)
		return
	}
	if p.Result.ID != p.Call {
		v.add(seq, "result of call %s carries id %q", p.Call, p.Result.ID)
	}
	t.committed = p.Index + 1
}

// finish reports what only the end of the log shows: turns that never
// completed and attempts that never ended.
func (v *verifier) finish() {
	for i, t := range v.order {
		if t.completed {
			continue
		}
		if i == len(v.order)-1 {
			open := ""
			if t.open {
				open = ", and still open for more calls"
			}
			v.warn(0, "turn %s still running: %d of %d results committed%s", t.id, t.committed, len(t.calls), open)
			continue
		}
		v.add(0, "turn %s (received at seq %d) never completed: %d of %d results committed", t.id, t.seq, t.committed, len(t.calls))
	}
	for _, k := range v.started {
		a := v.attempts[k]
		if a.end != 0 {
			continue
		}
		if t := v.turns[k.turn]; t != nil && !t.completed && t == v.order[len(v.order)-1] {
			continue // in flight in the running turn
		}
		v.add(0, "attempt %d of call %s (turn %s) started at seq %d and never ended", k.attempt, a.call, k.turn, a.started)
	}
}

// receives reports whether ev is the TurnReceived of turn: a turn's request
// key may be the causation of the event that records it.
func receives(ev events.Event, turn string) bool {
	if ev.Type != events.TypeTurnReceived && ev.Type != events.TypeTurnOpened {
		return false
	}
	var p struct {
		Turn string `json:"turn"`
	}
	return json.Unmarshal(ev.Data, &p) == nil && p.Turn == turn
}

// known reports whether this build decodes events of typ.
func known(typ events.Type) bool {
	_, err := events.Decode(events.Event{Type: typ, Data: []byte("{}")})
	return err == nil
}
