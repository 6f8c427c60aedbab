package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/callsheet/callsheet/decl"
	"github.com/callsheet/callsheet/events"
)

// The span attributes of turns and calls (docs/operations.md, "Traces"):
// the OpenTelemetry GenAI semantic conventions' for a tool's execution,
// and callsheet's own. The GenAI conventions are not in the Go semconv
// packages yet (they are in development), so their keys are spelled here.
const (
	attrOperation  = attribute.Key("gen_ai.operation.name")
	attrToolName   = attribute.Key("gen_ai.tool.name")
	attrToolCallID = attribute.Key("gen_ai.tool.call.id")
	attrToolType   = attribute.Key("gen_ai.tool.type")
	attrErrorType  = attribute.Key("error.type")

	attrTenant   = attribute.Key("callsheet.tenant")
	attrSession  = attribute.Key("callsheet.session")
	attrTurn     = attribute.Key("callsheet.turn")
	attrNode     = attribute.Key("callsheet.node")
	attrCalls    = attribute.Key("callsheet.calls")
	attrEffect   = attribute.Key("callsheet.effect")
	attrReplay   = attribute.Key("callsheet.replay")
	attrOutcome  = attribute.Key("callsheet.outcome")
	attrAttempt  = attribute.Key("callsheet.attempt")
	attrBlock    = attribute.Key("callsheet.block")
	attrRule     = attribute.Key("callsheet.rule")
	attrDecision = attribute.Key("callsheet.approval.decision")
	attrDecider  = attribute.Key("callsheet.approval.decider")
	attrScope    = attribute.Key("callsheet.approval.scope")
	attrDelayMS  = attribute.Key("callsheet.retry.delay_ms")
	attrNext     = attribute.Key("callsheet.retry.attempt")
)

// Span names: a turn, a tool's execution (GenAI: "execute_tool
// {gen_ai.tool.name}"), the wait for a person's approval.
const (
	spanTurn     = "callsheet.turn"
	spanTool     = "execute_tool "
	spanApproval = "callsheet.approval "
	// opExecuteTool is gen_ai.operation.name of a tool's execution.
	opExecuteTool = "execute_tool"
	// toolTypeFunction is gen_ai.tool.type: every callsheet tool is run
	// by the client of the model (the harness's side), as a function.
	toolTypeFunction = "function"
	// maxOpenTurns bounds the turns observed at once; past it the turns
	// quiet longest are dropped (a node that lost a session mid-turn
	// never sees its end).
	maxOpenTurns = 4096
)

// observer makes the node's log lines and spans of turns from the events
// its session actors made durable, in order (actors.Durable): the log is the
// truth, so what a line or a span says of a call's outcome is what its
// events record, and the times are theirs. One line for each turn received
// and completed, approval asked and decided, call denied, retry scheduled
// and indeterminate call; at debug, each attempt settled. With a tracer: a
// span per turn (the child of the harness's traceparent, when the request
// had one), one per attempt of a call ("execute_tool NAME"), one per
// approval. It never blocks: spans end into the SDK's batcher. Safe for
// concurrent use.
type observer struct {
	log    *slog.Logger
	tracer trace.Tracer // nil: no spans
	node   string

	mu      sync.Mutex
	parents map[turnKey]trace.SpanContext // the traceparent of each turn being submitted
	turns   map[turnKey]*turnObs
}

type turnKey struct{ tenant, session, turn string }

// turnObs is what the observer knows of one open turn.
type turnObs struct {
	key      turnKey
	received time.Time
	last     time.Time // the last event seen
	calls    []planned
	ids      []string // the model's call ids, by index
	outcomes map[events.Outcome]int
	span     trace.Span
	ctx      context.Context    // carries span, for its children
	attempt  map[int]trace.Span // the failed attempt a retry will follow, by call index
	approval map[int]trace.Span // the approvals asked, by call index
}

