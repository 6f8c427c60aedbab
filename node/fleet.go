package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/internal/opsmetrics"
	"github.com/callsheet/callsheet/internal/retry"
	"github.com/callsheet/callsheet/internal/supervise"
)

// fleet is the node's fleet supervisor (docs/spec.md §7): its lease, the
// live members, the owners index and the fleet caps, and the goroutine that
// acts on their changes: it takes over the sessions of lost nodes and hands
// sessions to the node that keeps their workspace. A node alone runs the
// same machinery with itself as the only member. It is the actors' Fleet;
// every routing question it answers with cluster.Route.
type fleet struct {
	self, http, incarnation string
	shared                  bool
	store                   *store
	reg                     *registry
	sup                     *supervise.Group
	logger                  *slog.Logger
	ops                     *opsmetrics.Set
	observer                *observer

	lease   *cluster.Lease
	members *cluster.Members
	owners  *cluster.Owners
	caps    *cluster.Caps
	reaper  reaperCell
	// stopped are the sessions whose actors the loss of the lease stopped,
	// brought back once it is held again (lease.go); fleet goroutine only.
	stopped map[cluster.SessionKey]bool

	// work carries the membership and ownership changes to the fleet
	// goroutine (run, under sup), in order.
	work chan func()

	// lostAt is when this node saw each node leave, for the takeover's
	// log line ("took session S at epoch N after D").
	lmu    sync.Mutex
	lostAt map[string]time.Time

	// asks are the functions every view holds (initView): made once, as
	// a method value made per view would allocate for every call routed.
	asks cluster.View
}

var _ actors.Fleet = (*fleet)(nil)

// takeWorkers bounds how many sessions a node takes over at once.
const takeWorkers = 8

// openFleet opens this node's lease (waiting, in a cluster, for a lease of
// the same name held by another process to lapse), watches the fleet's
// members and the owners index, opens the fleet caps, and starts the fleet
// goroutine under sup, which owns every goroutine the fleet starts.
func openFleet(ctx context.Context, st *store, reg *registry, sup *supervise.Group, opts Options, ttl time.Duration, incarnation string, logger *slog.Logger,
	ops *opsmetrics.Set, obs *observer) (_ *fleet, err error) {
	f := &fleet{self: opts.Name, http: opts.HTTPAdvertise, incarnation: incarnation, shared: opts.SharedWorkspaces,
		store: st, reg: reg, sup: sup, logger: logger, ops: ops, observer: obs, work: make(chan func(), 1024), lostAt: map[string]time.Time{}}
	f.initView()
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	self := cluster.Member{Name: opts.Name, HTTP: opts.HTTPAdvertise, Incarnation: incarnation, Started: time.Now().UTC()}
	if st.standalone() {
		// A standalone embedded server serves this process alone (its store
		// is locked by it): a lease of this name left by an earlier process
		// is that process's, which is gone. Remove it instead of waiting.
		if err := cluster.DropLease(ctx, st.js, opts.Name, ttl, st.replicas); err != nil {
			return nil, err
		}
	}
	// A lease of this name held by this node's previous process lapses
	// within the TTL: OpenLease waits for it (up to twice the TTL and a
	// little), so one try may take that long.
	if err := st.awaitWithin(ctx, "this node's lease", 2*ttl+10*time.Second, func(ctx context.Context) (err error) {
		f.lease, err = cluster.OpenLease(ctx, st.js, self, cluster.LeaseOptions{TTL: ttl, Replicas: st.replicas, Logger: logger.With("component", "lease"),
			Dial: leaseDial(st, opts), OnRenewed: ops.LeaseRenewed, OnRegained: func() { f.post(f.onLeaseRegained) },
			OnLost: func() {
				ops.LeaseLost()
				f.post(f.onLeaseLost)
			}})
		if errors.Is(err, cluster.ErrLeaseHeld) && ctx.Err() == nil {
			return permanent{err}
		}
		return err
	}); err != nil {
		return nil, err
	}
	if err := st.await(ctx, "the fleet's members", func(ctx context.Context) (err error) {
		f.members, err = cluster.WatchMembers(ctx, st.js, ttl, st.replicas, func(c cluster.Change) { f.post(func() { f.onMember(c) }) },
			cluster.WithLease(f.lease), cluster.WithMembersLogger(logger.With("component", "members")))
		return err
	}); err != nil {
		return nil, err
	}
	if err := st.await(ctx, "the owners index", func(ctx context.Context) (err error) {
		f.owners, err = cluster.WatchOwners(ctx, st.js, st.replicas, func(k cluster.SessionKey, o cluster.Ownership) {
			if o.Released {
				f.post(func() { f.takeIfMine(k, o) })
			}
		})
		return err
	}); err != nil {
		return nil, err
	}
	if err := st.await(ctx, "the fleet caps' bucket", func(ctx context.Context) (err error) {
		f.caps, err = cluster.OpenCaps(ctx, st.js, st.replicas, ttl)
		return err
	}); err != nil {
		return nil, err
	}
	sup.Go(f.run)
	return f, nil
}

