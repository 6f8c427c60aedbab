package node

import (
	"context"

	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/oklog/ulid/v2"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/replay"
)

// SessionInfo describes an open session.
type SessionInfo struct {
	Session string `json:"session"`
	// Workspace is the absolute directory the session's tools work in.
	Workspace string `json:"workspace"`
	Agent     string `json:"agent,omitempty"`
}

// OpenSession opens a session for tenant. workspace is a directory under the
// tenant's workspace root (default: the session id); agent names a
// configured agent (default: none). The workspace directory is created,
// with Options.WorkspaceOwner as its owner; a name that passes through a
// symbolic link, or is not a relative path of plain components, is refused
// with ErrInvalid (docs/security.md, "Workspace").
func (n *Node) OpenSession(ctx context.Context, tenant, workspace, agent string) (_ SessionInfo, err error) {
	defer code(&err)
	if agent != "" {
		if _, ok := n.cfg.AgentNamed(agent); !ok {
			return SessionInfo{}, fmt.Errorf("%w: agent %q is not configured (agents: %v)", ErrInvalid, agent, agentNames(n.cfg.Agents))
		}
	}
	id := ulid.Make().String()
	if workspace == "" {
		workspace = id
	}
	// The place is taken first, so a refused session creates nothing.
	if err := n.quotas.reserveSession(tenant); err != nil {
		return SessionInfo{}, err
	}
	ws, err := n.ws.open(tenant, workspace, true)
	if err != nil {
		n.quotas.release(tenant)
		if errors.Is(err, ErrInvalid) {
			return SessionInfo{}, err
		}
		return SessionInfo{}, fmt.Errorf("node: creating workspace: %w", err)
	}
	dir := ws.Path()
	ws.Close()
	rec := sessionRecord{Workspace: workspace, Agent: agent, Created: time.Now().UTC()}
	b, _ := json.Marshal(rec)
	if err := n.store.index.Create(ctx, tenant, id, b); err != nil {
		n.quotas.release(tenant)
		// No actor was asked to open it: nothing will run in the
		// directory just made for it.
		if derr := n.ws.dropUnopened(tenant, id, workspace); derr != nil {
			n.logger.Warn("an unopened session's workspace stays", "tenant", tenant, "session", id, "err", derr)
		}
		return SessionInfo{}, fmt.Errorf("node: indexing session: %w", err)
	}
	n.quotas.markOpened(tenant, id)
	n.reg.remember(tenant, id, rec)
	pid, err := n.reg.Route(tenant, id)
	if err != nil {
		n.quotas.closed(tenant, id)
		return SessionInfo{}, err
	}
	err, werr := send(ctx, n.engine, pid, func(reply chan error) actors.Message {
		return actors.OpenSession{Workspace: workspace, Agent: agent, Node: n.opts.Name, Reply: reply}
	})
	switch {
	case werr != nil:
		// The caller stopped waiting: the session may still open (and be
		// listed), so it keeps its place.
		return SessionInfo{}, werr
	case err != nil:
		// Its actor could not open it and the caller never learns its id:
		// it takes no place (a node starting counts only a logged opening,
		// and removes the entry once it is old: resume).
		n.quotas.closed(tenant, id)
		return SessionInfo{}, err
	}
	return SessionInfo{Session: id, Workspace: dir, Agent: agent}, nil
}

func agentNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	return names
}

// actorOf checks the session exists for tenant and returns its actor on
// this node, or a *NotOwnerError when another node serves it (the owners
// index says so, cluster.Route: no actor is spawned for it here). A call
// another node forwarded here, or one for a session whose actor lives here,
// goes to the actor, which decides with the log (serving, or naming the
// owner the log names): the owners index is a hint and may lag.
func actorOf(ctx context.Context, reg *registry, f *fleet, tenant, session string) (*actor.PID, error) {
	if _, err := reg.record(ctx, tenant, session); err != nil {
		return nil, err
	}
	if owner, url, local := f.serve(tenant, session, forwardedHere(ctx) || reg.has(tenant, session)); !local {
		return nil, &NotOwnerError{Session: session, Owner: owner, URL: url}
	}
	return reg.Route(tenant, session)
}

