package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

// Messages for the runtime services tools use (tool.Runtime) and for the
// node's answer and rewind calls.
type (
	// Answer records the user's answer to a user-mediated call of the
	// running turn. Reply gets nil once it is durable.
	Answer struct {
		Call   string
		Answer json.RawMessage
		By     string
		Reply  chan error
	}
	// RewindPlan asks which pre-images restore the workspace to just before
	// a call; the node restores them and then sends RecordRewind.
	RewindPlan struct {
		Turn, Call string
		Reply      chan RewindReply
	}
	// RecordRewind records a finished rewind.
	RecordRewind struct {
		Rewound events.WorkspaceRewound
		Reply   chan error
	}
	// Approve records a decision on a call waiting for approval. Reply gets
	// nil once it is durable.
	Approve struct {
		Call     string
		Decision core.Decision
		Reply    chan error
	}
	// CloseSession records SessionClosed; later turns are refused.
	CloseSession struct {
		Reason string
		Reply  chan error
	}
	// GetApprovals lists the approvals the running turn waits for.
	GetApprovals struct {
		Reply chan ApprovalsReply
	}
	approvalTimeout struct {
		ref events.CallRef
	}
	stateQuery struct {
		kind  string
		reply chan json.RawMessage
	}
	answerWait struct {
		ref   events.CallRef
		reply chan json.RawMessage
	}
	jobsQuery struct {
		reply chan []tool.Job
	}
	jobQuery struct {
		id    string
		wait  bool
		reply chan jobReply
	}
)

// ApprovalsReply answers GetApprovals.
type ApprovalsReply struct {
	List []events.ApprovalRequested
	Err  error
}

// RewindReply answers RewindPlan.
type RewindReply struct {
	To    events.CallRef
	Files []events.FileCheckpointed
	Err   error
}

type jobReply struct {
	job tool.Job
	err error
}

// ErrUnknownJob is returned for a job id the session does not have.
var ErrUnknownJob = tool.Permanent(errors.New("actors: unknown job"))

// watcher is a query that waits for durable state: it answers (and returns
// true) once it can.
type watcher func() bool

func (m Answer) refuse(err error) { reply(m.Reply, err) }

func (m Answer) handle(s *Session) {
	d, err := core.Answer(s.state, m.Call, m.Answer, m.By)
	if err != nil {
		reply(m.Reply, err)
		return
	}
	s.decide([]core.Draft{d}, func() { reply(m.Reply, nil) }, func(err error) { reply(m.Reply, err) })
}

func (m Approve) refuse(err error) { reply(m.Reply, err) }

func (m Approve) handle(s *Session) {
	d, err := core.Approve(s.state, m.Call, m.Decision)
	if err != nil {
		reply(m.Reply, err)
		return
	}
	s.decide([]core.Draft{d}, func() { reply(m.Reply, nil) }, func(err error) { reply(m.Reply, err) })
	s.progress()
}

// A timer's message has no caller; the next owner re-arms it from the log.
func (m approvalTimeout) refuse(error) {}

func (m approvalTimeout) handle(s *Session) {
	delete(s.timers, "approval/"+m.ref.Turn+"/"+m.ref.Call)
	if d, err := core.Approve(s.state, m.ref.Call, core.Decision{By: ApprovalTimeoutBy,
		Reason: fmt.Sprintf("nobody decided within %s", s.settings.ApprovalTimeout)}); err == nil {
		s.decide([]core.Draft{d}, nil, nil)
		s.progress()
	}
}

func (m GetApprovals) refuse(err error)  { reply(m.Reply, ApprovalsReply{Err: err}) }
func (m GetApprovals) handle(s *Session) { reply(m.Reply, ApprovalsReply{List: s.pendingApprovals()}) }

func (m CloseSession) refuse(err error) { reply(m.Reply, err) }

