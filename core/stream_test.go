package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/quick"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

func (h *harness) lookup() PlanInput {
	return PlanInput{Lookup: func(name string) (*tool.Tool, bool) { t, ok := h.tools[name]; return t, ok }}
}

// add posts one batch of streamed turn id and drives the session.
func (h *harness) add(id string, calls ...events.CallSpec) {
	h.t.Helper()
	d, err := AddCalls(h.s, BatchInput{Turn: id, Calls: calls, From: -1, ParallelToolCalls: true, Cap: 8, Plan: h.lookup()})
	if err != nil {
		h.t.Fatal(err)
	}
	h.apply(d)
	h.drive()
}

func (h *harness) end(id string) {
	h.t.Helper()
	d, err := EndTurn(h.s, EndInput{Turn: id, Reason: events.EndedByHarness})
	if err != nil {
		h.t.Fatal(err)
	}
	h.apply(d)
	h.drive()
}

// types lists the log's event types from seq on.
func (h *harness) types(from int) []events.Type {
	var out []events.Type
	for _, ev := range h.log[from:] {
		out = append(out, ev.Type)
	}
	return out
}

func (h *harness) finish(r events.ToolCallRequested) {
	h.t.Helper()
	h.claimAndFinish(r, Outcome{OK: true}, Retry{MaxAttempts: 1})
}

func (h *harness) completed(id string) bool {
	t, ok := h.s.Turn(id)
	return ok && t.Completed
}

// TestStreamedCallRunsBeforeTheNextBatchArrives: the first parallel-safe
// call of a streamed turn is requested in the decision that records its
// batch, caused by that batch, before the second batch exists; the turn
// completes only once it has ended and every call is committed.
func TestStreamedCallRunsBeforeTheNextBatchArrives(t *testing.T) {
	h := newHarness(t)
	h.add("t1", call("a", "read", `{"path":"1"}`))
	if got := h.types(1); fmt.Sprint(got) != "[TurnOpened CallsAdded ToolCallRequested]" {
		t.Fatalf("first batch recorded %v, want TurnOpened CallsAdded ToolCallRequested", got)
	}
	if req := h.log[3]; req.Causation != h.log[2].ID {
		t.Errorf("the request's causation is %q, want its batch %q", req.Causation, h.log[2].ID)
	}
	h.add("t1", call("b", "read", `{"path":"2"}`))
	reqs := h.requested()
	if len(reqs) != 2 || reqs[1].Index != 1 || reqs[1].IdempotencyKey != IdempotencyKey("default", "s1", "t1", 1) {
		t.Fatalf("requests %+v, want call b requested as index 1 while a runs", reqs)
	}
	h.finish(reqs[1])
	h.finish(reqs[0])
	if c := h.committed(); len(c) != 2 || c[0].Call != "a" || c[1].Call != "b" {
		t.Fatalf("committed %+v, want a then b", c)
	}
	if h.completed("t1") {
		t.Fatal("the turn completed while open: more calls may come")
	}
	h.end("t1")
	if got := h.types(len(h.log) - 2); fmt.Sprint(got) != "[TurnEnded TurnCompleted]" {
		t.Fatalf("end recorded %v, want TurnEnded TurnCompleted", got)
	}
}

// TestStreamedExclusiveIsABarrier: an exclusive call that arrives while a
// parallel-safe one runs waits for it, and a call that arrives after the
// exclusive one waits for it to settle.
func TestStreamedExclusiveIsABarrier(t *testing.T) {
	h := newHarness(t)
	h.add("t1", call("a", "read", `{"path":"1"}`))
	h.add("t1", call("w", "write", `{"path":"2"}`))
	h.add("t1", call("b", "read", `{"path":"3"}`))
	if reqs := h.requested(); len(reqs) != 1 {
		t.Fatalf("requests %+v, want only a while it runs", reqs)
	}
	h.finish(h.requested()[0])
	reqs := h.requested()
	if len(reqs) != 2 || reqs[1].Call != "w" {
		t.Fatalf("requests %+v, want w once a settled, and b not yet", reqs)
	}
	h.finish(reqs[1])
	if reqs = h.requested(); len(reqs) != 3 || reqs[2].Call != "b" {
		t.Fatalf("requests %+v, want b once w settled", reqs)
	}
}

