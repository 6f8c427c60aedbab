package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

func (n *Node) logf(format string, args ...any) {
	if n.opts.Logf != nil {
		n.opts.Logf(format, args...)
	}
}

// clusterDetail says, while the node waits for JetStream, how far the
// embedded server got with its routes.
func (n *Node) clusterDetail() string {
	if n.server == nil || !n.server.Options().Clustered() {
		return "no route to wait for"
	}
	return fmt.Sprintf("%d route connections up (routes %v; every node of a fleet needs the same --nats-creds)", n.server.Routes(), n.opts.Routes)
}

// awaitAttempt bounds one try of await: a JetStream API request sent while
// a cluster's meta leader settles can go unanswered, and the next try (the
// stream or bucket found if the first did make it, else created again)
// does better than waiting on it; observed: a create left unanswered for
// over 30 s while the same create, sent again, took milliseconds.
const awaitAttempt = 5 * time.Second

// await runs f until it succeeds or ctx ends, saying every
// cluster.WaitEvery what it waits for. A cluster creates streams only once
// it has enough servers for their replicas, and elects their leaders in its
// own time.
func (n *Node) await(ctx context.Context, what string, f func(ctx context.Context) error) error {
	return n.awaitWithin(ctx, what, awaitAttempt, f)
}

// awaitWithin is await with each try bounded by attempt.
func (n *Node) awaitWithin(ctx context.Context, what string, attempt time.Duration, f func(ctx context.Context) error) error {
	var last time.Time
	for {
		fctx, cancel := context.WithTimeout(ctx, attempt)
		err := f(fctx)
		cancel()
		if err == nil {
			return nil
		}
		var perm permanent
		if errors.As(err, &perm) {
			return perm.error
		}
		if ctx.Err() != nil {
			return fmt.Errorf("node: waiting for %s: %w", what, err)
		}
		if n.server == nil && n.opts.NATSURL == "" {
			return err
		}
		if time.Since(last) >= cluster.WaitEvery {
			n.logf("waiting for %s: %v (%s)", what, err, n.clusterDetail())
			last = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// permanent marks an error await does not retry.
type permanent struct{ error }

// replicas is the replica count of what this node creates: the configured
// one, else 3 on a cluster of 3 or more servers, else 1; an existing stream
// keeps a larger count, so a node started without saying never scales a
// fleet's log down.
func (n *Node) replicas(ctx context.Context, js jetstream.JetStream) int {
	want := n.opts.Replicas
	if want == 0 {
		want = n.cfg.Replicas
	}
	if want > 0 {
		return want
	}
	want = 1
	if n.clusterSize() >= 3 {
		want = 3
	}
	if st, err := js.Stream(ctx, natslog.DefaultStream); err == nil {
		want = max(want, st.CachedInfo().Config.Replicas)
	}
	return want
}

// clusterSize is how many servers the node's NATS cluster has, as far as it
// can tell at start: with --nats, the servers the connection knows of; with
// a clustered embedded server, its routes' distinct addresses plus itself.
func (n *Node) clusterSize() int {
	if n.opts.NATSURL != "" {
		return len(n.nc.Servers())
	}
	if n.opts.ClusterListen == "" {
		return 1
	}
	self := n.opts.ClusterListen
	if a := n.server.ClusterAddr(); a != nil {
		self = a.String()
	}
	seen := map[string]bool{}
	for _, r := range n.opts.Routes {
		u, err := url.Parse(r)
		if err != nil {
			continue
		}
		seen[u.Host] = true
	}
	if !seen[self] && !seen[loopbackAlias(self)] {
		seen[self] = true
	}
	return len(seen)
}

// loopbackAlias spells a loopback HOST:PORT the other usual way (localhost
// and 127.0.0.1), so a node given its own route is not counted twice.
func loopbackAlias(hp string) string {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return hp
	}
	switch host {
	case "127.0.0.1":
		return net.JoinHostPort("localhost", port)
	case "localhost":
		return net.JoinHostPort("127.0.0.1", port)
	}
	return hp
}

// fleet is a node's part in its fleet (docs/spec.md §7): its lease, the
// live members, the owners index, and the goroutine that takes over the
// sessions of lost nodes and hands sessions to the node that keeps their
// workspace. A node alone runs the same machinery with itself as the only
// member.
type fleet struct {
	lease   *cluster.Lease
	members *cluster.Members
	owners  *cluster.Owners
	caps    *cluster.Caps
	shared  bool
	// stopped are the sessions whose actors the loss of the lease stopped,
	// brought back once it is held again (lease.go); fleet goroutine only.
	stopped map[cluster.SessionKey]bool

	// work carries the membership and ownership changes to the fleet
	// goroutine, in order.
	work    chan func()
	stop    chan struct{}
	done    chan struct{}
	started bool // the goroutine runs (set before it starts)
	closed  atomic.Bool
}

// takeWorkers bounds how many sessions a node takes over at once.
const takeWorkers = 8

// startFleet opens this node's lease (waiting, in a cluster, for a lease of
// the same name held by another process to lapse), watches the fleet's
// members and the owners index, and starts the fleet goroutine.
func (n *Node) startFleet(ctx context.Context, js jetstream.JetStream, replicas int) error {
	f := &fleet{shared: n.opts.SharedWorkspaces, work: make(chan func(), 1024), stop: make(chan struct{}), done: make(chan struct{})}
	n.fleet = f
	ttl := n.cfg.Fleet.LeaseTTL.Std()
	ops := n.ops // made before the fleet, read by the lease's goroutine
	self := cluster.Member{Name: n.opts.Name, HTTP: n.opts.HTTPAdvertise, Incarnation: n.incarnation, Started: time.Now().UTC()}
	if n.server != nil && !n.server.Options().Clustered() {
		// A standalone embedded server serves this process alone (its store
		// is locked by it): a lease of this name left by an earlier process
		// is that process's, which is gone. Remove it instead of waiting.
		if err := cluster.DropLease(ctx, js, n.opts.Name, ttl, replicas); err != nil {
			return err
		}
	}
	// A lease of this name held by this node's previous process lapses
	// within the TTL: OpenLease waits for it (up to twice the TTL and a
	// little), so one try may take that long.
	if err := n.awaitWithin(ctx, "this node's lease", 2*ttl+10*time.Second, func(ctx context.Context) (err error) {
		f.lease, err = cluster.OpenLease(ctx, js, self, cluster.LeaseOptions{TTL: ttl, Replicas: replicas, Logf: n.logf,
			Dial: n.leaseConn, OnRenewed: ops.LeaseRenewed, OnRegained: func() { f.post(n.onLeaseRegained) },
			OnLost: func() {
				ops.LeaseLost()
				f.post(n.onLeaseLost)
			}})
		if errors.Is(err, cluster.ErrLeaseHeld) && ctx.Err() == nil {
			return permanent{err}
		}
		return err
	}); err != nil {
		return err
	}
	if err := n.await(ctx, "the fleet's members", func(ctx context.Context) (err error) {
		f.members, err = cluster.WatchMembers(ctx, js, ttl, replicas, func(c cluster.Change) { f.post(func() { n.onMember(c) }) }, cluster.WithLease(f.lease), cluster.WithMembersLog(n.logf))
		return err
	}); err != nil {
		return err
	}
	if err := n.await(ctx, "the owners index", func(ctx context.Context) (err error) {
		f.owners, err = cluster.WatchOwners(ctx, js, replicas, func(k cluster.SessionKey, o cluster.Ownership) {
			if o.Released {
				f.post(func() { n.takeIfMine(k, o) })
			}
		})
		return err
	}); err != nil {
		return err
	}
	if err := n.await(ctx, "the fleet caps' bucket", func(ctx context.Context) (err error) {
		f.caps, err = cluster.OpenCaps(ctx, js, replicas, ttl)
		return err
	}); err != nil {
		return err
	}
	f.started = true
	go f.run()
	return nil
}

// fleetCaps adapts cluster.Caps to the tool actors (actors.FleetCaps).
type fleetCaps struct {
	c    *cluster.Caps
	node string
}

func (a fleetCaps) Acquire(ctx context.Context, tenant, session string, r *events.ToolCallRequested) (func(), time.Time, error) {
	var timeout time.Duration
	if r.TimeoutMS > 0 {
		timeout = time.Duration(r.TimeoutMS) * time.Millisecond
	}
	slot, err := a.c.Acquire(ctx, cluster.Scope(r.FleetCapScope, tenant), r.Name, r.FleetCap, timeout,
		cluster.Holder{Node: a.node, Tenant: tenant, Session: session, Call: r.Call, Attempt: r.Attempt})
	if err != nil {
		return nil, time.Time{}, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = slot.Release(ctx) // a slot not released lapses at its deadline
	}, slot.Deadline(), nil
}

// post queues work for the fleet goroutine; dropped once it stopped.
func (f *fleet) post(w func()) {
	if f.closed.Load() {
		return
	}
	select {
	case f.work <- w:
	case <-f.stop:
	}
}

// run is the fleet goroutine: it does the queued work in order until Close.
func (f *fleet) run() {
	defer close(f.done)
	for {
		select {
		case w := <-f.work:
			w()
		case <-f.stop:
			return
		}
	}
}

// close stops the fleet goroutine and the watches; the lease is released
// by Node.Close separately (after the sessions are handed over).
func (f *fleet) close() {
	if f.closed.Swap(true) {
		return
	}
	close(f.stop)
	if f.started {
		<-f.done
	}
	if f.members != nil {
		f.members.Close()
	}
	if f.owners != nil {
		f.owners.Close()
	}
	if f.caps != nil {
		f.caps.Close()
	}
}

// inFleet reports whether other nodes may share this node's NATS: a
// clustered embedded server, or --nats. A node alone on its own embedded
// server has nobody to hand sessions to.
func (n *Node) inFleet() bool {
	return n.opts.NATSURL != "" || (n.server != nil && n.server.Options().Clustered())
}

// gate is every session actor's and tool actor's permission to act.
func (n *Node) gate() error {
	if n.fleet == nil || n.fleet.lease == nil {
		return nil
	}
	return n.fleet.lease.Check()
}

// alive reports whether a node's lease is alive (this node: whether it
// holds its own).
func (n *Node) alive(node string) bool {
	if node == n.opts.Name {
		return n.gate() == nil
	}
	_, ok := n.fleet.members.Alive(node)
	return ok
}

// NodeAlive reports whether the named node of the fleet holds its lease,
// as this node sees it (for this node itself: whether it may act). A node
// that is not part of a fleet is alive only as itself.
func (n *Node) NodeAlive(name string) bool {
	if n.fleet == nil || n.fleet.members == nil {
		return name == n.opts.Name
	}
	return n.alive(name)
}

// place is the session actors' Place: cluster.Place with this node's view.
func (n *Node) place(tenant, session string, cur actors.Owner) actors.Placement {
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	v := cluster.View{Self: n.opts.Name, SelfAlive: !closed && n.gate() == nil, Alive: n.alive, Shared: n.opts.SharedWorkspaces}
	d := cluster.Place(v, cluster.Owner{Node: cur.Node, Released: cur.Released, WorkspaceNode: cur.WorkspaceNode})
	return actors.Placement{Take: d.Take, Holder: d.Holder, WorkspaceAway: d.WorkspaceAway}
}

// ownedAttempts bounds the tries of one owners index write, each up to
// ownedAttempt, a second apart: past a leader election of the bucket.
const (
	ownedAttempts = 12
	ownedAttempt  = 5 * time.Second
)

// owned is the session actors' Owned: it brings the owners index up to
// date, in a goroutine (the index is a hint, and the log stays the truth).
// It tries again while the write fails: a write lost during an election of
// the owners bucket is corrected by no later change while this node keeps
// the session, and the fleet would route its calls by the stale entry (to
// the owner before, which may well be alive again) for as long as it owns
// it. Set never overwrites a later epoch, so a late retry is harmless.
func (n *Node) owned(tenant, session string, epoch uint64, released bool, wsNode string) {
	f := n.fleet
	if f == nil || f.owners == nil {
		return
	}
	own := cluster.Ownership{Node: n.opts.Name, Epoch: epoch, Released: released, WorkspaceNode: wsNode}
	go func() {
		for attempt := 1; attempt <= ownedAttempts && !n.isClosed(); attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), ownedAttempt)
			err := f.owners.Set(ctx, tenant, session, own)
			cancel()
			if err == nil {
				return
			}
			n.logf("owners index of session %s (attempt %d of %d): %v", session, attempt, ownedAttempts, err)
			time.Sleep(time.Second)
		}
	}()
}