// post queues work for the fleet goroutine; dropped once it stopped.
func (f *fleet) post(w func()) {
	select {
	case f.work <- w:
	case <-f.sup.Context().Done():
	}
}

// run is the fleet goroutine: it does the queued work in order until the
// supervisor closes.
func (f *fleet) run(ctx context.Context) {
	for {
		select {
		case w := <-f.work:
			w()
		case <-ctx.Done():
			return
		}
	}
}

// close stops the watches (the fleet goroutine stops with the supervisor);
// the lease is released separately (release, after the sessions are handed
// over).
func (f *fleet) close() {
	if f.members != nil {
		f.members.Close()
	}
	if f.owners != nil {
		f.owners.Close()
	}
	if f.caps != nil {
		f.caps.Close()
	}
	f.reaper.close()
}

// release deletes this node's lease (graceful shutdown): the fleet takes
// what is left of its sessions at once, not a TTL later.
func (f *fleet) release() {
	if f.lease == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.lease.Release(ctx); err != nil {
		f.logger.Warn("releasing the lease failed", "err", err)
	}
}

// Gate is every session actor's and tool actor's permission to act: this
// node holds its lease.
func (f *fleet) Gate() error {
	if f.lease == nil {
		return nil
	}
	return f.lease.Check()
}

// alive reports whether a node's lease is alive (this node: whether it
// holds its own).
func (f *fleet) alive(node string) bool {
	if node == f.self {
		return f.Gate() == nil
	}
	_, ok := f.members.Alive(node)
	return ok
}

// reachable reports whether a call can be forwarded to node: alive, with
// an API.
func (f *fleet) reachable(node string) bool {
	m, ok := f.members.Alive(node)
	return ok && m.HTTP != ""
}

// view is what this node knows of the fleet now, for cluster.Route.
func (f *fleet) view() cluster.View {
	v := f.asks
	v.Self, v.Closing, v.Shared = f.self, f.reg.isClosed(), f.shared
	return v
}

// initView makes the functions every view holds; before any view.
func (f *fleet) initView() {
	f.asks = cluster.View{Alive: f.alive, Reachable: f.reachable, Live: f.liveNames}
}

// liveNames lists the fleet's live nodes (cluster.Members.Names).
func (f *fleet) liveNames() []string { return f.members.Names() }

// indexed is a session as the owners index has it, for cluster.Route.
func (f *fleet) indexed(tenant, session string) cluster.Session {
	own, ok := f.owners.Get(tenant, session)
	return cluster.Session{Tenant: tenant, ID: session, Known: ok,
		Owner: cluster.Owner{Node: own.Node, Released: own.Released, WorkspaceNode: own.WorkspaceNode}}
}

