package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

type pathArgs struct {
	Path string `json:"path" jsonschema:"file path"`
}

func mustTool(t *testing.T, name string, d tool.Declarations) *tool.Tool {
	t.Helper()
	tl, err := tool.New(name, "test tool "+name, func(context.Context, pathArgs) (tool.Result, error) {
		return tool.Text("ok"), nil
	}, tool.WithGuidelines("use in tests"), tool.WithDeclarations(d))
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// harness is a minimal shell around the pure core: it mints ids, sequences
// and times, applies drafts, and records every event.
type harness struct {
	t     *testing.T
	s     *Session
	log   []events.Event
	tools map[string]*tool.Tool
	now   time.Time
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, s: NewSession("default", "s1"), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.tools = map[string]*tool.Tool{
		"read":  mustTool(t, "read", tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}),
		"write": mustTool(t, "write", tool.Declarations{}),
	}
	h.apply([]Draft{{Type: events.TypeSessionOpened, Payload: events.SessionOpened{Workspace: "w"}}})
	return h
}

func (h *harness) apply(drafts []Draft) {
	h.t.Helper()
	prev := ""
	for _, d := range drafts {
		if d.Causation == CausedByPrevious {
			d.Causation = prev
		}
		ev := events.Event{ID: fmt.Sprintf("e%d", h.s.Seq+1), Tenant: "default", Session: "s1", Seq: h.s.Seq + 1,
			Time: h.now, Type: d.Type, Causation: d.Causation, Data: events.Payload(d.Payload)}
		prev = ev.ID
		if err := h.s.Apply(ev); err != nil {
			h.t.Fatalf("apply %s: %v", d.Type, err)
		}
		h.log = append(h.log, ev)
	}
}

// drive applies Progress until it has nothing to do.
func (h *harness) drive() {
	for {
		d := Progress(h.s)
		if len(d) == 0 {
			return
		}
		h.apply(d)
	}
}

