package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

// TestMayRunUnclaimed: only a read-only, replay-safe request whose tool
// declares no mutated files runs before its claim is durable.
func TestMayRunUnclaimed(t *testing.T) {
	plain := mustTool(t, "plain", tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe})
	mutating := *plain
	mutating.MutatedPaths = func(json.RawMessage) []string { return []string{"a"} }
	for _, c := range []struct {
		name   string
		effect tool.Effect
		replay tool.Replay
		t      *tool.Tool
		want   bool
	}{
		{"read-only safe", tool.EffectReadOnly, tool.ReplaySafe, plain, true},
		{"read-only never", tool.EffectReadOnly, tool.ReplayNever, plain, false},
		{"side-effecting safe", tool.EffectSideEffecting, tool.ReplaySafe, plain, false},
		{"user-mediated safe", tool.EffectUserMediated, tool.ReplaySafe, plain, false},
		{"read-only safe, the tool mutates files", tool.EffectReadOnly, tool.ReplaySafe, &mutating, false},
		{"read-only safe, no tool", tool.EffectReadOnly, tool.ReplaySafe, nil, false},
		{"undeclared", "", "", plain, false},
	} {
		r := &events.ToolCallRequested{Effect: c.effect, Replay: c.replay}
		if got := MayRunUnclaimed(r, c.t); got != c.want {
			t.Errorf("%s: MayRunUnclaimed=%v, want %v", c.name, got, c.want)
		}
	}
}

// TestRunFailureOutcome: how a failed run maps to the outcome Settle
// decides on.
func TestRunFailureOutcome(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		f    RunFailure
		want Outcome
	}{
		{"plain error", RunFailure{Err: boom}, Outcome{}},
		{"past its deadline", RunFailure{Err: boom, Deadline: true}, Outcome{TimedOut: true}},
		{"the tool's own deadline error", RunFailure{Err: fmt.Errorf("x: %w", context.DeadlineExceeded)}, Outcome{TimedOut: true}},
		{"interrupted", RunFailure{Err: context.Canceled, Interrupted: true}, Outcome{Cancelled: true}},
		{"lost", RunFailure{Err: tool.Lost(boom)}, Outcome{Lost: true}},
		{"lost past the deadline is a timeout", RunFailure{Err: tool.Lost(boom), Deadline: true}, Outcome{TimedOut: true}},
		{"not sent, whatever the clock", RunFailure{Err: tool.NotSent(boom), Deadline: true, Interrupted: true}, Outcome{}},
		{"permanent", RunFailure{Err: tool.Permanent(boom)}, Outcome{Permanent: true}},
	} {
		c.f.Message = "said"
		got := c.f.Outcome()
		c.want.Err = "said"
		if got.TimedOut != c.want.TimedOut || got.Cancelled != c.want.Cancelled || got.Lost != c.want.Lost ||
			got.Permanent != c.want.Permanent || got.Err != c.want.Err || got.OK {
			t.Errorf("%s: outcome %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestSettledResultIsWhatTheLogRecords: the result an after-tool hook is
// told is the one the settling events record, for every way Settle
// settles an attempt.
func TestSettledResultIsWhatTheLogRecords(t *testing.T) {
	safe := mustTool(t, "safe", tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplaySafe})
	never := mustTool(t, "never", tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplayNever})
	ask := mustTool(t, "ask", tool.Declarations{Effect: tool.EffectUserMediated, Replay: tool.ReplayNever})
	for _, c := range []struct {
		name    string
		t       *tool.Tool
		o       Outcome
		want    events.Outcome
		text    string
		retries bool
	}{
		{"ok", safe, Outcome{OK: true, Content: []events.Part{{Type: "text", Text: "done"}}}, events.OutcomeOK, "done", false},
		{"a safe call timed out", safe, Outcome{Err: "deadline", TimedOut: true}, events.OutcomeError, "timed out after", true},
		{"a never call timed out", never, Outcome{Err: "deadline", TimedOut: true}, events.OutcomeIndeterminate, "it timed out: deadline", false},
		{"a never call cancelled while running", never, Outcome{Err: "cancelled", Cancelled: true}, events.OutcomeIndeterminate, "it was cancelled while running", false},
		{"a safe call cancelled while running", safe, Outcome{Err: "cancelled", Cancelled: true}, events.OutcomeError, "cancelled while running", false},
		{"a user-mediated call lost", ask, Outcome{Err: "gone", Lost: true}, events.OutcomeError, "the node was lost while waiting for the user", true},
		{"a never call lost", never, Outcome{Err: "gone", Lost: true}, events.OutcomeIndeterminate, "gone", false},
	} {
		s := startedCall(t, c.t)
		d := Settle(s, events.CallRef{Turn: "t1", Call: "c", Index: 0}, 1, c.o, Retry{MaxAttempts: 3})
		got, ok := SettledResult(s, d)
		if !ok {
			t.Fatalf("%s: no result from %d drafts", c.name, len(d))
		}
		if got.Outcome != c.want || got.Attempts != 1 || got.ID != "c" || got.Name != c.t.Name {
			t.Errorf("%s: result %+v, want %s of attempt 1 of call c", c.name, got, c.want)
		}
		if len(got.Content) == 0 || !strings.Contains(got.Content[0].Text, c.text) {
			t.Errorf("%s: result says %+v, want %q", c.name, got.Content, c.text)
		}
		retried := false
		for _, x := range d {
			retried = retried || x.Type == events.TypeRetryScheduled
		}
		if retried != c.retries {
			t.Errorf("%s: retry scheduled %v, want %v", c.name, retried, c.retries)
		}
	}
	if _, ok := SettledResult(startedCall(t, safe), []Draft{{Type: events.TypeTurnCompleted, Payload: events.TurnCompleted{Turn: "t1"}}}); ok {
		t.Error("a result from drafts that settle nothing")
	}
}

// startedCall is a session whose turn t1 has one call c of tool tl,
// claimed (attempt 1 started).
func startedCall(t *testing.T, tl *tool.Tool) *Session {
	t.Helper()
	reg := func(name string) (*tool.Tool, bool) { return tl, name == tl.Name }
	s := NewSession("ten", "s1")
	seq := uint64(0)
	apply := func(d []Draft) {
		t.Helper()
		for _, x := range d {
			seq++
			ev := events.Event{ID: fmt.Sprint("e", seq), Tenant: "ten", Session: "s1", Seq: seq, Type: x.Type, Data: events.Payload(x.Payload)}
			if err := s.Apply(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply([]Draft{{Type: events.TypeSessionOpened, Payload: events.SessionOpened{Workspace: "w"}}})
	d, err := ReceiveTurn(s, TurnInput{ID: "t1", Calls: []events.CallSpec{{ID: "c", Name: tl.Name, Arguments: json.RawMessage(`{"path":"a"}`)}}, Cap: 1,
		Plan: PlanInput{Lookup: reg}})
	if err != nil {
		t.Fatal(err)
	}
	apply(d)
	for d := Progress(s); len(d) > 0; d = Progress(s) {
		apply(d)
	}
	c, err := Claim(s, events.CallRef{Turn: "t1", Call: "c", Index: 0}, 1, "w1")
	if err != nil {
		t.Fatal(err)
	}
	apply(c)
	return s
}