func (m CloseSession) handle(s *Session) {
	d, err := core.Close(s.state, m.Reason)
	if err != nil || len(d) == 0 {
		reply(m.Reply, err)
		return
	}
	s.decide(d, func() { reply(m.Reply, nil) }, func(err error) { reply(m.Reply, err) })
	// The closed session's head is signed in the same append
	// (docs/audit.md); a node without a key signs nothing.
	_, _ = s.signHead(events.SignClosed, "", nil, nil)
}

func (m RewindPlan) refuse(err error) { reply(m.Reply, RewindReply{Err: err}) }

func (m RewindPlan) handle(s *Session) {
	if t := s.state.Active(); t != nil {
		reply(m.Reply, RewindReply{Err: fmt.Errorf("%w: turn %s is running; rewind when it completes", ErrBusy, t.ID)})
		return
	}
	to, files, err := core.RewindPlan(s.state, m.Turn, m.Call)
	reply(m.Reply, RewindReply{To: to, Files: files, Err: err})
}

func (m RecordRewind) refuse(err error) { reply(m.Reply, err) }

func (m RecordRewind) handle(s *Session) {
	s.decide([]core.Draft{{Type: events.TypeWorkspaceRewound, Payload: m.Rewound}},
		func() { reply(m.Reply, nil) }, func(err error) { reply(m.Reply, err) })
}

// The queries a running tool asks have no reply to refuse with: the tool's
// own context bounds its wait.
func (m stateQuery) refuse(error)      {}
func (m stateQuery) handle(s *Session) { reply(m.reply, s.state.WorkState(m.kind)) }
func (m answerWait) refuse(error)      {}
func (m jobsQuery) refuse(error)       {}

func (m answerWait) handle(s *Session) {
	s.watch(func() bool {
		a, ok := s.state.AnswerFor(m.ref)
		if ok {
			reply(m.reply, a.Answer)
		}
		return ok
	})
}

func (m jobsQuery) handle(s *Session) {
	var jobs []tool.Job
	for _, j := range s.state.Jobs() {
		jobs = append(jobs, jobView(j))
	}
	reply(m.reply, jobs)
}

func (m jobQuery) refuse(err error) { reply(m.reply, jobReply{err: err}) }

func (m jobQuery) handle(s *Session) {
	j, ok := s.state.JobByID(m.id)
	if !ok {
		reply(m.reply, jobReply{err: fmt.Errorf("%w %q", ErrUnknownJob, m.id)})
		return
	}
	if !m.wait {
		reply(m.reply, jobReply{job: jobView(j)})
		return
	}
	s.watch(func() bool {
		if j.Status == core.JobRunning {
			return false
		}
		reply(m.reply, jobReply{job: jobView(j)})
		return true
	})
}

func (m cancelJob) refuse(err error) { reply(m.reply, err) }

func (m cancelJob) handle(s *Session) {
	j, ok := s.state.JobByID(m.id)
	if !ok {
		reply(m.reply, fmt.Errorf("%w %q", ErrUnknownJob, m.id))
		return
	}
	if j.Status != core.JobRunning {
		reply(m.reply, fmt.Errorf("job %s is already %s", m.id, j.Status))
		return
	}
	CancelTurn{Turn: j.Ref.Turn, Call: j.Ref.Call, Reason: "cancelled with bg cancel", Reply: m.reply}.handle(s)
}

// watch answers w now if the state it needs is durable, else after a later
// append makes it so.
func (s *Session) watch(w watcher) {
	if s.allDurable() && w() {
		return
	}
	s.watchers = append(s.watchers, w)
}

func (s *Session) allDurable() bool { return s.out.idle() }

// runWatchers answers the watchers whose state is now durable.
func (s *Session) runWatchers() {
	if !s.allDurable() || len(s.watchers) == 0 {
		return
	}
	keep := s.watchers[:0]
	for _, w := range s.watchers {
		if !w() {
			keep = append(keep, w)
		}
	}
	s.watchers = keep
}

