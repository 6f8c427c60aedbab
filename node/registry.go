package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/retry"
	"github.com/callsheet/callsheet/internal/supervise"
)

// registry is the node's registry of session actors: which actor serves
// each session here (at most one), spawning one on first use, forgetting it
// when it stops or passivates, and rebuilding one that gave up during a
// turn. It also caches the sessions' index records. It is the actors'
// Sessions. Safe for concurrent use.
type registry struct {
	engine  *actor.Engine
	deps    *actors.Deps
	sup     *supervise.Group
	index   *natslog.Index
	metrics *actors.Metrics
	// onStop is told when a session's actor stops (its workspace handle
	// goes: workspaces.go); onPassivate when it passivates (its snapshot is
	// written: compact.go).
	onStop      func(key string)
	onPassivate func(tenant, session string)
	logger      *slog.Logger
	// gone are the sessions known to be deleted: not found (deletion.go);
	// deletions is the deletions log, which says when and by whom (set
	// by startDeletions, before the node serves).
	gone      *tombstones
	deletions deletionReceipts

	mu      sync.Mutex
	pids    map[cluster.SessionKey]*actor.PID    // live actor of each session
	spawned uint64                               // actors spawned so far, for unique actor ids
	records map[cluster.SessionKey]sessionRecord // index record of each session
	closed  bool
}

var _ actors.Sessions = (*registry)(nil)

// sessionRecord is a session's entry in the index.
type sessionRecord struct {
	Workspace string    `json:"workspace"`
	Agent     string    `json:"agent,omitempty"`
	Created   time.Time `json:"created"`
}

func key(tenant, session string) string { return tenant + "/" + session }

// sessionKey names a session in a map: a comparable struct costs no
// allocation to look up or store, where key's joined string does.
func sessionKey(tenant, session string) cluster.SessionKey {
	return cluster.SessionKey{Tenant: tenant, Session: session}
}

// Route returns the live actor of a session, spawning it if needed; ErrClosed
// once the node is closing.
func (r *registry) Route(tenant, session string) (*actor.PID, error) {
	k := sessionKey(tenant, session)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if pid, ok := r.pids[k]; ok {
		return pid, nil
	}
	var pid *actor.PID
	stopped := func() {
		r.mu.Lock()
		if r.pids[k] == pid {
			delete(r.pids, k)
		}
		r.mu.Unlock()
		r.metrics.SessionLive(-1)
		// Passivated, retired, moved to another node or stopped with the
		// node: its workspace handle goes too.
		r.onStop(key(tenant, session))
	}
	// A session's inbox holds at most its queued turns, one claim and one
	// outcome per running call and one append ack: small by construction.
	// Each incarnation gets its own actor id: a passivated actor lingers for
	// its retire grace under its old id, and hollywood answers a spawn with
	// an id still in use with that old, retired actor. No restarts: the
	// actor handles a panic of its own by stopping (Session.Receive), and
	// hollywood v1.0.5 would restart it on the same PID the registry
	// already forgot.
	r.spawned++
	pid = r.engine.Spawn(actors.NewSession(r.deps, tenant, session, stopped), "session",
		actor.WithID(fmt.Sprintf("%s.%s.%d", tenant, session, r.spawned)), actor.WithInboxSize(32), actor.WithMaxRestarts(0))
	r.pids[k] = pid
	r.metrics.SessionLive(1)
	return pid, nil
}

// Passivate forgets a session's actor, if pid is still the one routed to.
func (r *registry) Passivate(tenant, session string, pid *actor.PID) {
	r.mu.Lock()
	if cur, ok := r.pids[sessionKey(tenant, session)]; ok && cur == pid {
		delete(r.pids, sessionKey(tenant, session))
	}
	r.mu.Unlock()
	r.onPassivate(tenant, session)
}

// reviveAfter is how long a session actor that gave up waits before the
// registry rebuilds it, and reviveTries how often it tries while the
// rebuilt actor cannot load the log (a stream's leader election takes 4-9 s:
// docs/facts.md), the wait doubling from one try to the next.
const (
	reviveAfter = time.Second
	reviveTries = 5
)

var reviveBackoff = retry.Backoff{Initial: 2 * reviveAfter, Factor: 2}

// errNotLoaded: a rebuilt actor stopped before it served.
var errNotLoaded = errors.New("node: the rebuilt session actor did not load")

