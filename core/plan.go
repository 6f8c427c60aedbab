package core

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

// Lookup resolves a tool name for one session: ok is false when the tool is
// unknown or not available to the session (disabled, or not in its agent's
// list).
type Lookup func(name string) (t *tool.Tool, ok bool)

// Gate is a permission decision for one valid call, run after validation in
// model order. It returns "" to admit the call or a block category and the
// reason the model sees. Nil admits everything.
type Gate func(t *tool.Tool, args json.RawMessage, d tool.Declarations) (events.Block, string)

// PlanInput is what the pre-phase needs beyond the calls.
type PlanInput struct {
	Lookup Lookup
	Gate   Gate
	// Timeout returns the call timeout for a tool (config overrides applied).
	Timeout func(t *tool.Tool) time.Duration
}

// Plan runs the pre-phase over a turn's calls in model order (SPEC §2.1):
// resolve the tool (→ unavailable), decode and validate the arguments (→
// invalid_arguments), then the gate (→ denied). It is pure: the same calls and
// tools give the same plan.
func Plan(calls []events.CallSpec, in PlanInput) []events.PlanEntry {
	plan := make([]events.PlanEntry, len(calls))
	for i, c := range calls {
		plan[i] = planOne(i, c, in)
	}
	return plan
}

func planOne(i int, c events.CallSpec, in PlanInput) events.PlanEntry {
	e := events.PlanEntry{Index: i, Name: c.Name}
	t, ok := in.Lookup(c.Name)
	if !ok {
		e.Blocked = events.BlockUnavailable
		e.Reason = fmt.Sprintf("tool %q is not available in this session; use one of the tools you were given", c.Name)
		return e
	}
	args, err := tool.NormalizeArguments(c.Arguments)
	if err == nil && t.Validate != nil {
		err = t.Validate(args)
	}
	if err != nil {
		e.Blocked = events.BlockInvalidArguments
		e.Reason = fmt.Sprintf("invalid arguments for %s: %v", c.Name, err)
		return e
	}
	d := t.DeclarationsFor(args)
	if in.Gate != nil {
		if b, reason := in.Gate(t, args, d); b != "" {
			e.Blocked, e.Reason = b, reason
			return e
		}
	}
	e.Effect, e.Replay, e.Concurrency = string(d.Effect), string(d.Replay), string(d.Concurrency)
	if d.Concurrency == tool.ConcurrencyExclusive {
		if n := t.SelfCap(); n >= 2 {
			e.Group, e.GroupCap = t.Name, n
		}
	}
	timeout := t.EffectiveTimeout()
	if in.Timeout != nil {
		timeout = in.Timeout(t)
	}
	if timeout > 0 {
		e.TimeoutMS = timeout.Milliseconds()
	} else {
		e.TimeoutMS = -1 // infinite (user-mediated)
	}
	return e
}

// Slots turns a plan into the schedule's view of it.
func Slots(plan []events.PlanEntry) []Slot {
	slots := make([]Slot, len(plan))
	for i, e := range plan {
		slots[i] = Slot{
			Class:    tool.Concurrency(e.Concurrency),
			Group:    e.Group,
			GroupCap: e.GroupCap,
			Skip:     e.Blocked != "",
		}
	}
	return slots
}
