package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// fact is one line about a call, a turn or the session: the Markdown prints
// it as "Label: Text", the timeline page as a row of the call's details, so
// both say the same thing in the same words.
type fact struct {
	Label string
	Text  string
}

// Longest JSON value (an answer, a work state, a mark's data) written on one
// fact line; the page shows the whole value in the call's details.
const factJSON = 400

// callFacts lists what happened to call c of turn t, in the order it
// happened: the plan, a block, the approval, each attempt with its retry,
// checkpoints, the indeterminate settlement, a cancellation, answers, work
// state, the commit, and any event the audit could only mark. Times are
// offsets from the turn's TurnReceived.
func callFacts(t *projections.AuditTurn, c *projections.AuditCall) []fact {
	base := t.Received.Time
	var fs []fact
	add := func(label, format string, args ...any) {
		fs = append(fs, fact{label, fmt.Sprintf(format, args...)})
	}
	if !c.Arrived.IsZero() {
		add("Arrived", "at %s, in the batch recorded at seq %d, while the model streamed", offset(base, c.Arrived.Time), c.Arrived.Seq)
	}
	if p := planText(c.Plan); p != "" {
		add("Plan", "%s", p)
	}
	if b := c.Blocked; b != nil {
		rule := ""
		if b.Rule != "" {
			rule = " (rule " + b.Rule + ")"
		}
		add("Blocked", "%s at %s%s: %s; nothing ran", b.Category, offset(base, b.Time), rule, oneLine(b.Reason))
	}
	if ap := c.Approval; ap != nil {
		add("Approval", "%s", approvalText(base, ap))
	}
	for _, a := range c.Attempts {
		add(fmt.Sprintf("Attempt %d", a.Attempt), "%s", attemptText(base, a))
		for _, r := range c.Retries {
			if r.Attempt == a.Attempt+1 {
				due := "-"
				if !r.Due.IsZero() {
					due = offset(base, r.Due)
				}
				add("Retry", "attempt %d scheduled at %s after %s, due %s: %s", r.Attempt, offset(base, r.Time), dur(r.Delay), due, oneLine(r.Error))
			}
		}
	}
	for _, r := range c.Retries { // a retry whose failed attempt the log does not hold
		if !hasAttempt(c, r.Attempt-1) {
			add("Retry", "attempt %d scheduled at %s after %s: %s", r.Attempt, offset(base, r.Time), dur(r.Delay), oneLine(r.Error))
		}
	}
	for _, k := range c.Checkpoints {
		state := fmt.Sprintf("%d bytes", k.Size)
		if !k.Existed {
			state = "did not exist; a rewind removes it"
		} else if k.SHA256 != "" {
			state += ", sha256 " + clip(k.SHA256, 13)
		}
		add("Checkpoint", "%s (%s) before attempt %d, at %s", k.Path, state, k.Attempt, offset(base, k.Time))
	}
	if in := c.Indeterminate; in != nil {
		told := "no later turn has told the model yet"
		if in.NoticedIn != "" {
			told = "the model was told in turn " + in.NoticedIn
		}
		add("Indeterminate", "attempt %d at %s: %s; it will not run again; %s", in.Attempt, offset(base, in.Time), oneLine(in.Reason), told)
	}
	if x := c.Cancelled; x != nil {
		how := "before it ran"
		if x.Running {
			how = "while running; its outcome came from the tool"
		}
		add("Cancelled", "at %s, %s: %s", offset(base, x.Time), how, oneLine(x.Reason))
	}
	for _, an := range c.Answers {
		by := "answered"
		if an.By != "" {
			by = "answered by " + an.By
		}
		add("Answer", "%s at %s: %s", by, offset(base, an.Time), compactJSON(an.Answer, factJSON))
	}
	for _, w := range c.WorkState {
		add("Work state", "%s set at %s: %s", w.Kind, offset(base, w.Time), compactJSON(w.Value, factJSON))
	}
	if !c.Committed.IsZero() {
		add("Committed", "at %s (%s)", offset(base, c.Committed.Time), clock(c.Committed.Time))
	}
	for _, m := range c.Marks {
		add("Event", "%s", markText(base, m))
	}
	return fs
}