// onMember reacts to a change of the fleet's membership: a node that left
// (its lease lapsed or was released) has its sessions taken over by the
// live nodes, each taking those Rendezvous gives it; a node that joined
// gets back the sessions whose workspace it keeps.
func (n *Node) onMember(c cluster.Change) {
	if c.Member.Name == n.opts.Name {
		return
	}
	if !c.Joined {
		n.logf("node %s left the fleet: taking over its sessions", c.Member.Name)
		keys := n.fleet.owners.OwnedBy(c.Member.Name, true)
		n.backstop(c.Member.Name, keys)
		n.takeOver(keys)
		return
	}
	n.logf("node %s joined the fleet", c.Member.Name)
	if n.opts.SharedWorkspaces {
		return
	}
	var back []cluster.SessionKey
	for _, k := range n.fleet.owners.OwnedBy(n.opts.Name, false) {
		if own, ok := n.fleet.owners.Get(k.Tenant, k.Session); ok && own.WorkspaceNode == c.Member.Name {
			back = append(back, k)
		}
	}
	n.handOver(back)
}

// takeIfMine takes a released session when Rendezvous gives it to this node.
func (n *Node) takeIfMine(k cluster.SessionKey, o cluster.Ownership) {
	if o.Node == n.opts.Name && n.isClosed() {
		return
	}
	n.takeOver([]cluster.SessionKey{k})
}

