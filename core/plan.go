package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/permission"
	"github.com/callsheet/callsheet/tool"
)

// Lookup resolves a tool name for one session: ok is false when the tool is
// unknown or not available to the session (disabled, or not in its agent's
// list).
type Lookup func(name string) (t *tool.Tool, ok bool)

// Override is a middleware's verdict on one call, decided by the shell
// before the turn reaches the core (hooks and middleware do I/O): a denial,
// or rewritten arguments, which are validated again.
type Override struct {
	Deny string // the reason the model sees; "" for none
	By   string // the middleware's name
	Args json.RawMessage
}

// PlanInput is what the pre-phase needs beyond the calls.
type PlanInput struct {
	Lookup Lookup
	// Policy decides permission; the session's grants are added to it.
	Policy permission.Policy
	// Overrides are middleware verdicts by call index (may be nil).
	Overrides map[int]Override
	// Timeout returns the call timeout for a tool (config overrides applied).
	Timeout func(t *tool.Tool) time.Duration
	// WorkspaceAway names the node holding the session's workspace when the
	// session's owner cannot reach it (ReceiveTurn fills it from the
	// session): a call of a tool that needs the workspace is then blocked
	// as unavailable.
	WorkspaceAway string
	// EscalatedBefore says an earlier call of the turn escalated (a
	// streamed turn's earlier batches: AddCalls fills it), so an escalation
	// in these calls is not the turn's first.
	EscalatedBefore bool
	// Unavailable, when set, says why a tool Lookup does not find is not
	// there ("MCP server fs could not start: ..."); "" keeps the generic
	// reason. May be nil.
	Unavailable func(name string) string
}

// WorkspaceAwayReason is what a call that needs the session's workspace is
// told when the node holding it is lost (docs/spec.md §7).
func WorkspaceAwayReason(name, node string) string {
	return fmt.Sprintf("%s needs this session's workspace, which is kept on node %s, and that node is not available now; calls of tools that need no workspace still run", name, node)
}

// Plan runs the pre-phase over a turn's calls in model order (docs/spec.md §2.1):
// resolve the tool (→ unavailable), decode and validate the arguments (→
// invalid_arguments), then the gate (→ denied). It is pure: the same calls and
// tools give the same plan.
func Plan(calls []events.CallSpec, in PlanInput) []events.PlanEntry {
	plan := make([]events.PlanEntry, len(calls))
	escalated := in.EscalatedBefore
	for i, c := range calls {
		plan[i] = planOne(i, c, in, escalated)
		escalated = escalated || (plan[i].Escalate && plan[i].Blocked == "")
	}
	return plan
}

func planOne(i int, c events.CallSpec, in PlanInput, escalatedBefore bool) events.PlanEntry {
	e := events.PlanEntry{Index: i, Name: c.Name}
	t, ok := in.Lookup(c.Name)
	if !ok {
		e.Blocked = events.BlockUnavailable
		e.Reason = fmt.Sprintf("tool %q is not available in this session; use one of the tools you were given", c.Name)
		if in.Unavailable != nil {
			if why := in.Unavailable(c.Name); why != "" {
				e.Reason = fmt.Sprintf("tool %q is not available: %s", c.Name, why)
			}
		}
		return e
	}
	e.WorkspaceFree = t.WorkspaceFree
	if !t.WorkspaceFree && in.WorkspaceAway != "" {
		e.Blocked, e.Reason = events.BlockUnavailable, WorkspaceAwayReason(c.Name, in.WorkspaceAway)
		return e
	}
	raw := c.Arguments
	o, overridden := in.Overrides[i]
	if overridden && o.Args != nil {
		raw = o.Args
	}
	args, err := ValidArguments(t, raw)
	if err != nil {
		e.Blocked = events.BlockInvalidArguments
		e.Reason = fmt.Sprintf("invalid arguments for %s: %v", c.Name, err)
		if overridden && o.Args != nil {
			e.Reason = fmt.Sprintf("arguments rewritten by middleware %s are invalid for %s: %v", o.By, c.Name, err)
		}
		return e
	}
	if overridden && o.Args != nil {
		e.Rewritten, e.RewrittenBy = args, o.By
	} else if norm, err := tool.NormalizeArguments(raw); err == nil && !bytes.Equal(norm, args) {
		e.Args = args // optional nulls dropped: record what runs
	}
	if overridden && o.Deny != "" {
		e.Blocked, e.Reason, e.Rule = events.BlockDenied, o.Deny, "middleware:"+o.By
		return e
	}
	d := t.DeclarationsFor(args)
	e.Escalate = escalates(args)
	if e.Escalate && !t.Escalation {
		e.Blocked, e.Rule = events.BlockDenied, "escalation"
		e.Reason = fmt.Sprintf("%s cannot run outside the sandbox: only tools that declare escalation may carry escalate: true", c.Name)
		return e
	}
	dec := permission.Decide(in.Policy, permission.Call{Tool: t, Args: args, Decl: d, Escalate: e.Escalate, EscalatedBefore: escalatedBefore})
	e.Rule = dec.Rule
	switch dec.Action {
	case permission.Deny:
		e.Blocked, e.Reason = events.BlockDenied, dec.Reason
		return e
	case permission.Ask:
		e.Ask, e.Reason = true, dec.Reason
	}
	e.Effect, e.Replay, e.Concurrency = d.Effect, d.Replay, d.Concurrency
	for _, l := range t.Labels {
		e.Labels = append(e.Labels, string(l))
	}
	if d.Concurrency == tool.ConcurrencyExclusive {
		if n := t.SelfCap(); n >= 2 {
			e.Group, e.GroupCap = t.Name, n
		}
	}
	if t.FleetCap > 0 {
		e.FleetCap, e.FleetCapScope = t.FleetCap, t.FleetCapScope
		if e.FleetCapScope == "" {
			e.FleetCapScope = tool.FleetCapTenant
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
			Class:    e.Concurrency,
			Group:    e.Group,
			GroupCap: e.GroupCap,
			Skip:     e.Blocked != "",
			Pending:  e.Ask,
		}
	}
	return slots
}

// ValidArguments decodes raw arguments (an object, or a string holding one)
// and validates them against t's schema (tool.Tool.Arguments: optional
// fields sent as null count as absent): the pre-phase's check, shared with
// the shell's before-hooks, which see only calls that pass it.
func ValidArguments(t *tool.Tool, raw json.RawMessage) (json.RawMessage, error) {
	return t.Arguments(raw)
}

// escalates reports whether arguments carry "escalate": true.
func escalates(args json.RawMessage) bool {
	// encoding/json matches the member's name after decoding its escapes
	// and folding its case, Unicode's too (the long s folds to s), so only
	// arguments of plain ASCII, without a backslash or any casing of
	// "escalate", are known not to escalate without decoding them. The tool
	// decodes the same bytes: the two must never disagree (docs/security.md).
	if plainASCII(args) && !containsFold(args, "escalate") {
		return false
	}
	var a struct {
		Escalate bool `json:"escalate"`
	}
	return json.Unmarshal(args, &a) == nil && a.Escalate
}

// plainASCII reports whether b holds only ASCII and no backslash.
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf || c == '\\' {
			return false
		}
	}
	return true
}

// containsFold reports whether the ASCII s holds word (lowercase ASCII
// letters) in any casing.
func containsFold(s []byte, word string) bool {
	for i := 0; i+len(word) <= len(s); i++ {
		j := 0
		for ; j < len(word); j++ {
			if s[i+j]|0x20 != word[j] {
				break
			}
		}
		if j == len(word) {
			return true
		}
	}
	return false
}