func jobView(j *core.Job) tool.Job {
	v := tool.Job{ID: j.ID, Tool: j.Name, Call: j.Ref.Call, Status: string(j.Status)}
	if j.Result != nil {
		for _, p := range j.Result.Content {
			v.Output = append(v.Output, tool.Part{Type: p.Type, Text: p.Text, JSON: p.JSON, MIME: p.MIME, Data: p.Data})
		}
		if j.Result.Outcome != events.OutcomeOK && len(j.Result.Content) > 0 {
			v.Error = j.Result.Content[0].Text
		}
	}
	return v
}

// callRuntime is the tool.Runtime of one running call: it talks to the
// session actor by message.
type callRuntime struct {
	engine *actor.Engine
	pid    *actor.PID
	// direct hands a message straight to the actor when it is inside an
	// activation, e.g. waiting for this call's outcome (handoff).
	direct *handoffs
	ref    events.CallRef
	tools  Tools
}

var _ tool.Runtime = (*callRuntime)(nil)

func ask[T any](ctx context.Context, rt *callRuntime, msg Message, ch chan T) (T, error) {
	rt.send(msg)
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// send gives the session actor msg.
func (rt *callRuntime) send(msg Message) {
	if rt.direct == nil || !rt.direct.offer(rt.pid, msg) {
		rt.engine.Send(rt.pid, msg)
	}
}

func (rt *callRuntime) State(ctx context.Context, kind string) (json.RawMessage, error) {
	ch := make(chan json.RawMessage, 1)
	return ask(ctx, rt, stateQuery{kind: kind, reply: ch}, ch)
}

func (rt *callRuntime) Answer(ctx context.Context) (json.RawMessage, error) {
	ch := make(chan json.RawMessage, 1)
	return ask(ctx, rt, answerWait{ref: rt.ref, reply: ch}, ch)
}

func (rt *callRuntime) Jobs(ctx context.Context) ([]tool.Job, error) {
	ch := make(chan []tool.Job, 1)
	return ask(ctx, rt, jobsQuery{reply: ch}, ch)
}

func (rt *callRuntime) Job(ctx context.Context, id string, wait bool) (tool.Job, error) {
	ch := make(chan jobReply, 1)
	r, err := ask(ctx, rt, jobQuery{id: id, wait: wait, reply: ch}, ch)
	if err != nil {
		return tool.Job{}, err
	}
	return r.job, r.err
}

func (rt *callRuntime) CancelJob(ctx context.Context, id string) error {
	ch := make(chan error, 1)
	rt.send(cancelJob{id: id, reply: ch})
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (rt *callRuntime) Tools() []*tool.Tool {
	if rt.tools == nil {
		return nil
	}
	return rt.tools.Searchable()
}

// cancelJob cancels a background job by id.
type cancelJob struct {
	id    string
	reply chan error
}

// pendingApprovals returns the recorded requests of the calls that wait.
func (s *Session) pendingApprovals() []events.ApprovalRequested {
	t := s.state.Active()
	out := []events.ApprovalRequested{}
	for _, ref := range s.state.PendingApprovals() {
		out = append(out, core.ApprovalRequest(t, ref.Index))
	}
	return out
}

// armApprovalTimeouts starts a timer for each pending approval when a
// timeout is configured; the deadline counts from the request's event time,
// so it holds across restarts.
func (s *Session) armApprovalTimeouts(requested map[string]time.Time) {
	if s.settings.ApprovalTimeout <= 0 {
		return
	}
	for _, ref := range s.state.PendingApprovals() {
		key := "approval/" + ref.Turn + "/" + ref.Call
		if _, ok := s.timers[key]; ok {
			continue
		}
		at, ok := requested[key]
		if !ok {
			at = s.deps.Clock.Now()
		}
		wait := max(at.Add(s.settings.ApprovalTimeout).Sub(s.deps.Clock.Now()), 0)
		e, pid, msg := s.engine, s.pid, approvalTimeout{ref: ref}
		s.timers[key] = time.AfterFunc(wait, func() { e.Send(pid, msg) })
	}
}