// TestBatches: a batch sent again is answered from the record (nothing
// decided); every other disagreement with the record is refused with a
// message that names the call and what to do.
func TestBatches(t *testing.T) {
	h := newHarness(t)
	b1 := []events.CallSpec{call("a", "read", `{"path":"x"}`), call("b", "read", `{"path":"y"}`)}
	b2 := []events.CallSpec{call("c", "read", `{"path":"z"}`)}
	h.add("t1", b1...)
	h.add("t1", b2...)
	in := func(from int, calls ...events.CallSpec) BatchInput {
		return BatchInput{Turn: "t1", Calls: calls, From: from, ParallelToolCalls: true, Cap: 8, Plan: h.lookup()}
	}
	cases := []struct {
		name string
		in   BatchInput
		err  error
		want string
	}{
		{"first batch again", in(-1, b1...), nil, ""},
		{"second batch again, from given", in(2, b2...), nil, ""},
		{"first batch spelled otherwise", in(0, call("a", "read", ` {"path" : "x"}`), call("b", "read", `"{\"path\":\"y\"}"`)), nil, ""},
		{"a recorded call with other arguments", in(-1, call("a", "read", `{"path":"q"}`)), ErrTurnMismatch, `calls[0] (id "a") has other arguments`},
		{"a recorded call with another tool", in(-1, call("c", "write", `{"path":"z"}`)), ErrTurnMismatch, `names tool "write"`},
		{"recorded and new calls mixed", in(-1, b2[0], call("d", "read", `{}`)), ErrTurnMismatch, `calls[1] (id "d") is not recorded`},
		{"new then recorded", in(-1, call("d", "read", `{}`), b2[0]), ErrTurnMismatch, `calls[1] (id "c") is recorded as call 2`},
		{"recorded out of their order", in(-1, b1[1], b1[0]), ErrTurnMismatch, "is recorded as call 0, not 2"},
		{"a repeat from another place", in(1, b1...), ErrBatchOrder, "recorded from call 0"},
		{"a new batch past a gap", in(5, call("d", "read", `{}`)), ErrBatchOrder, "holds 3 calls and this batch says it starts at call 5"},
		{"a call id twice", in(-1, call("d", "read", `{}`), call("d", "read", `{}`)), ErrTurnInvalid, `repeats call id "d"`},
		{"no calls", in(-1), ErrTurnInvalid, "no calls"},
		{"other settings", BatchInput{Turn: "t1", Calls: b2, From: -1, ParallelToolCalls: false, Cap: 8, Settings: true, Plan: h.lookup()}, ErrTurnMismatch, "opened with parallel_tool_calls true and cap 8"},
		{"past the turn's bound", BatchInput{Turn: "t1", Calls: []events.CallSpec{call("d", "read", `{}`)}, From: -1, MaxCalls: 3, Plan: h.lookup()}, ErrTurnTooLarge, "at most 3"},
	}
	for _, c := range cases {
		d, err := AddCalls(h.s, c.in)
		switch {
		case c.err == nil && (err != nil || d != nil):
			t.Errorf("%s: drafts %v, err %v; want none, answered from the record", c.name, d, err)
		case c.err != nil && (!errors.Is(err, c.err) || d != nil):
			t.Errorf("%s: drafts %v, err %v; want %v", c.name, d, err, c.err)
		case c.err != nil && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: err %q, want it to say %q", c.name, err, c.want)
		}
	}
	// A posted turn's id, and a streamed turn's id posted whole.
	h.finish(h.requested()[0])
	h.finish(h.requested()[1])
	h.finish(h.requested()[2])
	h.end("t1")
	if _, err := AddCalls(h.s, in(-1, call("d", "read", `{}`))); !errors.Is(err, ErrTurnEnded) || !strings.Contains(err.Error(), "ended (the harness ended it) with 3 calls") {
		t.Errorf("a new call after the end: err %v, want ErrTurnEnded saying why", err)
	}
	if d, err := AddCalls(h.s, in(-1, b2...)); err != nil || d != nil {
		t.Errorf("a recorded batch after the end: drafts %v err %v, want it answered from the record", d, err)
	}
	if _, err := ReceiveTurn(h.s, TurnInput{ID: "t1", Calls: append(b1, b2...)}); !errors.Is(err, ErrTurnMismatch) || !strings.Contains(err.Error(), "names a streamed turn") {
		t.Errorf("a streamed turn's id posted whole: err %v, want ErrTurnMismatch saying so", err)
	}
	h.turn("t2", true, call("p", "read", `{"path":"p"}`))
	if _, err := AddCalls(h.s, BatchInput{Turn: "t2", Calls: []events.CallSpec{call("p", "read", `{"path":"p"}`)}, From: -1}); !errors.Is(err, ErrTurnMismatch) || !strings.Contains(err.Error(), "posted whole") {
		t.Errorf("a posted turn's id streamed: err %v, want ErrTurnMismatch saying so", err)
	}
	if _, err := EndTurn(h.s, EndInput{Turn: "t2", Reason: events.EndedByHarness}); !errors.Is(err, ErrTurnMismatch) {
		t.Errorf("ending a posted turn: err %v, want ErrTurnMismatch", err)
	}
	if _, err := AddCalls(h.s, BatchInput{Turn: "t3", Calls: b2, From: -1}); !errors.Is(err, ErrTurnActive) {
		t.Errorf("opening a turn while t2 runs: err %v, want ErrTurnActive", err)
	}
}

