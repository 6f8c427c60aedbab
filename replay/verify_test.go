package replay

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

const (
	tenant  = "acme"
	session = "S1"
)

// builder hand-builds a session's log.
type builder struct{ evs []events.Event }

func (b *builder) add(typ events.Type, p any) *builder {
	seq := uint64(len(b.evs) + 1)
	b.evs = append(b.evs, events.Event{
		ID: fmt.Sprintf("E%02d", seq), Tenant: tenant, Session: session, Seq: seq,
		Time: time.Date(2025, 1, 1, 0, 0, int(seq), 0, time.UTC), Type: typ, Data: events.Payload(p),
	})
	return b
}

func ref(turn, call string, index int) events.CallRef {
	return events.CallRef{Turn: turn, Call: call, Index: index}
}

func received(turn string, calls ...string) events.TurnReceived {
	tr := events.TurnReceived{Turn: turn, Cap: 8, ParallelToolCalls: true}
	for i, c := range calls {
		tr.Calls = append(tr.Calls, events.CallSpec{ID: c, Name: "read", Arguments: json.RawMessage(`{}`)})
		tr.Plan = append(tr.Plan, events.PlanEntry{Index: i, Name: "read"})
	}
	return tr
}

func committed(r events.CallRef, outcome events.Outcome) events.ResultCommitted {
	return events.ResultCommitted{CallRef: r, Result: events.Result{ID: r.Call, Name: "read", Outcome: outcome, Content: []events.Part{}, Attempts: 1}}
}

// goodLog is a sound log of two turns: one with a run call and a blocked
// call, one with a replay-safe call retried once.
func goodLog() []events.Event {
	a, b, c := ref("t1", "a", 0), ref("t1", "b", 1), ref("t2", "c", 0)
	var l builder
	l.add(events.TypeSessionOpened, events.SessionOpened{Workspace: "w"}).
		add(events.TypeTurnReceived, received("t1", "a", "b")).
		add(events.TypeDispatchBlocked, events.DispatchBlocked{CallRef: b, Name: "read", Category: events.BlockInvalidArguments}).
		add(events.TypeToolCallRequested, events.ToolCallRequested{CallRef: a, Name: "read", Attempt: 1}).
		add(events.TypeToolCallStarted, events.ToolCallStarted{CallRef: a, Attempt: 1, Worker: "w1"}).
		add(events.TypeToolCallCompleted, events.ToolCallCompleted{CallRef: a, Attempt: 1}).
		add(events.TypeResultCommitted, committed(a, events.OutcomeOK)).
		add(events.TypeResultCommitted, committed(b, events.OutcomeBlocked)).
		add(events.TypeTurnCompleted, events.TurnCompleted{Turn: "t1"}).
		add(events.TypeTurnReceived, received("t2", "c")).
		add(events.TypeToolCallRequested, events.ToolCallRequested{CallRef: c, Name: "read", Attempt: 1}).
		add(events.TypeToolCallStarted, events.ToolCallStarted{CallRef: c, Attempt: 1, Worker: "w1"}).
		add(events.TypeToolCallFailed, events.ToolCallFailed{CallRef: c, Attempt: 1, Error: "flaky"}).
		add(events.TypeRetryScheduled, events.RetryScheduled{CallRef: c, Attempt: 2}).
		add(events.TypeToolCallRequested, events.ToolCallRequested{CallRef: c, Name: "read", Attempt: 2}).
		add(events.TypeToolCallStarted, events.ToolCallStarted{CallRef: c, Attempt: 2, Worker: "w2"}).
		add(events.TypeToolCallCompleted, events.ToolCallCompleted{CallRef: c, Attempt: 2}).
		add(events.TypeResultCommitted, committed(c, events.OutcomeOK)).
		add(events.TypeTurnCompleted, events.TurnCompleted{Turn: "t2"})
	return l.evs
}

// index returns the position of the n-th (from 1) event of typ.
func index(evs []events.Event, typ events.Type, n int) int {
	for i, ev := range evs {
		if ev.Type == typ {
			if n--; n == 0 {
				return i
			}
		}
	}
	panic(fmt.Sprintf("no %s #%d", typ, n))
}