func hasAttempt(c *projections.AuditCall, n int) bool {
	for _, a := range c.Attempts {
		if a.Attempt == n {
			return true
		}
	}
	return false
}

// planText says how the pre-phase classified the call.
func planText(p events.PlanEntry) string {
	var parts []string
	if d := strings.Join(nonEmpty(string(p.Effect), string(p.Replay), string(p.Concurrency)), ", "); d != "" {
		parts = append(parts, d)
	}
	if p.Group != "" {
		parts = append(parts, fmt.Sprintf("group %s of %d", p.Group, p.GroupCap))
	}
	switch {
	case p.TimeoutMS < 0:
		parts = append(parts, "no timeout")
	case p.TimeoutMS > 0:
		parts = append(parts, "timeout "+(time.Duration(p.TimeoutMS)*time.Millisecond).String())
	}
	if p.Rule != "" {
		parts = append(parts, "rule "+p.Rule)
	}
	if p.Ask {
		parts = append(parts, "asks a person")
	}
	if p.Escalate {
		parts = append(parts, "asks to leave the sandbox")
	}
	if len(p.Labels) > 0 {
		parts = append(parts, "labels "+strings.Join(p.Labels, ", "))
	}
	if p.RewrittenBy != "" {
		parts = append(parts, "arguments rewritten by "+p.RewrittenBy)
	}
	return strings.Join(parts, "; ")
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// approvalText says who was asked, why, and who decided when.
func approvalText(base time.Time, ap *projections.Approval) string {
	var b strings.Builder
	fmt.Fprintf(&b, "asked at %s (rule %s", offset(base, ap.Requested.Time), ap.Rule)
	if ap.Reason != "" {
		fmt.Fprintf(&b, ": %s", oneLine(ap.Reason))
	}
	b.WriteString(")")
	if ap.Escalate {
		b.WriteString(", to run outside the sandbox")
	}
	waited := dur(ap.Decided.Time.Sub(ap.Requested.Time))
	switch ap.Decision {
	case projections.DecisionAllow:
		fmt.Fprintf(&b, "; allowed by %s at %s (%s; waited %s), scope %s", ap.By, when(ap.Decided.Time), offset(base, ap.Decided.Time), waited, ap.Scope)
		if ap.DecisionReason != "" {
			fmt.Fprintf(&b, ": %s", oneLine(ap.DecisionReason))
		}
	case projections.DecisionDeny:
		fmt.Fprintf(&b, "; denied by %s at %s (%s; waited %s): %s", ap.By, when(ap.Decided.Time), offset(base, ap.Decided.Time), waited, oneLine(ap.DecisionReason))
	default:
		b.WriteString("; pending: nobody has decided yet")
	}
	return b.String()
}

// attemptText lays out one attempt's steps and how it ended.
func attemptText(base time.Time, a projections.Attempt) string {
	var steps []string
	if !a.Requested.IsZero() {
		steps = append(steps, "requested "+offset(base, a.Requested.Time))
	}
	if !a.Claimed.IsZero() {
		s := fmt.Sprintf("claimed %s by %s", offset(base, a.Claimed.Time), a.Worker)
		if a.ExternalWorker != "" {
			s += fmt.Sprintf(" for worker %s, which took it", a.ExternalWorker)
		}
		if a.ClaimedWithOutcome {
			s += " (with its outcome: it ran before its claim)"
		}
		steps = append(steps, s)
	}
	if !a.Started.IsZero() {
		steps = append(steps, "started "+offset(base, a.Started))
	}
	out := strings.Join(steps, ", ")
	if a.Ended.IsZero() {
		switch {
		case a.Running():
			return out + "; running"
		case !a.Requested.IsZero():
			return out + "; not claimed yet"
		}
		return out
	}
	var how string
	switch a.Outcome {
	case projections.AttemptOK:
		how = fmt.Sprintf("completed %s: ok, ran %s", offset(base, a.Ended.Time), durMS(a.DurationMS))
		if a.Truncated && a.FullOutput != nil {
			how += fmt.Sprintf("; output cut (full: %d bytes, %d lines)", a.FullOutput.Bytes, a.FullOutput.Lines)
		}
	case projections.AttemptError:
		how = fmt.Sprintf("failed %s, ran %s", offset(base, a.Ended.Time), durMS(a.DurationMS))
		var notes []string
		if a.TimedOut {
			notes = append(notes, "timed out")
		}
		if a.Final {
			notes = append(notes, "final")
		}
		if len(notes) > 0 {
			how += " (" + strings.Join(notes, ", ") + ")"
		}
		how += ": " + oneLine(a.Error)
	case projections.AttemptIndeterminate:
		how = fmt.Sprintf("indeterminate %s: %s", offset(base, a.Ended.Time), oneLine(a.Reason))
	}
	if q := a.Queued(); q > 0 {
		how += fmt.Sprintf("; queued %s", dur(q))
	}
	if out == "" {
		return how
	}
	return out + "; " + how
}

// markText says what an event the audit could only mark is, and why.
func markText(base time.Time, m projections.Mark) string {
	return fmt.Sprintf("%s at %s (seq %d): %s; data %s", m.Type, offset(base, m.Time), m.Seq, m.Problem, compactJSON(m.Data, factJSON))
}

// compactJSON renders a JSON value on one line, cut to n runes.
func compactJSON(v json.RawMessage, n int) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return clip(oneLine(string(v)), n)
	}
	return clip(b.String(), n)
}