// takeOver takes, of keys, the sessions Rendezvous over the live nodes gives
// to this node: it spawns their actors, which take ownership at the next
// epoch when they load (OwnershipTaken, the fence), settle what was in
// flight and carry on. Eager, so the fence is in the log before the lost
// owner could append again, and the turns in flight go on.
func (n *Node) takeOver(keys []cluster.SessionKey) {
	if n.isClosed() || n.gate() != nil || len(keys) == 0 {
		return
	}
	live := n.fleet.members.Names()
	if !slices.Contains(live, n.opts.Name) {
		live = append(live, n.opts.Name)
	}
	var mine []cluster.SessionKey
	for _, k := range keys {
		own, _ := n.fleet.owners.Get(k.Tenant, k.Session)
		nodes := live
		if own.Released && own.Node != "" && own.Node != n.opts.Name {
			nodes = slices.DeleteFunc(slices.Clone(live), func(s string) bool { return s == own.Node })
		}
		if cluster.Rendezvous(k.Tenant, k.Session, nodes, own.WorkspaceNode, n.opts.SharedWorkspaces) == n.opts.Name {
			mine = append(mine, k)
		}
	}
	if len(mine) == 0 {
		return
	}
	n.takeAll(mine)
}

// takeAll takes the sessions over, at most takeWorkers at once (each take
// reads the session's log), and returns when every take has ended.
func (n *Node) takeAll(keys []cluster.SessionKey) {
	sem := make(chan struct{}, takeWorkers)
	var wg sync.WaitGroup
	for _, k := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n.touch(k.Tenant, k.Session)
		}()
	}
	wg.Wait()
}