// Place is the session actors' Fleet.Place: cluster.Route's Own.
func (f *fleet) Place(tenant, session string, cur actors.Owner) actors.Placement {
	d := cluster.Route(cluster.Own, f.view(), cluster.Session{Tenant: tenant, ID: session, Known: true,
		Owner: cluster.Owner{Node: cur.Node, Released: cur.Released, WorkspaceNode: cur.WorkspaceNode}})
	return actors.Placement{Take: d.Here, Holder: d.Node, WorkspaceAway: d.WorkspaceAway}
}

// serve answers a call for a session that came to this node: here (local),
// or by owner at url (cluster.Route's Serve). here says the session's actor
// lives on this node or the call was forwarded to it.
func (f *fleet) serve(tenant, session string, here bool) (owner, url string, local bool) {
	s := f.indexed(tenant, session)
	s.Here = here
	d := cluster.Route(cluster.Serve, f.view(), s)
	if d.Here {
		return f.self, f.http, true
	}
	m, _ := f.members.Alive(d.Node)
	return d.Node, m.HTTP, false
}

// adopts reports whether this node should load the session now, unasked
// (cluster.Route's Adopt). mine says an index entry naming this node was
// written by this process; lost names the lost node of a backstop.
func (f *fleet) adopts(tenant, session string, mine bool, lost string) bool {
	s := f.indexed(tenant, session)
	s.Mine, s.Lost = mine, lost
	return cluster.Route(cluster.Adopt, f.view(), s).Here
}

// ownedAttempts bounds the tries of one owners index write, each up to
// ownedAttempt, a second apart: past a leader election of the bucket.
const (
	ownedAttempts = 12
	ownedAttempt  = 5 * time.Second
)

var ownedBackoff = retry.Backoff{Initial: time.Second}

// Owned is the session actors' Fleet.Owned: it brings the owners index up
// to date, in a goroutine (the index is a hint, and the log stays the
// truth). It tries again while the write fails: a write lost during an
// election of the owners bucket is corrected by no later change while this
// node keeps the session. Set never overwrites a later epoch, so a late
// retry is harmless.
func (f *fleet) Owned(tenant, session string, epoch uint64, released bool, wsNode string) {
	if f.owners == nil {
		return
	}
	own := cluster.Ownership{Node: f.self, Epoch: epoch, Released: released, WorkspaceNode: wsNode}
	if !released {
		f.tookOver(tenant, session, epoch)
	}
	if f.reg.isClosed() {
		return
	}
	f.sup.Go(func(ctx context.Context) {
		_ = retry.Do(ctx, ownedBackoff, ownedAttempts, func(ctx context.Context, attempt int) error {
			actx, cancel := context.WithTimeout(ctx, ownedAttempt)
			defer cancel()
			err := f.owners.Set(actx, tenant, session, own)
			if err != nil {
				f.logger.Warn("owners index write failed", "tenant", tenant, "session", session, "attempt", attempt, "of", ownedAttempts, "err", err)
			}
			return err
		})
	})
}

// onMember reacts to a change of the fleet's membership: a node that left
// (its lease lapsed or was released) has its sessions taken over by the
// live nodes, each taking those the rendezvous gives it; a node that joined
// gets back the sessions whose workspace it keeps.
func (f *fleet) onMember(c cluster.Change) {
	if c.Member.Name == f.self {
		return
	}
	if !c.Joined {
		f.lmu.Lock()
		f.lostAt[c.Member.Name] = time.Now()
		f.lmu.Unlock()
		f.logger.Warn("node left the fleet: taking over its sessions", "node", c.Member.Name)
		keys := f.owners.OwnedBy(c.Member.Name, true)
		f.backstop(c.Member.Name, keys)
		f.takeOver(keys)
		return
	}
	f.logger.Info("node joined the fleet", "node", c.Member.Name)
	if f.shared {
		return
	}
	var back []cluster.SessionKey
	for _, k := range f.owners.OwnedBy(f.self, false) {
		if own, ok := f.owners.Get(k.Tenant, k.Session); ok && own.WorkspaceNode == c.Member.Name {
			back = append(back, k)
		}
	}
	f.handOver(back)
}