// prettyJSON indents a JSON value; a JSON string that holds JSON (arguments
// as some providers send them) is shown as the JSON it holds.
func prettyJSON(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil && json.Valid([]byte(s)) {
		v = json.RawMessage(s)
	}
	var b bytes.Buffer
	if json.Indent(&b, v, "", "  ") != nil {
		return string(v)
	}
	return b.String()
}

// turnFacts says when a turn ran and how it was scheduled; for a streamed
// turn, how its calls arrived and how it ended.
func turnFacts(t *projections.AuditTurn) string {
	s := "received " + when(t.Received.Time)
	if t.Streamed {
		batches := fmt.Sprintf("%d batches", len(t.Batches))
		if len(t.Batches) == 1 {
			batches = "1 batch"
		}
		s = fmt.Sprintf("opened %s, streamed in %s", when(t.Received.Time), batches)
		switch e := t.Ended; {
		case e == nil:
			s += ", open for more calls"
		case e.Reason == events.EndedByTimeout:
			s += ", ended " + offset(t.Received.Time, e.Time) + " by turns.stream_timeout"
		case e.Reason == events.EndedByCancel:
			s += ", ended " + offset(t.Received.Time, e.Time) + " by its cancellation"
		default:
			s += ", ended " + offset(t.Received.Time, e.Time) + " by the harness"
		}
	}
	if !t.Completed.IsZero() {
		s += ", completed " + offset(t.Received.Time, t.Completed.Time)
	} else {
		s += ", running (last event " + offset(t.Received.Time, t.End) + ")"
	}
	mode := "parallel"
	if !t.ParallelToolCalls {
		mode = "one at a time"
	}
	return fmt.Sprintf("%s; %s, %s, cap %d", s, plural(len(t.Calls), "call"), mode, t.Cap)
}

// noticeText is a retry notice as the Markdown has always written it, with
// its time.
func noticeText(t *projections.AuditTurn, n projections.AuditNotice) string {
	return fmt.Sprintf("call %s (%s, turn %s, attempt %d) at %s: %s", n.About.Call, n.Tool, n.About.Turn, n.Attempt, offset(t.Received.Time, n.Time), oneLine(n.Text))
}