type forwardedKey struct{}

// Forwarded marks ctx as a call another node of the fleet forwarded here
// (docs/spec.md §7): this node's session actor answers it, from the log,
// whatever this node's owners index says.
func Forwarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardedKey{}, true)
}

func forwardedHere(ctx context.Context) bool {
	v, _ := ctx.Value(forwardedKey{}).(bool)
	return v
}

// SubmitTurn records a turn of calls and, with wait, answers once every call
// is committed; without wait, once the turn is recorded (status running). An
// empty id is minted. Posting a turn id again with the same calls (see
// core.Repeat) answers with the recorded turn and runs nothing, without
// running the hooks again; with other calls it fails with an error wrapping
// ErrConflict and core.ErrTurnMismatch. A recorded id with no calls names
// that turn: SubmitTurn answers it (with wait, once it is complete).
func (n *Node) SubmitTurn(ctx context.Context, tenant, session, id string, calls []events.CallSpec, wait bool) (_ projections.Turn, err error) {
	defer code(&err)
	if id == "" {
		id = ulid.Make().String()
	}
	if len(id) > 200 {
		return projections.Turn{}, fmt.Errorf("%w: turn id is %d bytes; at most 200", ErrInvalid, len(id))
	}
	if err := n.quotas.checkCallsPerTurn(tenant, len(calls)); err != nil {
		return projections.Turn{}, err
	}
	if _, err := n.reg.record(ctx, tenant, session); err != nil {
		return projections.Turn{}, err
	}
	var overrides map[int]core.Override
	if n.hooks.before() {
		// Hooks run once per turn: not again for a turn id already recorded.
		if _, err := n.Turn(ctx, tenant, session, id); errors.Is(err, ErrNotFound) {
			rec, _ := n.reg.record(ctx, tenant, session)
			if overrides, err = n.hooks.preHooks(ctx, tenant, session, id, rec.Agent, calls); err != nil {
				return projections.Turn{}, err
			}
		}
	}
	// The turn's span is the child of the request's traceparent (observe.go).
	defer n.observer.expect(ctx, tenant, session, id)()
	// The turn's calls count as in flight until it completes (limits.go).
	counted, err := n.quotas.admitTurn(tenant, session, id, len(calls))
	if err != nil {
		return projections.Turn{}, err
	}
	r, err := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan actors.TurnReply) actors.Message {
		return actors.SubmitTurn{ID: id, Calls: calls, Wait: wait, Overrides: overrides, Reply: reply}
	}, turnErr)
	if counted {
		n.turns.afterSubmit(tenant, session, id, calls, r, err)
	}
	if err != nil {
		return projections.Turn{}, err
	}
	if r.Err != nil {
		if errors.Is(r.Err, core.ErrTurnInvalid) {
			return projections.Turn{}, fmt.Errorf("%w: %v", ErrInvalid, r.Err)
		}
		if errors.Is(r.Err, core.ErrTurnMismatch) {
			return projections.Turn{}, fmt.Errorf("%w: %w", ErrConflict, r.Err)
		}
		if errors.Is(r.Err, actors.ErrBusy) {
			return projections.Turn{}, fmt.Errorf("%w: %v", ErrBusy, r.Err)
		}
		if errors.Is(r.Err, core.ErrSessionClosed) {
			return projections.Turn{}, fmt.Errorf("%w: session %s is closed; open a new one", ErrConflict, session)
		}
		return projections.Turn{}, r.Err
	}
	return r.Turn, nil
}