// Revive spawns the session's actor again after reviveAfter, in a
// goroutine of the node's supervisor; while the new actor stops before it
// served (its log could not be read), it tries again, at most reviveTries
// times, checking each try twice its wait later. The rebuilt actor decides
// from the log whether this node still owns the session.
func (r *registry) Revive(tenant, session string) {
	r.sup.After(reviveAfter, func(ctx context.Context) {
		_ = retry.Do(ctx, reviveBackoff, reviveTries, func(ctx context.Context, attempt int) error {
			if _, err := r.Route(tenant, session); err != nil {
				if !errors.Is(err, ErrClosed) {
					r.logger.Warn("rebuilding a session actor failed", "tenant", tenant, "session", session, "err", err)
				}
				return retry.Permanent(err)
			}
			// Check back once the actor had time to load: if no actor
			// serves the session then, its load failed.
			if !retry.Sleep(ctx, reviveBackoff.Delay(attempt)) || r.has(tenant, session) {
				return nil
			}
			return errNotLoaded
		})
	})
}

// has reports whether the session's actor lives on this node now.
func (r *registry) has(tenant, session string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.pids[sessionKey(tenant, session)]
	return ok
}

// live returns the actors that live on this node now.
func (r *registry) live() []*actor.PID {
	r.mu.Lock()
	defer r.mu.Unlock()
	pids := make([]*actor.PID, 0, len(r.pids))
	for _, pid := range r.pids {
		pids = append(pids, pid)
	}
	return pids
}

// count is how many session actors this node holds in memory.
func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pids)
}

// close refuses every later Route and returns the actors still live.
func (r *registry) close() []*actor.PID {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return r.live()
}

func (r *registry) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// retireAll stops every session actor serving (actors.Retire; each is
// rebuilt from the log on its next use).
func (r *registry) retireAll() {
	for _, pid := range r.live() {
		r.engine.Send(pid, actors.Retire{})
	}
}

// remember caches a session's index record.
func (r *registry) remember(tenant, session string, rec sessionRecord) {
	r.mu.Lock()
	r.records[sessionKey(tenant, session)] = rec
	r.mu.Unlock()
}

// record returns a session's index record, from the cache or the index;
// ErrNotFound for a session the tenant does not have.
func (r *registry) record(ctx context.Context, tenant, session string) (sessionRecord, error) {
	if r.gone.has(tenant, session) {
		return sessionRecord{}, r.notFound(ctx, tenant, session, true)
	}
	k := sessionKey(tenant, session)
	r.mu.Lock()
	rec, ok := r.records[k]
	r.mu.Unlock()
	if ok {
		return rec, nil
	}
	b, err := r.index.Get(ctx, tenant, session)
	if err != nil {
		return sessionRecord{}, r.notFound(ctx, tenant, session, false)
	}
	var read sessionRecord // apart from rec, which decoding's &read would move to the heap
	if err := json.Unmarshal(b, &read); err != nil {
		return sessionRecord{}, fmt.Errorf("node: session %s index record: %w", session, err)
	}
	r.remember(tenant, session, read)
	return read, nil
}

// deletionReceipts finds a deleted session's receipt (natslog.Deletions).
type deletionReceipts interface {
	Get(ctx context.Context, tenant, session string) (natslog.StoredDeletion, bool, error)
}

// notFound is record's error for a session it does not find: when and by
// whom it was deleted, if the deletions log has its receipt (gone: this
// node knows it was deleted, receipt or not).
func (r *registry) notFound(ctx context.Context, tenant, session string, gone bool) error {
	if r.deletions != nil {
		if st, ok, _ := r.deletions.Get(ctx, tenant, session); ok {
			return fmt.Errorf("%w: session %q of tenant %q was deleted %s (GET /v1/deletions)", ErrNotFound, session, tenant, describeReceipt(st.Data))
		}
	}
	if gone {
		return fmt.Errorf("%w: session %q of tenant %q was deleted", ErrNotFound, session, tenant)
	}
	return fmt.Errorf("%w: session %q of tenant %q", ErrNotFound, session, tenant)
}

// deadLetters answers session messages that reached an actor after it
// stopped, so no caller waits for a reply that cannot come.
type deadLetters struct{}

func (deadLetters) Receive(c *actor.Context) {
	if ev, ok := c.Message().(actor.DeadLetterEvent); ok {
		actors.Refuse(ev.Message, fmt.Errorf("%w: the session actor stopped; retry", actors.ErrSessionUnavailable))
	}
}

// send sends the message mk builds to pid and waits for the reply.
func send[T any](ctx context.Context, e *actor.Engine, pid *actor.PID, mk func(chan T) actors.Message) (T, error) {
	reply := make(chan T, 1)
	e.Send(pid, mk(reply))
	select {
	case v := <-reply:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