// newObserver returns an observer logging to log and, unless tp is nil or
// a no-op provider, making spans with tp's tracer.
func newObserver(log *slog.Logger, tp trace.TracerProvider, node string) *observer {
	o := &observer{log: log.With("component", "turns"), node: node, parents: map[turnKey]trace.SpanContext{}, turns: map[turnKey]*turnObs{}}
	if _, off := tp.(noop.TracerProvider); tp != nil && !off {
		o.tracer = tp.Tracer("github.com/callsheet/callsheet/node")
	}
	return o
}

// expect notes the remote span a turn's request carried (its traceparent),
// as its span's parent, until done is called; a request without one notes
// nothing.
func (o *observer) expect(ctx context.Context, tenant, session, turn string) (done func()) {
	sc := trace.SpanContextFromContext(ctx)
	if o.tracer == nil || !sc.IsValid() {
		return func() {}
	}
	k := turnKey{tenant, session, turn}
	o.mu.Lock()
	o.parents[k] = sc
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		delete(o.parents, k)
		o.mu.Unlock()
	}
}

// Durable takes a session's batch of durable events (actors.Durable).
func (o *observer) Durable(tenant, session string, evs []events.Event) {
	for _, ev := range evs {
		switch ev.Type {
		case events.TypeTurnReceived:
			o.received(ev)
		case events.TypeDispatchBlocked:
			o.blocked(ev)
		case events.TypeApprovalRequested:
			o.asked(ev)
		case events.TypeApprovalGranted, events.TypeApprovalDenied:
			o.decided(ev)
		case events.TypeToolCallCompleted, events.TypeToolCallFailed, events.TypeToolCallIndeterminate:
			o.settled(ev)
		case events.TypeRetryScheduled:
			o.retry(ev)
		case events.TypeResultCommitted:
			o.committed(ev)
		case events.TypeTurnCompleted:
			o.completed(ev)
		}
	}
}

// turn returns the open turn ev belongs to, or nil.
func (o *observer) turn(ev events.Event, turn string) *turnObs {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.turns[turnKey{ev.Tenant, ev.Session, turn}]
	if t != nil {
		t.last = ev.Time
	}
	return t
}

// turnReceived is what the observer reads of a TurnReceived: not the
// calls' arguments.
type turnReceived struct {
	Turn  string `json:"turn"`
	Calls []struct {
		ID string `json:"id"`
	} `json:"calls"`
	Plan []planned `json:"plan"`
}

// planned is what the observer keeps of a call's plan entry.
type planned struct {
	Name   string      `json:"name"`
	Effect decl.Effect `json:"effect"`
	Replay decl.Replay `json:"replay"`
}

// keptTurn is what the observer reads of a TurnReceived the session actor
// just decided (events.Kept): what decoding its payload would give.
func keptTurn(tr events.TurnReceived) turnReceived {
	p := turnReceived{Turn: tr.Turn}
	if tr.Calls != nil {
		p.Calls = make([]struct {
			ID string `json:"id"`
		}, len(tr.Calls))
		for i, c := range tr.Calls {
			p.Calls[i].ID = c.ID
		}
	}
	if tr.Plan != nil {
		p.Plan = make([]planned, len(tr.Plan))
		for i, e := range tr.Plan {
			p.Plan[i] = planned{Name: e.Name, Effect: e.Effect, Replay: e.Replay}
		}
	}
	return p
}