// Turn answers one turn: complete with its results, or running.
func (n *Node) Turn(ctx context.Context, tenant, session, id string) (_ projections.Turn, err error) {
	defer code(&err)
	qctx, cancel := context.WithTimeout(ctx, replyTimeout)
	defer cancel()
	r, err := ask(qctx, n.reg, n.fleet, tenant, session, func(reply chan actors.TurnReply) actors.Message {
		return actors.GetTurn{ID: id, Reply: reply}
	}, turnErr)
	if err != nil {
		return projections.Turn{}, err
	}
	if r.Err != nil {
		return projections.Turn{}, r.Err
	}
	if !r.Found {
		return projections.Turn{}, fmt.Errorf("%w: turn %q of session %s", ErrNotFound, id, session)
	}
	return r.Turn, nil
}

// Transcript folds the session's log into its transcript: the same function
// over the same events as cmd/callsheet-replay, so the bytes are identical. The log is
// read in bounded batches (ScanEvents), so only the transcript is held.
func (n *Node) Transcript(ctx context.Context, tenant, session string) (_ projections.Transcript, err error) {
	defer code(&err)
	f := projections.NewTranscriptFolder(session)
	if err := n.ScanEvents(ctx, tenant, session, 0, f.Apply); err != nil {
		return projections.Transcript{}, err
	}
	return f.Transcript(), nil
}

// ScanEvents calls fn with the session's recorded events after seq, in
// order, reading the log in bounded batches (natslog.Log.Scan): a session
// of any size is read in bounded memory, a batch at a time. It stops at fn's
// first error and returns it; an unknown session is ErrNotFound.
func (n *Node) ScanEvents(ctx context.Context, tenant, session string, after uint64, fn func(events.Event) error) (err error) {
	defer code(&err)
	if _, err := n.reg.record(ctx, tenant, session); err != nil {
		return err
	}
	seen := false
	if err := n.store.log.Scan(ctx, tenant, session, after, func(ev events.Event) error {
		seen = true
		return fn(ev)
	}); err != nil && !errors.Is(err, events.ErrNotFound) {
		return err
	}
	if after == 0 && !seen {
		// Deleted (by another node, which this one has not heard of yet):
		// a session is served once its SessionOpened is in the log.
		return fmt.Errorf("%w: session %q of tenant %q has no log", ErrNotFound, session, tenant)
	}
	return nil
}