// sessionFacts lists the session-level facts: where it ran, its span, its
// outcomes, pending approvals, rewinds, its close and its marks.
func sessionFacts(a projections.Audit) []fact {
	var fs []fact
	add := func(label, format string, args ...any) {
		fs = append(fs, fact{label, fmt.Sprintf(format, args...)})
	}
	where := []string{}
	if a.Tenant != "" {
		where = append(where, "tenant "+a.Tenant)
	}
	if o := a.Opened; o != nil {
		where = append(where, "workspace "+o.Workspace)
		if o.Agent != "" {
			where = append(where, "agent "+o.Agent)
		}
	}
	if len(where) > 0 {
		add("Session", "%s", strings.Join(where, ", "))
	}
	if o := a.Opened; o != nil {
		add("Opened", "%s", when(o.Time))
	}
	if a.Events > 0 {
		add("Events", "%d (seq %d to %d), %s to %s", a.Events, a.First.Seq, a.Last.Seq, when(a.First.Time), when(a.Last.Time))
	}
	if oc := outcomeText(a); oc != "" {
		add("Outcomes", "%s", oc)
	}
	for _, p := range a.PendingApprovals() {
		add("Pending approval", "call %s (%s) of turn %s, asked %s (rule %s)", p.Call.ID, p.Call.Name, p.Turn, when(p.Call.Approval.Requested.Time), p.Call.Approval.Rule)
	}
	for _, o := range a.Owners {
		switch {
		case o.Released:
			add("Released", "%s by node %s (epoch %d): any node may take the session", when(o.Time), o.Node, o.Epoch)
		case o.WorkspaceAway != "":
			add("Owner", "node %s from %s (epoch %d), without the workspace, which is on node %s", o.Node, when(o.Time), o.Epoch, o.WorkspaceAway)
		default:
			add("Owner", "node %s from %s (epoch %d)", o.Node, when(o.Time), o.Epoch)
		}
	}
	for _, r := range a.Rewinds {
		add("Rewound", "at %s to just before call %s of turn %s: restored %s; removed %s", when(r.Time), r.To.Call, r.To.Turn, list(r.Restored), list(r.Removed))
	}
	if c := a.Closed; c != nil {
		reason := ""
		if c.Reason != "" {
			reason = ": " + oneLine(c.Reason)
		}
		add("Closed", "%s%s", when(c.Time), reason)
	}
	for _, sg := range a.Signatures {
		by := ""
		if sg.Signed.By != "" {
			by = " by " + oneLine(sg.Signed.By)
		}
		add("Signed", "%s: the head at seq %d (hash %s) with key %s (%s%s); replay --verify checks it", when(sg.Time), sg.Signed.Seq, oneLine(sg.Signed.Hash), oneLine(keyPrefix(sg.Signed.Key)), oneLine(sg.Signed.Reason), by)
	}
	for _, m := range a.Marks {
		add("Event", "%s", markText(a.First.Time, m))
	}
	return fs
}

// keyPrefix cuts a key id to the 16 characters that name it in a list.
func keyPrefix(id string) string {
	if len(id) > 16 {
		return id[:16]
	}
	return id
}

func list(ss []string) string {
	if len(ss) == 0 {
		return "nothing"
	}
	return strings.Join(ss, ", ")
}

// outcomeOrder is the order outcomes are counted in.
var outcomeOrder = []events.Outcome{events.OutcomeOK, events.OutcomeError, events.OutcomeBlocked, events.OutcomeIndeterminate}

// outcomeText counts the committed results: "3 ok, 1 blocked".
func outcomeText(a projections.Audit) string {
	counts := a.Outcomes()
	var parts []string
	for _, o := range outcomeOrder {
		if n := counts[o]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, o))
		}
	}
	return strings.Join(parts, ", ")
}