func (o *observer) received(ev events.Event) {
	var p turnReceived
	if tr, ok := events.Kept[events.TurnReceived](ev); ok {
		p = keptTurn(tr)
	} else {
		var d turnReceived // apart from p, which decoding's &d would move to the heap
		if events.DecodePartial(ev, &d) != nil {
			return
		}
		p = d
	}
	k := turnKey{ev.Tenant, ev.Session, p.Turn}
	t := &turnObs{key: k, received: ev.Time, last: ev.Time, calls: p.Plan, outcomes: map[events.Outcome]int{}}
	t.ids = make([]string, len(p.Calls))
	for i, c := range p.Calls {
		t.ids[i] = c.ID
	}
	if o.log.Enabled(context.Background(), slog.LevelInfo) { // its arguments allocate even when off
		o.log.Info("turn received", "tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn, "calls", len(p.Calls))
	}
	o.mu.Lock()
	parent, hasParent := o.parents[k]
	o.mu.Unlock()
	if o.tracer != nil {
		ctx := context.Background()
		if hasParent {
			ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		}
		t.ctx, t.span = o.tracer.Start(ctx, spanTurn, trace.WithTimestamp(ev.Time), trace.WithAttributes(
			attrTenant.String(ev.Tenant), attrSession.String(ev.Session), attrTurn.String(p.Turn),
			attrCalls.Int(len(p.Calls)), attrNode.String(o.node)))
		t.attempt, t.approval = map[int]trace.Span{}, map[int]trace.Span{}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.turns) >= maxOpenTurns {
		o.dropQuietestLocked()
	}
	o.turns[k] = t
}

// dropQuietestLocked forgets the open turn quiet longest, ending its span;
// mu is held.
func (o *observer) dropQuietestLocked() {
	var oldest *turnObs
	for _, t := range o.turns {
		if oldest == nil || t.last.Before(oldest.last) {
			oldest = t
		}
	}
	if oldest != nil {
		oldest.end("dropped: too many open turns on this node", time.Now())
		delete(o.turns, oldest.key)
	}
}

// name and spec return what the plan says of call i.
func (t *turnObs) name(i int) string {
	if i >= 0 && i < len(t.calls) {
		return t.calls[i].Name
	}
	return ""
}

func (t *turnObs) id(i int) string {
	if i >= 0 && i < len(t.ids) {
		return t.ids[i]
	}
	return ""
}

func (o *observer) blocked(ev events.Event) {
	var p events.DispatchBlocked
	if events.DecodeInto(ev, &p) != nil {
		return
	}
	if p.Category == events.BlockDenied {
		o.log.Info("call denied", "tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn, "call", p.Call, "tool", p.Name, "rule", p.Rule, "reason", p.Reason)
	} else {
		o.log.Debug("call blocked", "tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn, "call", p.Call, "tool", p.Name, "block", string(p.Category), "reason", p.Reason)
	}
	if t := o.turn(ev, p.Turn); t != nil && t.span != nil {
		t.span.AddEvent("callsheet.call_blocked", trace.WithTimestamp(ev.Time), trace.WithAttributes(
			attrToolName.String(p.Name), attrToolCallID.String(p.Call), attrBlock.String(string(p.Category)), attrRule.String(p.Rule)))
	}
}

func (o *observer) asked(ev events.Event) {
	var p events.ApprovalRequested
	if events.DecodeInto(ev, &p) != nil {
		return
	}
	o.log.Info("approval asked", "tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn, "call", p.Call, "tool", p.Name, "rule", p.Rule, "reason", p.Reason)
	t := o.turn(ev, p.Turn)
	if t == nil || t.span == nil {
		return
	}
	_, span := o.tracer.Start(t.ctx, spanApproval+p.Name, trace.WithTimestamp(ev.Time), trace.WithAttributes(
		attrToolName.String(p.Name), attrToolCallID.String(p.Call), attrRule.String(p.Rule),
		attrTenant.String(ev.Tenant), attrSession.String(ev.Session), attrTurn.String(p.Turn)))
	span.AddEvent("callsheet.approval.asked", trace.WithTimestamp(ev.Time))
	o.mu.Lock()
	t.approval[p.Index] = span
	o.mu.Unlock()
}

func (o *observer) decided(ev events.Event) {
	// Both payloads carry the call, who decided and why.
	var p struct {
		events.CallRef
		Name   string `json:"name"`
		By     string `json:"by"`
		Scope  string `json:"scope"`
		Reason string `json:"reason"`
	}
	if events.DecodePartial(ev, &p) != nil {
		return
	}
	decision := "granted"
	if ev.Type == events.TypeApprovalDenied {
		decision = "denied"
	}
	args := []any{"tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn, "call", p.Call, "tool", p.Name, "decision", decision, "decider", p.By}
	if p.Scope != "" {
		args = append(args, "scope", p.Scope)
	}
	if p.Reason != "" {
		args = append(args, "reason", p.Reason)
	}
	o.log.Info("approval decided", args...)
	t := o.turn(ev, p.Turn)
	if t == nil || t.span == nil {
		return
	}
	o.mu.Lock()
	span := t.approval[p.Index]
	delete(t.approval, p.Index)
	o.mu.Unlock()
	if span == nil {
		return
	}
	span.SetAttributes(attrDecision.String(decision), attrDecider.String(p.By), attrScope.String(p.Scope))
	span.AddEvent("callsheet.approval.decided", trace.WithTimestamp(ev.Time), trace.WithAttributes(attrDecision.String(decision), attrDecider.String(p.By)))
	span.End(trace.WithTimestamp(ev.Time))
}

// attemptOf is what every outcome event says of an attempt.
type attemptOf struct {
	events.CallRef
	Attempt    int     `json:"attempt"`
	DurationMS float64 `json:"duration_ms"`
	Error      string  `json:"error"`
	Final      bool    `json:"final"`
	TimedOut   bool    `json:"timed_out"`
	Reason     string  `json:"reason"`
}

func (o *observer) settled(ev events.Event) {
	level := slog.LevelDebug
	if ev.Type == events.TypeToolCallIndeterminate {
		level = slog.LevelWarn
	}
	if o.tracer == nil && !o.log.Enabled(context.Background(), level) {
		return // nothing would use it: no decoding
	}
	var p attemptOf
	if events.DecodePartial(ev, &p) != nil {
		return
	}
	outcome, errType := "ok", ""
	switch ev.Type {
	case events.TypeToolCallFailed:
		outcome, errType = "error", "tool_error"
		if p.TimedOut {
			errType = "timeout"
		}
	case events.TypeToolCallIndeterminate:
		outcome, errType = "indeterminate", "indeterminate"
		p.Error = p.Reason
	}
	t := o.turn(ev, p.Turn)
	name := ""
	if t != nil {
		name = t.name(p.Index)
	}
	if ev.Type == events.TypeToolCallIndeterminate {
		o.log.Warn("call indeterminate: its effect may or may not have happened", "tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn, "call", p.Call, "tool", name, "attempt", p.Attempt, "reason", p.Reason)
	} else {
		o.log.Debug("call attempt settled", "tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn, "call", p.Call, "tool", name, "attempt", p.Attempt, "outcome", outcome, "duration_ms", p.DurationMS)
	}
	if t == nil || t.span == nil {
		return
	}
	end := ev.Time
	start := end.Add(-time.Duration(p.DurationMS * float64(time.Millisecond)))
	plan := planned{Name: name}
	if p.Index >= 0 && p.Index < len(t.calls) {
		plan = t.calls[p.Index]
	}
	_, span := o.tracer.Start(t.ctx, spanTool+name, trace.WithTimestamp(start), trace.WithAttributes(
		attrOperation.String(opExecuteTool), attrToolName.String(name), attrToolCallID.String(p.Call), attrToolType.String(toolTypeFunction),
		attrTenant.String(ev.Tenant), attrSession.String(ev.Session), attrTurn.String(p.Turn),
		attrEffect.String(string(plan.Effect)), attrReplay.String(string(plan.Replay)),
		attrAttempt.Int(p.Attempt), attrOutcome.String(outcome)))
	if errType != "" {
		span.SetAttributes(attrErrorType.String(errType))
		span.SetStatus(codes.Error, clip(p.Error, 512))
	}
	if ev.Type == events.TypeToolCallFailed && !p.Final {
		// Ended by its RetryScheduled, which comes in the same append.
		o.mu.Lock()
		t.attempt[p.Index] = span
		o.mu.Unlock()
		return
	}
	span.End(trace.WithTimestamp(end))
}

func (o *observer) retry(ev events.Event) {
	var p events.RetryScheduled
	if events.DecodeInto(ev, &p) != nil {
		return
	}
	t := o.turn(ev, p.Turn)
	name := ""
	if t != nil {
		name = t.name(p.Index)
	}
	o.log.Info("retry scheduled", "tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn, "call", p.Call, "tool", name,
		"attempt", p.Attempt, "delay_ms", float64(p.Delay)/float64(time.Millisecond), "err", p.Error)
	if t == nil || t.span == nil {
		return
	}
	o.mu.Lock()
	span := t.attempt[p.Index]
	delete(t.attempt, p.Index)
	o.mu.Unlock()
	if span == nil {
		return
	}
	span.AddEvent("callsheet.retry_scheduled", trace.WithTimestamp(ev.Time), trace.WithAttributes(
		attrNext.Int(p.Attempt), attrDelayMS.Float64(float64(p.Delay)/float64(time.Millisecond))))
	span.End(trace.WithTimestamp(ev.Time))
}

func (o *observer) committed(ev events.Event) {
	var p struct {
		events.CallRef
		Result struct {
			Outcome events.Outcome `json:"outcome"`
		} `json:"result"`
	}
	if rc, ok := events.Kept[events.ResultCommitted](ev); ok {
		p.CallRef, p.Result.Outcome = rc.CallRef, rc.Result.Outcome
	} else if events.DecodePartial(ev, &p) != nil {
		return
	}
	if t := o.turn(ev, p.Turn); t != nil {
		o.mu.Lock()
		t.outcomes[p.Result.Outcome]++
		o.mu.Unlock()
	}
}

func (o *observer) completed(ev events.Event) {
	p, ok := events.Kept[events.TurnCompleted](ev)
	if !ok {
		var d events.TurnCompleted // apart from p, which decoding's &d would move to the heap
		if events.DecodeInto(ev, &d) != nil {
			return
		}
		p = d
	}
	k := turnKey{ev.Tenant, ev.Session, p.Turn}
	o.mu.Lock()
	t := o.turns[k]
	delete(o.turns, k)
	o.mu.Unlock()
	if t == nil {
		// Carried on by this node from another owner: its start was not
		// seen here.
		o.log.Info("turn completed", "tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn)
		return
	}
	if o.log.Enabled(context.Background(), slog.LevelInfo) { // its arguments allocate even when off
		outcomes := make([]any, 0, 4)
		for _, oc := range []events.Outcome{events.OutcomeOK, events.OutcomeError, events.OutcomeBlocked, events.OutcomeIndeterminate} {
			if n := t.outcomes[oc]; n > 0 {
				outcomes = append(outcomes, slog.Int(string(oc), n))
			}
		}
		o.log.Info("turn completed", "tenant", ev.Tenant, "session", ev.Session, "turn", p.Turn, "calls", len(t.calls),
			slog.Group("outcomes", outcomes...), "duration_ms", float64(ev.Time.Sub(t.received).Microseconds())/1000)
	}
	if t.span != nil {
		for _, oc := range []events.Outcome{events.OutcomeOK, events.OutcomeError, events.OutcomeBlocked, events.OutcomeIndeterminate} {
			t.span.SetAttributes(attribute.Int("callsheet.outcomes."+string(oc), t.outcomes[oc]))
		}
		t.end("", ev.Time)
	}
}

// end ends the turn's span and the spans it left open, at when; why, when
// not empty, says the turn was not seen to its end.
func (t *turnObs) end(why string, when time.Time) {
	if t.span == nil {
		return
	}
	for _, s := range t.attempt {
		s.End(trace.WithTimestamp(when))
	}
	for _, s := range t.approval {
		s.End(trace.WithTimestamp(when))
	}
	if why != "" {
		t.span.AddEvent("callsheet.unfinished", trace.WithTimestamp(when), trace.WithAttributes(attribute.String("callsheet.reason", why)))
	}
	t.span.End(trace.WithTimestamp(when))
}

// abandon forgets every open turn, ending its spans with why: the node lost
// its lease, or is closing (the session's next owner sees the rest).
func (o *observer) abandon(why string) {
	o.mu.Lock()
	turns := o.turns
	o.turns = map[turnKey]*turnObs{}
	o.mu.Unlock()
	now := time.Now()
	for _, t := range turns {
		t.end(why, now)
	}
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