// fleetLogTimeout bounds each request of a fleet node's event log made
// without a deadline of its own (natslog.WithTimeout; a single node keeps
// natslog.DefaultTimeout, 5 s). A request sent while the event stream
// elects a leader is never answered, not even once the election is over:
// it costs its whole timeout, and only the next try reaches the new
// leader. At 5 s that was up to 5 s more on every takeover that followed an
// election (the fleet suite: a survivor saw the owner gone 4.5 s after the
// kill, its read of the session's log timed out 5 s later, and the next try
// took the session at once). Reads and guarded appends are safe to repeat
// (an append's message ids make a repeat store nothing twice), and an
// answer takes milliseconds when the stream has a leader, so 2 s is still
// far above a loaded machine's.
const fleetLogTimeout = 2 * time.Second

// takeBackstop is how long a node that saw another leave waits before it
// takes, itself, the lost node's sessions that Rendezvous gave to a third
// node and that are still the lost node's (backstop).
const takeBackstop = 2 * time.Second

// backstop takes, after takeBackstop, those of keys that the owners index
// still gives to the lost node. Rendezvous gives each of a lost node's
// sessions to one survivor, but that survivor may not have seen the loss
// yet: its watch of the nodes bucket can stand still for many seconds (its
// consumer was on the lost node's server, and a new one needs the
// JetStream meta leader, which may have been that server too: the fleet
// suite saw one survivor take its share 4.5 s after a kill and the other
// 14.7 s after it). Taking such a session is as safe as any takeover: the
// lost node's lease has lapsed in this node's view, the actor takes it only
// if its log still names that node as owner (Place, with this node's view
// of the leases), and when the Rendezvous node takes it first, or both try
// at once, the log's guard lets one OwnershipTaken in and the other actor
// finds a live owner: the session moves once.
func (n *Node) backstop(lost string, keys []cluster.SessionKey) {
	if len(keys) == 0 {
		return
	}
	time.AfterFunc(takeBackstop, func() {
		if n.isClosed() || n.gate() != nil {
			return
		}
		if _, back := n.fleet.members.Alive(lost); back {
			return // it came back (a restart): its sessions are its own again
		}
		var left []cluster.SessionKey
		for _, k := range keys {
			if own, ok := n.fleet.owners.Get(k.Tenant, k.Session); ok && own.Node == lost {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			return
		}
		n.logf("node %s left the fleet %s ago: %d of its sessions are still its own in the owners index; taking them over", lost, takeBackstop, len(left))
		n.takeAll(left)
	})
}

// takeAttempts bounds the tries of one take over: a log read or an append
// fails while the stream elects a leader (docs/facts.md: 4-9 s), and the
// actor that failed stops; the next try spawns a fresh one.
const takeAttempts = 20

// touch makes sure a session's actor is loaded on this node (and so owns
// the session, if Place lets it): it asks the actor a question that needs
// its log and waits for the answer, and tries again while the session is
// unavailable (its actor failed to load or to append), until the node
// closes.
func (n *Node) touch(tenant, session string) {
	delay := 250 * time.Millisecond
	for attempt := 1; attempt <= takeAttempts && !n.isClosed(); attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
		r, err := ask(ctx, n, tenant, session, func(reply chan actors.TurnReply) actors.Message {
			return actors.GetTurn{Reply: reply}
		}, turnErr)
		cancel()
		if err == nil {
			err = r.Err
		}
		if err == nil || !errors.Is(err, actors.ErrSessionUnavailable) {
			return // taken, or another node's (NotOwnerError), or gone
		}
		n.logf("taking session %s over (attempt %d): %v", session, attempt, err)
		time.Sleep(delay)
		// Each try is bounded by fleetLogTimeout already; past a second
		// the pause only delays the take once the stream is back.
		delay = min(2*delay, time.Second)
	}
}