// Events returns the session's events after seq: with follow, then live ones
// until ctx ends; without, what is recorded now, read in bounded batches as
// the channel is drained (a read that fails midway closes it early: use
// ScanEvents to learn why). The reader goroutine is the caller's: it ends
// when the events are read or ctx ends.
func (n *Node) Events(ctx context.Context, tenant, session string, after uint64, follow bool) (_ <-chan events.Event, err error) {
	defer code(&err)
	if _, err := n.reg.record(ctx, tenant, session); err != nil {
		return nil, err
	}
	if follow {
		// A followed stream ends when its session is deleted.
		ctx = n.gone.until(ctx, tenant, session)
		return n.store.log.Watch(ctx, tenant, session, after)
	}
	ch := make(chan events.Event, 64)
	go func() {
		defer close(ch)
		err := n.store.log.Scan(ctx, tenant, session, after, func(ev events.Event) error {
			select {
			case ch <- ev:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if err != nil && ctx.Err() == nil && !errors.Is(err, events.ErrNotFound) {
			n.logger.Warn("reading a session's events failed", "tenant", tenant, "session", session, "err", err)
		}
	}()
	return ch, nil
}

// Output returns a full output kept when a result was cut. The object name
// starts with the tenant, so no tenant reads another's.
func (n *Node) Output(ctx context.Context, tenant, object string) (_ []byte, err error) {
	defer code(&err)
	r, _, err := n.OpenOutput(ctx, tenant, object)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// OpenOutput is Output as a stream and its size, so a caller can pass on a
// large output without holding it. The caller closes the reader; reading it
// to the end checks the object's digest.
func (n *Node) OpenOutput(ctx context.Context, tenant, object string) (_ io.ReadCloser, _ int64, err error) {
	defer code(&err)
	if len(object) <= len(tenant)+1 || object[:len(tenant)+1] != tenant+"/" {
		return nil, 0, fmt.Errorf("%w: output %q", ErrNotFound, object)
	}
	r, size, err := n.store.objects.OpenSized(ctx, object)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: output %q", ErrNotFound, object)
	}
	return r, size, nil
}

// ask sends the message mk builds to the session's actor (actorOf) and
// waits for the reply. An actor that was passivated meanwhile refuses with
// actors.ErrRetired; ask then resends to the session's new actor (nothing
// was decided, so resending is safe). A session actor that says another
// node owns the session is answered with a *NotOwnerError naming it.
func ask[T any](ctx context.Context, reg *registry, f *fleet, tenant, session string, mk func(chan T) actors.Message, errOf func(T) error) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		pid, err := actorOf(ctx, reg, f, tenant, session)
		if err != nil {
			return zero, err
		}
		v, err := send(ctx, reg.engine, pid, mk)
		if err != nil {
			return zero, err
		}
		if errors.Is(errOf(v), actors.ErrRetired) && attempt < 5 {
			continue
		}
		var no *NotOwnerError
		if errors.As(errOf(v), &no) {
			return zero, f.notOwner(session, no.Owner)
		}
		return v, nil
	}
}

func errItself(err error) error                  { return err }
func turnErr(r actors.TurnReply) error           { return r.Err }
func approvalsErr(r actors.ApprovalsReply) error { return r.Err }
func rewindErr(r actors.RewindReply) error       { return r.Err }

// CancelTurn cancels one call of a turn (call set) or every call of the turn
// that has not settled. Calls that had not started settle as errors and never
// run; running ones are cancelled through their context and settle by their
// replay policy (a never call cut short is indeterminate). It returns once the
// cancellation is recorded; the turn completes as its calls settle.
func (n *Node) CancelTurn(ctx context.Context, tenant, session, turn, call, reason string) (err error) {
	defer code(&err)
	err, werr := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan error) actors.Message {
		return actors.CancelTurn{Turn: turn, Call: call, Reason: reason, Reply: reply}
	}, errItself)
	if werr != nil {
		return werr
	}
	if err != nil {
		if errors.Is(err, events.ErrNotFound) {
			return fmt.Errorf("%w: session %s has no turn %q", ErrNotFound, session, turn)
		}
		return err
	}
	return nil
}

// Answer records the user's answer to a user-mediated call (the question
// tool) of the session's running turn; the waiting call then returns it.
// by names who answered, when known.
func (n *Node) Answer(ctx context.Context, tenant, session, call string, answer json.RawMessage, by string) (err error) {
	defer code(&err)
	err, werr := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan error) actors.Message {
		return actors.Answer{Call: call, Answer: answer, By: by, Reply: reply}
	}, errItself)
	if werr != nil {
		return werr
	}
	if err != nil {
		if errors.Is(err, core.ErrNotAwaitingAnswer) {
			return fmt.Errorf("%w: %v", ErrConflict, err)
		}
		return err
	}
	return nil
}

// RewindResult says what a rewind restored.
type RewindResult = replay.Rewound