// renumber gives the events the sequences 1..N, as a log with an event
// removed or added but no gap would have.
func renumber(evs []events.Event) []events.Event {
	for i := range evs {
		evs[i].Seq = uint64(i + 1)
	}
	return evs
}

func without(evs []events.Event, i int) []events.Event { return renumber(slices.Delete(evs, i, i+1)) }

func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		name       string
		edit       func([]events.Event) []events.Event
		want       []string // each must be in a problem, in this order
		wantFailed bool
	}{
		{name: "sound log", edit: func(e []events.Event) []events.Event { return e }},
		{
			// A read-only, safe call's outcome may carry its claim.
			name: "claim carried by the outcome",
			edit: func(e []events.Event) []events.Event {
				e = without(e, index(e, events.TypeToolCallStarted, 1))
				i := index(e, events.TypeToolCallCompleted, 1)
				e[i].Data = events.Payload(events.ToolCallCompleted{CallRef: ref("t1", "a", 0), Attempt: 1, Worker: "w1"})
				return e
			},
		},
		{
			name: "claimed by a ToolCallStarted and again by the outcome",
			edit: func(e []events.Event) []events.Event {
				i := index(e, events.TypeToolCallCompleted, 1)
				e[i].Data = events.Payload(events.ToolCallCompleted{CallRef: ref("t1", "a", 0), Attempt: 1, Worker: "w2"})
				return e
			},
			want:       []string{`seq 6: attempt 1 of call a (turn t1) claimed twice (first at seq 5, now by worker "w2" with its outcome)`},
			wantFailed: true,
		},
		{
			name: "outcome carrying a claim without a request",
			edit: func(e []events.Event) []events.Event {
				e = without(e, index(e, events.TypeToolCallStarted, 1))
				e = without(e, index(e, events.TypeToolCallRequested, 1))
				i := index(e, events.TypeToolCallCompleted, 1)
				e[i].Data = events.Payload(events.ToolCallCompleted{CallRef: ref("t1", "a", 0), Attempt: 1, Worker: "w1"})
				return e
			},
			want:       []string{"seq 4: attempt 1 of call a (turn t1) started without a ToolCallRequested"},
			wantFailed: true,
		},
		{name: "empty log", edit: func([]events.Event) []events.Event { return nil }, want: []string{"no events"}, wantFailed: true},
		{
			name:       "sequence gap",
			edit:       func(e []events.Event) []events.Event { return slices.Delete(e, 3, 4) },
			want:       []string{"seq 5: sequence gap: event 4 is missing", "seq 5: attempt 1 of call a (turn t1) started without a ToolCallRequested"},
			wantFailed: true,
		},
		{
			name: "wide gap",
			edit: func(e []events.Event) []events.Event {
				e[len(e)-1].Seq = 40
				return e
			},
			want:       []string{"seq 40: sequence gap: events 19..39 are missing"},
			wantFailed: true,
		},
		{
			name:       "duplicate event",
			edit:       func(e []events.Event) []events.Event { return slices.Insert(e, 9, e[8]) },
			want:       []string{"seq 9: sequence goes back", "id E09 repeats event 9", "turn t1 completed twice"},
			wantFailed: true,
		},
		{
			name: "foreign envelope",
			edit: func(e []events.Event) []events.Event {
				e[2].Tenant = "globex"
				return e
			},
			want:       []string{`seq 3: envelope names tenant "globex"`},
			wantFailed: true,
		},
		{
			name: "causation names an earlier event or a turn",
			edit: func(e []events.Event) []events.Event {
				e[1].Causation = "t1"
				e[3].Causation = e[1].ID
				return e
			},
		},
		{
			name: "causation names a later event",
			edit: func(e []events.Event) []events.Event {
				e[3].Causation = e[4].ID
				return e
			},
			want:       []string{`seq 4: causation "E05" names no earlier event`},
			wantFailed: true,
		},
		{
			name: "first event is not SessionOpened",
			edit: func(e []events.Event) []events.Event { return without(e, 0) },
			want: []string{"the first event is TurnReceived"}, wantFailed: true,
		},
		{
			name: "undecodable payload",
			edit: func(e []events.Event) []events.Event {
				e[3].Data = json.RawMessage(`{"attempt": "one"}`)
				return e
			},
			want:       []string{"seq 4: undecodable ToolCallRequested payload", "started without a ToolCallRequested"},
			wantFailed: true,
		},
		{
			name: "unknown type is a warning",
			edit: func(e []events.Event) []events.Event {
				ev := e[2]
				ev.ID, ev.Type, ev.Data = "X", "SomethingNew", json.RawMessage(`{}`)
				return renumber(slices.Insert(e, 3, ev))
			},
			want: []string{"warning: seq 4: event type \"SomethingNew\" is not known"},
		},
		{
			name: "commits out of call order",
			edit: func(e []events.Event) []events.Event {
				i := index(e, events.TypeResultCommitted, 1)
				e[i].Data, e[i+1].Data = e[i+1].Data, e[i].Data
				return e
			},
			want:       []string{"seq 7: result of call b (index 1, turn t1) committed out of call order", "seq 9: turn t1 completed with 1 of its 2 results"},
			wantFailed: true,
		},
		{
			name: "commit twice",
			edit: func(e []events.Event) []events.Event {
				i := index(e, events.TypeResultCommitted, 1)
				dup := e[i]
				dup.ID = "dup"
				return renumber(slices.Insert(e, i+1, dup))
			},
			want:       []string{"seq 8: result of call a (index 0, turn t1) committed twice"},
			wantFailed: true,
		},
		{
			name:       "missing commit",
			edit:       func(e []events.Event) []events.Event { return without(e, index(e, events.TypeResultCommitted, 2)) },
			want:       []string{"turn t1 completed with 1 of its 2 results committed"},
			wantFailed: true,
		},
		{
			name:       "turn never completed",
			edit:       func(e []events.Event) []events.Event { return without(e, index(e, events.TypeTurnCompleted, 1)) },
			want:       []string{"seq 9: turn t2 received while turn t1 was still running", "turn t1 (received at seq 2) never completed"},
			wantFailed: true,
		},
		{
			name: "last turn still running is a warning",
			edit: func(e []events.Event) []events.Event { return e[:index(e, events.TypeToolCallStarted, 3)+1] },
			want: []string{"warning: turn t2 still running: 0 of 1 results committed"},
		},
		{
			name:       "started without request",
			edit:       func(e []events.Event) []events.Event { return without(e, index(e, events.TypeToolCallRequested, 1)) },
			want:       []string{"seq 4: attempt 1 of call a (turn t1) started without a ToolCallRequested"},
			wantFailed: true,
		},
		{
			name: "started with another attempt than requested",
			edit: func(e []events.Event) []events.Event {
				i := index(e, events.TypeToolCallStarted, 1)
				e[i].Data = events.Payload(events.ToolCallStarted{CallRef: ref("t1", "a", 0), Attempt: 2})
				return e
			},
			want:       []string{"attempt 2 of call a (turn t1) started without a ToolCallRequested", "ToolCallCompleted for attempt 1 of call a (turn t1), which never started"},
			wantFailed: true,
		},
		{
			name: "claimed twice",
			edit: func(e []events.Event) []events.Event {
				i := index(e, events.TypeToolCallStarted, 1)
				dup := e[i]
				dup.ID, dup.Data = "dup", events.Payload(events.ToolCallStarted{CallRef: ref("t1", "a", 0), Attempt: 1, Worker: "w9"})
				return renumber(slices.Insert(e, i+1, dup))
			},
			want:       []string{`seq 6: attempt 1 of call a (turn t1) claimed twice (first at seq 5, now by worker "w9")`},
			wantFailed: true,
		},
		{
			name: "requested twice",
			edit: func(e []events.Event) []events.Event {
				i := index(e, events.TypeToolCallRequested, 1)
				dup := e[i]
				dup.ID = "dup"
				return renumber(slices.Insert(e, i+1, dup))
			},
			want:       []string{"seq 5: attempt 1 of call a (turn t1) requested again (first at seq 4)"},
			wantFailed: true,
		},
		{
			name:       "attempt never ends",
			edit:       func(e []events.Event) []events.Event { return without(e, index(e, events.TypeToolCallCompleted, 1)) },
			want:       []string{"attempt 1 of call a (turn t1) started at seq 5 and never ended"},
			wantFailed: true,
		},
		{
			name: "attempt ends twice",
			edit: func(e []events.Event) []events.Event {
				i := index(e, events.TypeToolCallCompleted, 1)
				dup := e[i]
				dup.ID, dup.Type = "dup", events.TypeToolCallIndeterminate
				return renumber(slices.Insert(e, i+1, dup))
			},
			want:       []string{"seq 7: attempt 1 of call a (turn t1) ends twice (first at seq 6)"},
			wantFailed: true,
		},
		{
			name: "call event of an unknown turn",
			edit: func(e []events.Event) []events.Event {
				e[2].Data = events.Payload(events.DispatchBlocked{CallRef: ref("t9", "b", 1)})
				return e
			},
			want:       []string{`seq 3: DispatchBlocked for call b names turn "t9" that was never received`},
			wantFailed: true,
		},
		{
			name: "call id does not match the index",
			edit: func(e []events.Event) []events.Event {
				e[3].Data = events.Payload(events.ToolCallRequested{CallRef: ref("t1", "b", 0), Attempt: 1})
				return e
			},
			want:       []string{`seq 4: ToolCallRequested names call "b" at index 0 of turn t1, which is call "a"`},
			wantFailed: true,
		},
		{
			name: "index out of range",
			edit: func(e []events.Event) []events.Event {
				e[2].Data = events.Payload(events.DispatchBlocked{CallRef: ref("t1", "b", 5)})
				return e
			},
			want:       []string{"seq 3: DispatchBlocked for call b names index 5; turn t1 has 2 calls"},
			wantFailed: true,
		},
		{
			name: "turn received twice",
			edit: func(e []events.Event) []events.Event {
				i := index(e, events.TypeTurnReceived, 2)
				e[i].Data = events.Payload(received("t1", "a", "b"))
				return e
			},
			want:       []string{"seq 10: turn t1 received twice"},
			wantFailed: true,
		},
	} {
		// Each edit is checked on a log rewritten consistently, its chain
		// recomputed (so only these checks can find it), and on an old,
		// unchained log, which verifies the same with one warning more.
		for _, chained := range []bool{true, false} {
			name := tc.name + "/chained"
			if !chained {
				name = tc.name + "/unchained"
			}
			t.Run(name, func(t *testing.T) {
				evs := tc.edit(goodLog())
				if chained {
					evs = chain(evs)
				}
				ps := Verify(tenant, session, evs)
				var got []string
				for _, p := range ps {
					if !chained && len(evs) > 0 && p.Warning && strings.Contains(p.Message, "the log is unchained") {
						continue
					}
					got = append(got, p.String())
				}
				if !chained && len(evs) > 0 && len(got) == len(ps) {
					t.Fatalf("an unchained log verified without the unchained warning: %v", ps)
				}
				all := strings.Join(got, "\n")
				at := 0
				for _, w := range tc.want {
					i := slices.IndexFunc(got[at:], func(s string) bool { return strings.Contains(s, w) })
					if i < 0 {
						t.Fatalf("problems:\n%s\nwant, after the %d-th, one holding %q", all, at, w)
					}
					at += i + 1
				}
				if len(tc.want) == 0 && len(got) != 0 {
					t.Fatalf("problems:\n%s\nwant none", all)
				}
				if Failed(ps) != tc.wantFailed {
					t.Fatalf("Failed=%v, want %v; problems:\n%s", Failed(ps), tc.wantFailed, all)
				}
			})
		}
	}
}

// chain sets every event's link as the session actor does: the hash of the
// event before it, the genesis link for the first.
func chain(evs []events.Event) []events.Event {
	prev := events.Genesis(tenant, session)
	for i := range evs {
		evs[i].Prev = prev
		h, err := events.Hash(evs[i])
		if err != nil {
			panic(err)
		}
		prev = h
	}
	return evs
}