func (h *harness) turn(id string, parallel bool, calls ...events.CallSpec) {
	h.t.Helper()
	d, err := ReceiveTurn(h.s, TurnInput{ID: id, Calls: calls, ParallelToolCalls: parallel, Cap: 8, Plan: PlanInput{
		Lookup: func(name string) (*tool.Tool, bool) { t, ok := h.tools[name]; return t, ok },
	}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.apply(d)
	h.drive()
}

func call(id, name, args string) events.CallSpec {
	return events.CallSpec{ID: id, Name: name, Arguments: json.RawMessage(args)}
}

func (h *harness) requested() []events.ToolCallRequested {
	var out []events.ToolCallRequested
	for _, ev := range h.log {
		if ev.Type == events.TypeToolCallRequested {
			p, _ := events.Decode(ev)
			out = append(out, *p.(*events.ToolCallRequested))
		}
	}
	return out
}

func (h *harness) claimAndFinish(r events.ToolCallRequested, o Outcome, retry Retry) {
	h.t.Helper()
	d, err := Claim(h.s, r.CallRef, r.Attempt, "w1")
	if err != nil {
		h.t.Fatalf("claim %s: %v", r.Call, err)
	}
	h.apply(d)
	h.apply(Settle(h.s, r.CallRef, r.Attempt, o, retry))
	h.drive()
}

func (h *harness) committed() []events.ResultCommitted {
	var out []events.ResultCommitted
	for _, ev := range h.log {
		if ev.Type == events.TypeResultCommitted {
			p, _ := events.Decode(ev)
			out = append(out, *p.(*events.ResultCommitted))
		}
	}
	return out
}

func TestOrderedCommitWhateverTheCompletionOrder(t *testing.T) {
	h := newHarness(t)
	h.turn("t1", true, call("a", "read", `{"path":"1"}`), call("b", "read", `{"path":"2"}`), call("c", "read", `{"path":"3"}`))
	reqs := h.requested()
	if len(reqs) != 3 {
		t.Fatalf("requested %d calls at once, want 3", len(reqs))
	}
	ok := Outcome{OK: true, Content: []events.Part{{Type: "text", Text: "x"}}}
	h.claimAndFinish(reqs[1], ok, Retry{})
	h.claimAndFinish(reqs[2], ok, Retry{})
	if n := len(h.committed()); n != 0 {
		t.Fatalf("%d results committed before the first call settled, want 0", n)
	}
	h.claimAndFinish(reqs[0], ok, Retry{})
	var got []string
	for _, c := range h.committed() {
		got = append(got, c.Call)
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("commit order=%v, want [a b c]", got)
	}
	if last := h.log[len(h.log)-1].Type; last != events.TypeTurnCompleted {
		t.Fatalf("last event=%s, want TurnCompleted", last)
	}
}

func TestBlockedCallsNeverRunAndAreRecordedBeforeTheirResult(t *testing.T) {
	h := newHarness(t)
	h.turn("t1", true,
		call("a", "nope", `{}`),
		call("b", "read", `{"path":1}`),
		call("c", "read", `{"path":"x","colour":"red"}`),
		call("d", "read", `"{\"path\": \"tru`),
		call("e", "read", `{}`),
	)
	if n := len(h.requested()); n != 0 {
		t.Fatalf("%d blocked calls were requested, want 0", n)
	}
	want := []events.Block{events.BlockUnavailable, events.BlockInvalidArguments, events.BlockInvalidArguments, events.BlockInvalidArguments, events.BlockInvalidArguments}
	blockedAt := map[string]int{}
	for i, ev := range h.log {
		if ev.Type == events.TypeDispatchBlocked {
			p, _ := events.Decode(ev)
			blockedAt[p.(*events.DispatchBlocked).Call] = i
		}
	}
	for i, c := range h.committed() {
		if c.Result.Outcome != events.OutcomeBlocked || c.Result.Block != want[i] {
			t.Errorf("call %s: outcome=%s/%s, want blocked/%s", c.Call, c.Result.Outcome, c.Result.Block, want[i])
		}
	}
	for i, ev := range h.log {
		if ev.Type == events.TypeResultCommitted {
			p, _ := events.Decode(ev)
			c := p.(*events.ResultCommitted)
			if at, ok := blockedAt[c.Call]; !ok || at > i {
				t.Errorf("call %s committed at %d before its DispatchBlocked (%d, found %v)", c.Call, i, at, ok)
			}
		}
	}
}

func TestSecondClaimOfAnAttemptIsRefused(t *testing.T) {
	h := newHarness(t)
	h.turn("t1", true, call("a", "write", `{"path":"x"}`))
	r := h.requested()[0]
	d, err := Claim(h.s, r.CallRef, 1, "w1")
	if err != nil {
		t.Fatal(err)
	}
	h.apply(d)
	if _, err := Claim(h.s, r.CallRef, 1, "w2"); !errors.Is(err, ErrStaleClaim) {
		t.Fatalf("second claim err=%v, want ErrStaleClaim", err)
	}
}

func TestNeverCallTimeoutIsIndeterminateAndNoticedNextTurn(t *testing.T) {
	h := newHarness(t)
	h.turn("t1", true, call("a", "write", `{"path":"x"}`))
	h.claimAndFinish(h.requested()[0], Outcome{TimedOut: true, Err: "deadline"}, Retry{MaxAttempts: 3})
	c := h.committed()
	if len(c) != 1 || c[0].Result.Outcome != events.OutcomeIndeterminate {
		t.Fatalf("committed=%+v, want one indeterminate", c)
	}
	if n := len(h.requested()); n != 1 {
		t.Fatalf("a never call was requested %d times, want 1", n)
	}
	h.turn("t2", true, call("b", "read", `{"path":"y"}`))
	tr, _ := h.s.Turn("t2")
	if len(tr.Notices) != 1 || tr.Notices[0].About.Call != "a" || tr.Notices[0].Name != "write" || tr.Notices[0].Attempt != 1 {
		t.Fatalf("t2 notices=%+v, want one about call a (write, attempt 1)", tr.Notices)
	}
	h.claimAndFinish(h.requested()[1], Outcome{OK: true}, Retry{})
	h.turn("t3", true, call("c", "read", `{"path":"y"}`))
	if tr, _ := h.s.Turn("t3"); len(tr.Notices) != 0 {
		t.Fatalf("t3 notices=%+v, want none: a notice is issued once", tr.Notices)
	}
}

func TestSafeCallRetriesThenSucceeds(t *testing.T) {
	h := newHarness(t)
	h.turn("t1", true, call("a", "read", `{"path":"x"}`))
	r := h.requested()[0]
	h.claimAndFinish(r, Outcome{Err: "flaky"}, Retry{MaxAttempts: 3, Delay: time.Second})
	if got := h.log[len(h.log)-1].Type; got != events.TypeRetryScheduled {
		t.Fatalf("last event=%s, want RetryScheduled", got)
	}
	h.apply(RetryDue(h.s, r.CallRef, 2))
	reqs := h.requested()
	if len(reqs) != 2 || reqs[1].Attempt != 2 || reqs[1].IdempotencyKey != r.IdempotencyKey {
		t.Fatalf("requests=%+v, want a second attempt with the same idempotency key", reqs)
	}
	h.claimAndFinish(reqs[1], Outcome{OK: true}, Retry{MaxAttempts: 3})
	c := h.committed()
	if len(c) != 1 || c[0].Result.Outcome != events.OutcomeOK || c[0].Result.Attempts != 2 {
		t.Fatalf("committed=%+v, want ok with attempts 2", c)
	}
}

func TestSafeCallGivesUpAfterMaxAttempts(t *testing.T) {
	h := newHarness(t)
	h.turn("t1", true, call("a", "read", `{"path":"x"}`))
	for attempt := 1; attempt <= 2; attempt++ {
		reqs := h.requested()
		h.claimAndFinish(reqs[len(reqs)-1], Outcome{Err: "down"}, Retry{MaxAttempts: 2})
		h.apply(RetryDue(h.s, reqs[0].CallRef, attempt+1))
	}
	c := h.committed()
	if len(c) != 1 || c[0].Result.Outcome != events.OutcomeError || c[0].Result.Attempts != 2 {
		t.Fatalf("committed=%+v, want error after 2 attempts", c)
	}
}

func TestRecoverSettlesInFlightCallsByReplayPolicy(t *testing.T) {
	h := newHarness(t)
	h.turn("t1", true, call("a", "read", `{"path":"x"}`), call("b", "write", `{"path":"y"}`))
	r := h.requested()[0]
	d, _ := Claim(h.s, r.CallRef, 1, "w1")
	h.apply(d)
	// A new owner rebuilds from the log and recovers.
	s2 := NewSession("default", "s1")
	for _, ev := range h.log {
		if err := s2.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	h.s = s2
	h.apply(Recover(h.s, Retry{MaxAttempts: 3}))
	if got := h.log[len(h.log)-1].Type; got != events.TypeRetryScheduled {
		t.Fatalf("safe call after loss: last event=%s, want RetryScheduled", got)
	}
	h.apply(RetryDue(h.s, r.CallRef, 2))
	h.claimAndFinish(h.requested()[1], Outcome{OK: true}, Retry{})
	// The exclusive write starts only now; lose it too.
	w := h.requested()[2]
	d, _ = Claim(h.s, w.CallRef, 1, "w1")
	h.apply(d)
	h.apply(Recover(h.s, Retry{MaxAttempts: 3}))
	h.drive()
	c := h.committed()
	if len(c) != 2 || c[0].Result.Attempts != 2 || c[1].Result.Outcome != events.OutcomeIndeterminate {
		t.Fatalf("committed=%+v, want ok (2 attempts) then indeterminate", c)
	}
}

func TestDuplicateTurnIDDecidesNothing(t *testing.T) {
	h := newHarness(t)
	h.turn("t1", true, call("a", "read", `{"path":"x"}`))
	d, err := ReceiveTurn(h.s, TurnInput{ID: "t1", Calls: []events.CallSpec{call("a", "read", `{"path":"x"}`)}})
	if err != nil || d != nil {
		t.Fatalf("drafts=%v err=%v, want none", d, err)
	}
	// Other calls under a recorded id decide nothing either, and say why.
	d, err = ReceiveTurn(h.s, TurnInput{ID: "t1", Calls: []events.CallSpec{call("z", "read", `{}`)}})
	if !errors.Is(err, ErrTurnMismatch) || d != nil {
		t.Fatalf("drafts=%v err=%v, want none and ErrTurnMismatch", d, err)
	}
}

// TestRepeat: a turn id is an idempotency key (docs/spec.md §8). The same
// calls are the same whatever their JSON spelling; any other id, name,
// argument value, argument type or number of calls is a mismatch that names
// the call.
func TestRepeat(t *testing.T) {
	h := newHarness(t)
	recorded := []events.CallSpec{
		call("a", "read", `{"path":"x","n":[1,{"k":true,"z":null}]}`),
		call("b", "write", `{"path":"y"}`),
		call("c", "read", `{"path": cut`), // not JSON: recorded as a string, blocked
	}
	h.turn("t1", true, recorded...)
	cases := []struct {
		name  string
		calls []events.CallSpec
		want  string // "" for the same calls, else what the error says
	}{
		{"verbatim", recorded, ""},
		{"spelled otherwise", []events.CallSpec{
			call("a", "read", ` { "n" : [ 1.0 , { "z" : null , "k" : true } ] , "path" : "\u0078" } `),
			call("b", "write", `"{\"path\": \"y\"}"`),
			call("c", "read", `{"path": cut`),
		}, ""},
		{"no calls names the recorded turn", []events.CallSpec{}, ""},
		{"fewer calls", recorded[:2], "this turn has 2 calls, the recorded one 3"},
		{"other id", []events.CallSpec{call("A", "read", `{}`), recorded[1], recorded[2]}, `calls[0] has id "A", the recorded call "a"`},
		{"other tool", []events.CallSpec{recorded[0], call("b", "edit", `{"path":"y"}`), recorded[2]}, `calls[1] (id "b") names tool "edit"`},
		{"other value", []events.CallSpec{recorded[0], call("b", "write", `{"path":"z"}`), recorded[2]}, `calls[1] (id "b") has other arguments`},
		{"number for a string", []events.CallSpec{call("a", "read", `{"path":"x","n":["1",{"k":true,"z":null}]}`), recorded[1], recorded[2]}, `calls[0] (id "a") has other arguments`},
		{"1.5 for 1", []events.CallSpec{call("a", "read", `{"path":"x","n":[1.5,{"k":true,"z":null}]}`), recorded[1], recorded[2]}, `calls[0] (id "a") has other arguments`},
		{"a member more", []events.CallSpec{call("a", "read", `{"path":"x","n":[1,{"k":true,"z":null,"q":1}]}`), recorded[1], recorded[2]}, `calls[0] (id "a") has other arguments`},
		{"other broken bytes", []events.CallSpec{recorded[0], recorded[1], call("c", "read", `{"path": cat`)}, `calls[2] (id "c") has other arguments`},
	}
	for _, c := range cases {
		err := Repeat(h.s, "t1", c.calls)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: err=%v, want the same calls", c.name, err)
		case c.want != "" && !errors.Is(err, ErrTurnMismatch):
			t.Errorf("%s: err=%v, want ErrTurnMismatch", c.name, err)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: err=%q, want it to say %q", c.name, err, c.want)
		}
	}
	if err := Repeat(h.s, "t-new", recorded[:1]); err != nil {
		t.Errorf("an id not recorded: err=%v, want nil (not a repeat)", err)
	}
}

func TestTurnValidation(t *testing.T) {
	h := newHarness(t)
	for _, calls := range [][]events.CallSpec{
		{call("", "read", `{}`)},
		{call("a", "read", `{}`), call("a", "read", `{}`)},
	} {
		if _, err := ReceiveTurn(h.s, TurnInput{ID: "t", Calls: calls}); !errors.Is(err, ErrTurnInvalid) {
			t.Errorf("calls %v: err=%v, want ErrTurnInvalid", calls, err)
		}
	}
}

// TestPropertyCommitsInCallOrder runs random turns of mixed tools with random
// completion orders and outcomes: every call is committed exactly once, in
// call order, and a replay of the log rebuilds the same state.
func TestPropertyCommitsInCallOrder(t *testing.T) {
	prop := func(seed uint64) bool {
		r := rand.New(rand.NewPCG(seed, 3))
		h := newHarness(t)
		n := r.IntN(9)
		var calls []events.CallSpec
		names := []string{"read", "write", "nope"}
		for i := range n {
			calls = append(calls, call(fmt.Sprintf("c%d", i), names[r.IntN(3)], `{"path":"p"}`))
		}
		h.turn("t1", r.IntN(2) == 0, calls...)
		for steps := 0; ; steps++ {
			if steps > 100 {
				t.Errorf("seed %d: turn did not finish", seed)
				return false
			}
			tr, _ := h.s.Turn("t1")
			if tr.Completed {
				break
			}
			var open []int
			for i := range tr.Calls {
				if tr.States[i].Phase == PhaseRequested || tr.States[i].Phase == PhaseRetrying {
					open = append(open, i)
				}
			}
			if len(open) == 0 {
				t.Errorf("seed %d: stuck with nothing to run", seed)
				return false
			}
			i := open[r.IntN(len(open))]
			ref := events.CallRef{Turn: "t1", Call: tr.Calls[i].ID, Index: i}
			if tr.States[i].Phase == PhaseRetrying {
				h.apply(RetryDue(h.s, ref, tr.States[i].Retry.Attempt))
				continue
			}
			o := []Outcome{{OK: true}, {Err: "boom"}, {TimedOut: true}}[r.IntN(3)]
			h.claimAndFinish(events.ToolCallRequested{CallRef: ref, Attempt: tr.States[i].Attempt}, o, Retry{MaxAttempts: 2})
		}
		c := h.committed()
		if len(c) != n {
			t.Errorf("seed %d: %d commits for %d calls", seed, len(c), n)
			return false
		}
		for i, rc := range c {
			if rc.Index != i {
				t.Errorf("seed %d: commit %d is call %d", seed, i, rc.Index)
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
		if s2.Seq != h.s.Seq || len(Progress(s2)) != 0 {
			t.Errorf("seed %d: replayed state differs", seed)
			return false
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

// A read-only, safe call that ran before its claim records its claim in its
// outcome: one ToolCallCompleted naming the worker, no ToolCallStarted; the
// attempt is then claimed, so a second claim is refused, and a failed
// attempt's outcome carries its claim the same way before its retry.
func TestClaimAndSettleRecordsTheClaimInTheOutcome(t *testing.T) {
	h := newHarness(t)
	h.turn("t1", true, call("a", "read", `{"path":"x"}`), call("b", "read", `{"path":"y"}`))
	rs := h.requested()
	d, err := ClaimAndSettle(h.s, rs[0].CallRef, 1, "w1", Outcome{OK: true, Content: []events.Part{{Type: "text", Text: "ok"}}}, Retry{MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 1 || d[0].Type != events.TypeToolCallCompleted || d[0].Payload.(events.ToolCallCompleted).Worker != "w1" {
		t.Fatalf("drafts %+v, want one ToolCallCompleted naming worker w1", d)
	}
	if d[0].Causation != h.log[len(h.log)-2].ID && d[0].Causation != h.log[len(h.log)-1].ID {
		t.Fatalf("causation %q, want the call's request", d[0].Causation)
	}
	h.apply(d)
	if _, err := Claim(h.s, rs[0].CallRef, 1, "w2"); !errors.Is(err, ErrStaleClaim) {
		t.Fatalf("claim after the outcome that carried one: err=%v, want ErrStaleClaim", err)
	}
	d, err = ClaimAndSettle(h.s, rs[1].CallRef, 1, "w1", Outcome{Err: "flaky"}, Retry{MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 2 || d[0].Type != events.TypeToolCallFailed || d[0].Payload.(events.ToolCallFailed).Worker != "w1" || d[1].Type != events.TypeRetryScheduled {
		t.Fatalf("drafts %+v, want ToolCallFailed naming w1, then RetryScheduled", d)
	}
	h.apply(d)
	h.drive()
	if got := h.s.Active().States[1].Phase; got != PhaseRetrying {
		t.Fatalf("call b phase %v after a failed attempt that carried its claim, want retrying", got)
	}
	if n := len(h.committed()); n != 1 {
		t.Fatalf("%d results committed, want 1 (call a)", n)
	}
}