// takeIfMine takes a released session when the rendezvous gives it to this
// node.
func (f *fleet) takeIfMine(k cluster.SessionKey, o cluster.Ownership) {
	f.takeOver([]cluster.SessionKey{k})
}

// takeOver takes, of keys, the sessions this node adopts: it loads their
// actors, which take ownership at the next epoch when they load
// (OwnershipTaken, the fence), settle what was in flight and carry on.
func (f *fleet) takeOver(keys []cluster.SessionKey) {
	var mine []cluster.SessionKey
	for _, k := range keys {
		if f.adopts(k.Tenant, k.Session, true, "") {
			mine = append(mine, k)
		}
	}
	if len(mine) > 0 {
		f.takeAll(f.sup.Context(), mine)
	}
}

// takeAll takes the sessions over, at most takeWorkers at once (each take
// reads the session's log), and returns when every take has ended.
func (f *fleet) takeAll(ctx context.Context, keys []cluster.SessionKey) {
	supervise.Each(ctx, takeWorkers, keys, func(ctx context.Context, k cluster.SessionKey) { f.touch(ctx, k.Tenant, k.Session) })
}

// takeBackstop is how long a node that saw another leave waits before it
// takes, itself, the lost node's sessions that the rendezvous gave to a
// third node and that are still the lost node's (backstop).
const takeBackstop = 2 * time.Second

// backstop takes, after takeBackstop, those of keys that the owners index
// still gives to the lost node: the survivor the rendezvous picked may not
// have seen the loss yet (its watch of the nodes bucket can stand still
// while a new consumer waits for the JetStream meta leader). Taking such a
// session is as safe as any takeover: the actor takes it only if its log
// still names a lost owner (Own), and when two nodes try at once the log's
// guard lets one OwnershipTaken in.
func (f *fleet) backstop(lost string, keys []cluster.SessionKey) {
	if len(keys) == 0 {
		return
	}
	f.sup.After(takeBackstop, func(ctx context.Context) {
		var left []cluster.SessionKey
		for _, k := range keys {
			if f.adopts(k.Tenant, k.Session, true, lost) {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			return
		}
		f.logger.Warn("node left the fleet a while ago, and some of its sessions are still its own in the owners index: taking them over", "node", lost, "ago", takeBackstop, "sessions", len(left))
		f.takeAll(ctx, left)
	})
}

// takeAttempts bounds the tries of one take over: a log read or an append
// fails while the stream elects a leader (docs/facts.md: 4-9 s), and the
// actor that failed stops; the next try spawns a fresh one. Each try is
// bounded by fleetLogTimeout already; past a second the pause only delays
// the take once the stream is back.
const takeAttempts = 20

var takeBackoff = retry.Backoff{Initial: 250 * time.Millisecond, Factor: 2, Max: time.Second}

// touch makes sure a session's actor is loaded on this node (and so owns
// the session, if Route lets it): it asks the actor a question that needs
// its log and waits for the answer, and tries again while the session is
// unavailable (its actor failed to load or to append), until ctx ends (the
// node closes).
func (f *fleet) touch(ctx context.Context, tenant, session string) {
	_ = retry.Do(ctx, takeBackoff, takeAttempts, func(ctx context.Context, attempt int) error {
		actx, cancel := context.WithTimeout(ctx, replyTimeout)
		defer cancel()
		r, err := ask(actx, f.reg, f, tenant, session, func(reply chan actors.TurnReply) actors.Message {
			return actors.GetTurn{Reply: reply}
		}, turnErr)
		if err == nil {
			err = r.Err
		}
		if err == nil || !errors.Is(err, actors.ErrSessionUnavailable) {
			return retry.Permanent(err) // taken, or another node's (NotOwnerError), or gone
		}
		f.logger.Info("taking a session over: not yet", "tenant", tenant, "session", session, "attempt", attempt, "err", err)
		return err
	})
}

// handOver releases the given sessions this node owns (each records
// OwnershipReleased and stops), so another node takes them at once.
func (f *fleet) handOver(keys []cluster.SessionKey) {
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(f.sup.Context(), replyTimeout)
		err, werr := ask(ctx, f.reg, f, k.Tenant, k.Session, func(reply chan error) actors.Message {
			return actors.Release{Reply: reply}
		}, errItself)
		cancel()
		if err = errors.Join(err, werr); err != nil {
			f.logger.Warn("handing a session over failed", "tenant", k.Tenant, "session", k.Session, "err", err)
		}
	}
}