// TestEndCountsTheCalls: an end that says more calls were sent than the
// turn holds is refused (a batch was lost); ending twice decides once.
func TestEndCountsTheCalls(t *testing.T) {
	h := newHarness(t)
	h.add("t1", call("a", "read", `{"path":"1"}`))
	if _, err := EndTurn(h.s, EndInput{Turn: "t1", Reason: events.EndedByHarness, Calls: 2}); !errors.Is(err, ErrBatchOrder) {
		t.Fatalf("end saying 2 calls of 1: err %v, want ErrBatchOrder", err)
	}
	d, err := EndTurn(h.s, EndInput{Turn: "t1", Reason: events.EndedByHarness, Calls: 1})
	if err != nil || len(d) != 1 {
		t.Fatalf("end: %v %v", d, err)
	}
	h.apply(d)
	if d, err := EndTurn(h.s, EndInput{Turn: "t1", Reason: events.EndedByTimeout}); err != nil || d != nil {
		t.Fatalf("second end: drafts %v err %v, want none", d, err)
	}
}

// TestCancellingAnOpenTurnEndsIt: cancelling the whole of an open
// streamed turn settles its calls and ends it, so it completes.
func TestCancellingAnOpenTurnEndsIt(t *testing.T) {
	h := newHarness(t)
	h.add("t1", call("w", "write", `{"path":"1"}`), call("b", "write", `{"path":"2"}`))
	d, _ := Cancel(h.s, "t1", "", "stop")
	h.apply(d)
	h.drive()
	tr, _ := h.s.Turn("t1")
	if tr.Open || tr.EndReason != events.EndedByCancel {
		t.Fatalf("after cancel: open %t reason %q, want ended by cancel", tr.Open, tr.EndReason)
	}
	if !h.completed("t1") {
		t.Fatalf("the cancelled turn did not complete: %v", h.types(1))
	}
}