// Rewind restores the session's workspace files to just before a call: every
// file checkpointed by that call or a later one gets its pre-image back, and
// files that did not exist then are removed. It refuses while a turn runs.
// Files no call declared (a shell's side effects) are not touched.
//
// turn names the call's turn; empty means the latest call with that id.
func (n *Node) Rewind(ctx context.Context, tenant, session, turn, call string) (_ RewindResult, err error) {
	defer code(&err)
	ws, err := n.ws.Workspace(tenant, session)
	if err != nil {
		return RewindResult{}, err
	}
	defer ws.Close()
	// What the rewind writes, the next calls verify afresh.
	defer n.ws.forget(tenant, session)
	plan, err := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan actors.RewindReply) actors.Message {
		return actors.RewindPlan{Turn: turn, Call: call, Reply: reply}
	}, rewindErr)
	if err != nil {
		return RewindResult{}, err
	}
	switch {
	case errors.Is(plan.Err, core.ErrNothingToRewind):
		return RewindResult{}, fmt.Errorf("%w: %v", ErrNotFound, plan.Err)
	case errors.Is(plan.Err, actors.ErrBusy):
		return RewindResult{}, fmt.Errorf("%w: %v", ErrConflict, plan.Err)
	case plan.Err != nil:
		return RewindResult{}, plan.Err
	}
	// A rewind the workspace refuses (a file now a directory, a directory
	// now a link leading out, one being swapped) is the caller's to
	// resolve: 409, with workspace-relative paths (rewindRefused).
	res, err := replay.Restore(ctx, preImages{n.store.objects}.get, ws, plan.Files)
	if err != nil {
		return RewindResult{}, rewindRefused(err, call, ws.Path())
	}
	res.Call = call
	err, werr := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan error) actors.Message {
		return actors.RecordRewind{Rewound: events.WorkspaceRewound{To: plan.To, Restored: res.Restored, Removed: res.Removed}, Reply: reply}
	}, errItself)
	if werr != nil {
		return res, werr
	}
	return res, err
}

// Approve records a decision on a call of the running turn that waits for
// approval. by is who decided (a person's identity from the API call).
// scope is events.ScopeCall (default), ScopeToolArgs or ScopeTool: the last
// two approve later calls of the session too, on any node, after restarts.
func (n *Node) Approve(ctx context.Context, tenant, session, call string, allow bool, by, reason, scope string) (err error) {
	defer code(&err)
	switch scope {
	case "", events.ScopeCall, events.ScopeToolArgs, events.ScopeTool:
	default:
		return fmt.Errorf("%w: scope %q: use %q, %q or %q", ErrInvalid, scope, events.ScopeCall, events.ScopeToolArgs, events.ScopeTool)
	}
	if by == "" {
		by = "api"
	}
	err, werr := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan error) actors.Message {
		return actors.Approve{Call: call, Decision: core.Decision{Allow: allow, By: by, Reason: reason, Scope: scope}, Reply: reply}
	}, errItself)
	if werr != nil {
		return werr
	}
	if err != nil {
		if errors.Is(err, core.ErrNotAwaitingApproval) {
			return fmt.Errorf("%w: %v", ErrConflict, err)
		}
		return err
	}
	return nil
}

// Approvals lists the approvals the session's running turn waits for.
func (n *Node) Approvals(ctx context.Context, tenant, session string) (_ []events.ApprovalRequested, err error) {
	defer code(&err)
	qctx, cancel := context.WithTimeout(ctx, replyTimeout)
	defer cancel()
	r, err := ask(qctx, n.reg, n.fleet, tenant, session, func(reply chan actors.ApprovalsReply) actors.Message {
		return actors.GetApprovals{Reply: reply}
	}, approvalsErr)
	if err != nil {
		return nil, err
	}
	return r.List, r.Err
}

// CloseSession closes a session: later turns are refused (the log and the
// transcript stay). A session with a running turn is not closed (ErrConflict).
func (n *Node) CloseSession(ctx context.Context, tenant, session, reason string) (err error) {
	defer code(&err)
	err, werr := ask(ctx, n.reg, n.fleet, tenant, session, func(reply chan error) actors.Message {
		return actors.CloseSession{Reason: reason, Reply: reply}
	}, errItself)
	if werr != nil {
		return werr
	}
	if errors.Is(err, core.ErrTurnActive) {
		return fmt.Errorf("%w: %v", ErrConflict, err)
	}
	if err == nil {
		n.quotas.closed(tenant, session)
		n.ws.drop(key(tenant, session))
	}
	return err
}