// handOver releases the given sessions this node owns (each records
// OwnershipReleased and stops), so another node takes them at once.
func (n *Node) handOver(keys []cluster.SessionKey) {
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
		err, werr := ask(ctx, n, k.Tenant, k.Session, func(reply chan error) actors.Message {
			return actors.Release{Reply: reply}
		}, errItself)
		cancel()
		if err = errors.Join(err, werr); err != nil {
			n.logf("handing session %s over: %v", k.Session, err)
		}
	}
}

// releaseAll hands over every session whose actor lives on this node
// (graceful shutdown): each records OwnershipReleased, so the fleet takes
// it at once, without waiting for this node's lease to lapse.
func (n *Node) releaseAll() {
	n.mu.Lock()
	pids := make([]*actor.PID, 0, len(n.sessions))
	for _, pid := range n.sessions {
		pids = append(pids, pid)
	}
	n.mu.Unlock()
	replies := make([]chan error, len(pids))
	for i, pid := range pids {
		replies[i] = make(chan error, 1)
		n.engine.Send(pid, actors.Release{Reply: replies[i]})
	}
	timeout := time.After(replyTimeout)
	for _, ch := range replies {
		select {
		case err := <-ch:
			if err != nil {
				n.logf("releasing a session at shutdown: %v", err)
			}
		case <-timeout:
			return
		}
	}
}