// releaseAll hands over every session whose actor lives on this node
// (graceful shutdown): each records OwnershipReleased, so the fleet takes
// it at once, without waiting for this node's lease to lapse.
func (f *fleet) releaseAll() {
	pids := f.reg.live()
	replies := make([]chan error, len(pids))
	for i, pid := range pids {
		replies[i] = make(chan error, 1)
		f.reg.engine.Send(pid, actors.Release{Reply: replies[i]})
	}
	timeout := time.After(replyTimeout)
	for _, ch := range replies {
		select {
		case err := <-ch:
			if err != nil {
				f.logger.Warn("releasing a session at shutdown failed", "err", err)
			}
		case <-timeout:
			return
		}
	}
}

// tookOver is told that this node's OwnershipTaken of a session at epoch is
// durable. When the owners index (not yet updated: Owned writes it after)
// names another node that did not release it, this is a takeover: counted
// (callsheet_takeovers_total) and logged, with the time since this node saw
// that node leave.
func (f *fleet) tookOver(tenant, session string, epoch uint64) {
	if f.owners == nil {
		return
	}
	prev, ok := f.owners.Get(tenant, session)
	if !ok || prev.Node == f.self || prev.Node == "" || prev.Released || prev.Epoch >= epoch {
		return
	}
	f.ops.TookOver(1)
	args := []any{"tenant", tenant, "session", session, "epoch", epoch, "from", prev.Node}
	f.lmu.Lock()
	lost, seen := f.lostAt[prev.Node]
	f.lmu.Unlock()
	msg := fmt.Sprintf("took session %s at epoch %d", session, epoch)
	if seen {
		after := time.Since(lost).Round(time.Millisecond)
		msg += " after " + after.String()
		args = append(args, "after_ms", after.Milliseconds())
	}
	f.logger.Info(msg, args...)
}

// notOwner is the NotOwnerError for a session owner serves.
func (f *fleet) notOwner(session, owner string) *NotOwnerError {
	e := &NotOwnerError{Session: session, Owner: owner}
	if owner != "" {
		if m, ok := f.members.Alive(owner); ok {
			e.URL = m.HTTP
		}
	}
	return e
}

// nodes lists the fleet's nodes: every live one, and every other node the
// owners index still gives sessions of tenant to (not alive: its sessions
// are being taken over), by name.
func (f *fleet) nodes(tenant string) []NodeStatus {
	counts := map[string]int{}
	for node, c := range f.owners.CountsFor(tenant) {
		counts[node] = c
	}
	var out []NodeStatus
	seen := map[string]bool{}
	for _, m := range f.members.List() {
		out = append(out, NodeStatus{Name: m.Name, HTTP: m.HTTP, Alive: true, Sessions: counts[m.Name]})
		seen[m.Name] = true
	}
	for name, c := range counts {
		if !seen[name] {
			out = append(out, NodeStatus{Name: name, Sessions: c})
		}
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// NotOwnerError says that another node of the fleet owns a session
// (docs/spec.md §7): the HTTP API forwards the call to its URL. It is the
// session actor's error, the one type for it.
type NotOwnerError = actors.NotOwnerError