// Session statuses (SessionStatus.Status).
const (
	StatusIdle    = "idle"    // no turn running
	StatusRunning = "running" // a turn is running
	StatusClosed  = "closed"  // closed: later turns are refused
)

// SessionStatus is GET /v1/sessions/{s}: where a session stands in the
// fleet, from its log (docs/spec.md §7).
type SessionStatus struct {
	Session string `json:"session"`
	// Workspace is the workspace name under the tenant's root.
	Workspace string `json:"workspace"`
	// Owner and Epoch are the latest OwnershipTaken's ("" and 0 for a
	// session never owned); Released says the owner handed it over.
	Owner    string `json:"owner"`
	Epoch    uint64 `json:"epoch"`
	Released bool   `json:"released,omitempty"`
	// Status is StatusIdle, StatusRunning or StatusClosed.
	Status string `json:"status"`
	// WorkspaceNode keeps the workspace (without shared workspaces);
	// WorkspaceAway is set while the owner cannot reach it.
	WorkspaceNode string `json:"workspace_node,omitempty"`
	WorkspaceAway string `json:"workspace_away,omitempty"`
}

// SessionStatus reads a session's log and says who owns it, at which
// epoch, and whether a turn runs. Any node answers it.
func (n *Node) SessionStatus(ctx context.Context, tenant, session string) (_ SessionStatus, err error) {
	defer code(&err)
	rec, err := n.reg.record(ctx, tenant, session)
	if err != nil {
		return SessionStatus{}, err
	}
	evs, err := n.store.log.Read(ctx, tenant, session, 0)
	if errors.Is(err, events.ErrNotFound) || (err == nil && len(evs) == 0) {
		return SessionStatus{}, fmt.Errorf("%w: session %q of tenant %q has no log", ErrNotFound, session, tenant)
	}
	if err != nil {
		return SessionStatus{}, err
	}
	st := core.NewSession(tenant, session)
	for _, ev := range evs {
		if err := st.Apply(ev); err != nil {
			return SessionStatus{}, fmt.Errorf("node: session %s log: %w", session, err)
		}
	}
	out := SessionStatus{Session: session, Workspace: rec.Workspace, Owner: st.Owner, Epoch: st.Epoch, Released: st.Released,
		Status: StatusIdle, WorkspaceNode: st.WorkspaceNode, WorkspaceAway: st.WorkspaceAway}
	switch {
	case st.Closed:
		out.Status = StatusClosed
	case st.Active() != nil:
		out.Status = StatusRunning
	}
	return out, nil
}

// Locate says where a call for a session is served: on this node (local),
// or by owner at url, as the owners index and the fleet's leases show it
// (cluster.Route, Serve). Any node serves any session: a session whose
// owner is lost, or that was released, or never owned, is this node's to
// take (its actor decides with the log, which may still say otherwise); a
// node shutting down sends everything to the node the rendezvous picks
// among the others.
func (n *Node) Locate(tenant, session string) (owner, url string, local bool) {
	return n.fleet.serve(tenant, session, false)
}

// NodeAlive reports whether the named node of the fleet holds its lease,
// as this node sees it (for this node itself: whether it may act).
func (n *Node) NodeAlive(name string) bool { return n.fleet.alive(name) }

// NodeStatus is one node in GET /v1/nodes.
type NodeStatus struct {
	Name string `json:"name"`
	// HTTP is the node's API, as its lease advertises it.
	HTTP string `json:"http"`
	// Alive: its lease is alive.
	Alive bool `json:"alive"`
	// Sessions counts the caller's tenant's sessions the owners index
	// gives the node.
	Sessions int `json:"sessions"`
}

// Nodes lists the fleet's nodes: every live one, and every other node the
// owners index still gives sessions of tenant to (not alive: its sessions
// are being taken over), by name.
func (n *Node) Nodes(tenant string) []NodeStatus { return n.fleet.nodes(tenant) }
