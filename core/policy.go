package core

import (
	"context"
	"errors"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

// The execution policy the shell applies around a call, decided here so
// that the session actor, the tool actors and the log cannot disagree.

// MayRunUnclaimed reports whether a requested call may run before its claim
// is durable (docs/spec.md §4: write only what a guarantee needs): it is
// read-only and replay-safe, so a second run after a crash or a redelivery
// changes nothing, and its tool declares no files it mutates (those are
// checkpointed, and a checkpoint is recorded with the claim). t is the
// tool that runs it. The session actor hands such a request to its tool
// actor the moment it is decided; the tool actor runs it without a claim.
func MayRunUnclaimed(r *events.ToolCallRequested, t *tool.Tool) bool {
	return r.Effect == tool.EffectReadOnly && r.Replay == tool.ReplaySafe && t != nil && t.MutatedPaths == nil
}

// RunFailure is how a tool's run ended in error, as the shell saw it.
type RunFailure struct {
	// Err is what the tool returned.
	Err error
	// Deadline: the call's context passed its deadline (the call's
	// timeout). Interrupted: the harness cancelled the call while it ran.
	Deadline, Interrupted bool
	// Message is Err as the model may read it (redacted, with
	// workspace-relative paths).
	Message  string
	Duration time.Duration
}

// Outcome maps a failed run to the Outcome Settle decides on (docs/spec.md
// §3). A tool that knows its call never left (tool.ErrNotSent) failed
// plainly, whatever the clock says; otherwise a run past its deadline
// timed out, a run the harness interrupted was cancelled, and a run whose
// answer was lost after the call went out (tool.ErrLost) is a lost
// attempt. tool.ErrPermanent stops the retries of a safe call.
func (f RunFailure) Outcome() Outcome {
	notSent := errors.Is(f.Err, tool.ErrNotSent)
	timedOut := !notSent && (f.Deadline || errors.Is(f.Err, context.DeadlineExceeded))
	cancelled := !notSent && f.Interrupted
	lost := !notSent && !timedOut && !cancelled && errors.Is(f.Err, tool.ErrLost)
	return Outcome{Err: f.Message, TimedOut: timedOut, Cancelled: cancelled, Lost: lost,
		Permanent: tool.IsPermanent(f.Err), Duration: f.Duration}
}

// SettledResult is the result of the attempt that drafts settle, as the
// events among them record it: ok from its ToolCallCompleted, an error from
// its ToolCallFailed (final or not), indeterminate from its
// ToolCallIndeterminate. It reports false when drafts settle no attempt of
// a call of s. What an after-tool hook is told comes from here, so it is
// what the log records.
func SettledResult(s *Session, drafts []Draft) (events.Result, bool) {
	for _, d := range drafts {
		ref, ok := events.CallOf(d.Payload)
		if !ok {
			continue
		}
		t, ok := s.turns[ref.Turn]
		if !ok || ref.Index < 0 || ref.Index >= len(t.Calls) {
			continue
		}
		if r, ok := attemptResult(t.Calls[ref.Index], d.Payload); ok {
			return *r, true
		}
	}
	return events.Result{}, false
}

// attemptResult is the result an event that settles an attempt records;
// p is its payload (a value, as decided, or a pointer, as decoded).
func attemptResult(c events.CallSpec, p any) (*events.Result, bool) {
	r := &events.Result{ID: c.ID, Name: c.Name}
	switch p := p.(type) {
	case events.ToolCallCompleted:
		completed(r, &p)
	case *events.ToolCallCompleted:
		completed(r, p)
	case events.ToolCallFailed:
		r.Outcome, r.Content, r.Attempts = events.OutcomeError, []events.Part{{Type: "text", Text: p.Error}}, p.Attempt
	case *events.ToolCallFailed:
		r.Outcome, r.Content, r.Attempts = events.OutcomeError, []events.Part{{Type: "text", Text: p.Error}}, p.Attempt
	case events.ToolCallIndeterminate:
		r.Outcome, r.Content, r.Attempts = events.OutcomeIndeterminate, []events.Part{{Type: "text", Text: IndeterminateText(c.Name, p.Reason)}}, p.Attempt
	case *events.ToolCallIndeterminate:
		r.Outcome, r.Content, r.Attempts = events.OutcomeIndeterminate, []events.Part{{Type: "text", Text: IndeterminateText(c.Name, p.Reason)}}, p.Attempt
	default:
		return nil, false
	}
	return r, true
}

func completed(r *events.Result, p *events.ToolCallCompleted) {
	r.Outcome, r.Content, r.Truncated, r.FullOutput, r.Attempts, r.Touched = events.OutcomeOK, p.Content, p.Truncated, p.FullOutput, p.Attempt, p.Touched
}