// TestStreamedTurnsReplay runs random streamed turns (batches of mixed
// tools arriving between random completions, then the end): every call is
// committed once in call order, the turn completes, and a replay of the log
// rebuilds the same state with nothing left to decide.
func TestStreamedTurnsReplay(t *testing.T) {
	prop := func(seed uint64) bool {
		r := rand.New(rand.NewPCG(seed, 4))
		h := newHarness(t)
		names := []string{"read", "write", "nope"}
		n, ended := 1+r.IntN(8), false
		sent := 0
		for steps := 0; !h.completed("t1"); steps++ {
			if steps > 200 {
				t.Errorf("seed %d: turn did not finish", seed)
				return false
			}
			tr, _ := h.s.Turn("t1")
			var open []int
			if tr != nil {
				for i := range tr.Calls {
					if tr.States[i].Phase == PhaseRequested || tr.States[i].Phase == PhaseRetrying {
						open = append(open, i)
					}
				}
			}
			switch {
			case sent < n && (len(open) == 0 || r.IntN(2) == 0):
				k := min(1+r.IntN(3), n-sent)
				var calls []events.CallSpec
				for j := range k {
					calls = append(calls, call(fmt.Sprintf("c%d", sent+j), names[r.IntN(3)], `{"path":"p"}`))
				}
				h.add("t1", calls...)
				sent += k
			case sent == n && !ended && (len(open) == 0 || r.IntN(3) == 0):
				h.end("t1")
				ended = true
			case len(open) > 0:
				i := open[r.IntN(len(open))]
				ref := events.CallRef{Turn: "t1", Call: tr.Calls[i].ID, Index: i}
				if tr.States[i].Phase == PhaseRetrying {
					h.apply(RetryDue(h.s, ref, tr.States[i].Retry.Attempt))
					continue
				}
				o := []Outcome{{OK: true}, {Err: "boom"}, {TimedOut: true}}[r.IntN(3)]
				h.claimAndFinish(events.ToolCallRequested{CallRef: ref, Attempt: tr.States[i].Attempt}, o, Retry{MaxAttempts: 2})
			default:
				t.Errorf("seed %d: stuck: %d of %d sent, ended %t, log %v", seed, sent, n, ended, h.types(1))
				return false
			}
		}
		c := h.committed()
		if len(c) != n {
			t.Errorf("seed %d: %d commits for %d calls", seed, len(c), n)
			return false
		}
		for i, rc := range c {
			if rc.Index != i || rc.Call != fmt.Sprintf("c%d", i) {
				t.Errorf("seed %d: commit %d is call %d (%s)", seed, i, rc.Index, rc.Call)
				return false
			}
		}
		s2 := NewSession("default", "s1")
		for _, ev := range h.log {
			if err := s2.Apply(ev); err != nil {
				t.Errorf("seed %d: replay: %v", seed, err)
				return false
			}
		}
		if tr, _ := s2.Turn("t1"); s2.Seq != h.s.Seq || len(Progress(s2)) != 0 || !tr.Completed || len(tr.Calls) != n {
			t.Errorf("seed %d: replayed state differs", seed)
			return false
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

type shellArgs struct {
	Command  string `json:"command" jsonschema:"the command"`
	Escalate bool   `json:"escalate,omitempty" jsonschema:"run outside the sandbox"`
}

// TestEscalationCountsOncePerStreamedTurn: a turn admits one escalated
// call (docs/spec.md §6), whichever batch the second one comes in.
func TestEscalationCountsOncePerStreamedTurn(t *testing.T) {
	h := newHarness(t)
	sh, err := tool.New("sh", "test shell", func(context.Context, shellArgs) (tool.Result, error) { return tool.Text("ok"), nil },
		tool.WithGuidelines("use in tests"), tool.WithEscalation())
	if err != nil {
		t.Fatal(err)
	}
	h.tools["sh"] = sh
	h.add("t1", call("a", "sh", `{"command":"x","escalate":true}`))
	h.add("t1", call("b", "sh", `{"command":"y","escalate":true}`))
	tr, _ := h.s.Turn("t1")
	if tr.Plan[0].Blocked != "" || tr.Plan[1].Blocked != events.BlockDenied || tr.Plan[1].Rule != "escalation" || tr.Plan[1].Index != 1 {
		t.Fatalf("plans %+v, want the first escalation admitted and the second, in a later batch, denied as index 1", tr.Plan)
	}
}