func (n *Node) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// running is the session actors' Running: whether this node's tool actors
// run a call now.
func (n *Node) running(tenant, session string, ref events.CallRef, _ int) bool {
	for _, p := range n.pools {
		if p.Running(tenant, session, ref) {
			return true
		}
	}
	return false
}

// ErrNotOwner is wrapped by a NotOwnerError.
var ErrNotOwner = errors.New("node: another node owns the session")

// NotOwnerError says that another node of the fleet owns a session
// (docs/spec.md §7): the HTTP API forwards the call to URL. Owner is empty
// when no node can serve the session right now (its ownership is moving).
type NotOwnerError struct {
	Session string
	// Owner names the owner; URL is its HTTP API, empty if unknown.
	Owner, URL string
}

func (e *NotOwnerError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("session %s is between owners: no node can serve it right now; retry shortly", e.Session)
	}
	return fmt.Sprintf("session %s is owned by node %s", e.Session, e.Owner)
}

// Unwrap makes errors.Is(err, ErrNotOwner) hold.
func (e *NotOwnerError) Unwrap() error { return ErrNotOwner }

// notOwner is the NotOwnerError for a session owner serves.
func (n *Node) notOwner(session, owner string) *NotOwnerError {
	e := &NotOwnerError{Session: session, Owner: owner}
	if owner != "" && n.fleet != nil {
		if m, ok := n.fleet.members.Alive(owner); ok {
			e.URL = m.HTTP
		}
	}
	return e
}

// Locate says where a call for a session is served: on this node (local),
// or by owner at url, as the owners index and the fleet's leases show it.
// Any node serves any session: a session whose owner is lost, or that was
// released, or never owned, is this node's to take (its actor decides with
// the log, which may still say otherwise); a node shutting down sends
// everything to the node Rendezvous picks among the others.
func (n *Node) Locate(tenant, session string) (owner, url string, local bool) {
	f := n.fleet
	if f == nil || f.owners == nil {
		return n.opts.Name, n.opts.HTTPAdvertise, true
	}
	own, hinted := f.owners.Get(tenant, session)
	if n.isClosed() || (hinted && own.Released && own.Node == n.opts.Name) {
		others := slices.DeleteFunc(f.members.Names(), func(s string) bool { return s == n.opts.Name })
		if to := cluster.Rendezvous(tenant, session, others, own.WorkspaceNode, n.opts.SharedWorkspaces); to != "" {
			if m, ok := f.members.Alive(to); ok && m.HTTP != "" {
				return to, m.HTTP, false
			}
		}
		return n.opts.Name, n.opts.HTTPAdvertise, true
	}
	if hinted && !own.Released && own.Node != n.opts.Name {
		if m, ok := f.members.Alive(own.Node); ok && m.HTTP != "" {
			return own.Node, m.HTTP, false
		}
	}
	// Without shared workspaces a session belongs with its workspace's
	// node while that node is alive.
	if hinted && !n.opts.SharedWorkspaces && own.WorkspaceNode != "" && own.WorkspaceNode != n.opts.Name && (own.Released || !n.alive(own.Node)) {
		if m, ok := f.members.Alive(own.WorkspaceNode); ok && m.HTTP != "" {
			return own.WorkspaceNode, m.HTTP, false
		}
	}
	return n.opts.Name, n.opts.HTTPAdvertise, true
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
func (n *Node) SessionStatus(ctx context.Context, tenant, session string) (SessionStatus, error) {
	rec, err := n.record(ctx, tenant, session)
	if err != nil {
		return SessionStatus{}, err
	}
	evs, err := n.log.Read(ctx, tenant, session, 0)
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
func (n *Node) Nodes(tenant string) []NodeStatus {
	f := n.fleet
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
