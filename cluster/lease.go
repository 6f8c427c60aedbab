package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of a fleet's liveness (docs/spec.md §7).
const (
	// NodesBucket is the KV bucket of the nodes' leases: one key per node
	// name, holding its Member, with a per-message TTL.
	NodesBucket = "cs_nodes"
	// DefaultLeaseTTL is how long a lease lives without a renewal.
	DefaultLeaseTTL = 5 * time.Second
	// MinLeaseTTL is the shortest lease: JetStream's per-message TTL is at
	// least a second and is checked once a second.
	MinLeaseTTL = 2 * time.Second
)

// Errors about leases.
var (
	// ErrLeaseLost is returned by Lease.Check once the node can no longer
	// show it holds its lease: it failed to renew for most of the TTL, or
	// its lease lapsed or was taken. The node must not act.
	ErrLeaseLost = errors.New("cluster: this node's lease is lost; it does not act until it holds one again")
	// ErrLeaseHeld is wrapped when another live process holds the lease of
	// this node's name.
	ErrLeaseHeld = errors.New("cluster: another process holds this node's lease")
)

// Member is what a node's lease says about it.
type Member struct {
	// Name is the node's name, unique in the fleet.
	Name string `json:"name"`
	// HTTP is the URL the fleet forwards API calls to; may be empty.
	HTTP string `json:"http,omitempty"`
	// Incarnation names the node's process (a ULID minted at its start).
	Incarnation string `json:"incarnation"`
	// Started is when the process started (its clock, for operators).
	Started time.Time `json:"started"`
	// TTLMS is the lease's TTL in milliseconds (OpenLease sets it): a
	// watcher counts the lease lapsed once no renewal arrived for that long
	// (Members), whatever TTL the watcher's own node uses.
	TTLMS int64 `json:"ttl_ms,omitempty"`
}

// ttl is the member's lease TTL, or def when it does not say.
func (m Member) ttl(def time.Duration) time.Duration {
	if m.TTLMS > 0 {
		return time.Duration(m.TTLMS) * time.Millisecond
	}
	return def
}

// LeaseOptions configure OpenLease.
type LeaseOptions struct {
	// TTL is how long the lease lives without a renewal; default
	// DefaultLeaseTTL, at least MinLeaseTTL. The lease is renewed every
	// TTL/5, and the node stops acting once it could not renew for TTL
	// minus a margin of TTL/5 (at least 500 ms), measured on its monotonic
	// clock from before the last renewal that succeeded, so it stops before
	// the server can expire the lease, whatever its wall clock says.
	TTL time.Duration
	// Replicas of the bucket; default 1.
	Replicas int
	// Logger logs waiting for the lease, renewal trouble, and when the
	// lease is lost and held again; nil discards.
	Logger *slog.Logger
	// Dial, when set, opens the connection the lease is renewed on, which
	// the lease owns and closes: a connection nothing else uses, so that a
	// renewal never waits behind other traffic (a big read filling the
	// shared connection's buffers, a burst of appends). Without it the
	// lease uses the js OpenLease is given.
	Dial func() (*nats.Conn, error)
	// OnLost is called, from the renewal goroutine, each time the node
	// loses its lease (Check starts failing); OnRegained each time it holds
	// one again; OnRenewed after each write of the lease the server
	// acknowledged (renewals and creations). Any may be nil.
	OnLost, OnRegained, OnRenewed func()
}

// Lease is this node's lease in the NodesBucket: created by OpenLease,
// renewed by one goroutine it owns, deleted by Release. Its methods are safe
// for concurrent use.
//
// A renewal is a publish on the key's subject guarded by the key's last
// revision (WithExpectLastSequencePerSubject) with a per-message TTL
// (WithMsgTTL): nats-server 2.15 sets a KV key's TTL on create only, and
// kv.Update would write the key with no TTL at all (docs/facts.md, "Fleet
// facts"). The guard makes a renewal fail once the key lapsed or another
// process took it.
type Lease struct {
	js     jetstream.JetStream
	nc     *nats.Conn // the connection Dial opened; nil without Dial
	kv     jetstream.KeyValue
	self   Member
	value  []byte
	ttl    time.Duration
	margin time.Duration
	opts   LeaseOptions

	mu       sync.Mutex
	rev      uint64
	deadline time.Time // monotonic: the node may act until then
	held     bool
	wroteAt  time.Time // when the server acknowledged rev
	// unacked is when the first renewal sent after rev was acknowledged
	// was sent (zero: none since): a later revision of this incarnation's
	// was written no earlier.
	unacked time.Time
	// sent is when the write of rev was sent; stats are what Stats reports.
	sent  time.Time
	stats LeaseStats

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// leaseBucket creates (or updates) the NodesBucket.
func leaseBucket(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	kv, err := ensureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      NodesBucket,
		Description: "callsheet nodes' leases",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		// Markers let every watcher see a lease expire; they are kept for
		// a while, then go too.
		LimitMarkerTTL: max(ttl, time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: lease bucket %s: %w", NodesBucket, err)
	}
	return kv, nil
}

// OpenLease creates this node's lease and starts renewing it. When another
// process holds the lease of the same name it waits for that lease to
// lapse, saying so through Logger: a node restarted within its lease waits at
// most the TTL. A lease still renewed after twice the TTL is a live process
// with the same name, and OpenLease fails with an error wrapping
// ErrLeaseHeld that says so; it fails the same way when ctx ends first.
// With o.Dial the lease works on a connection of its own, not on js's.
// Other errors are Dial's or the server's.
func OpenLease(ctx context.Context, js jetstream.JetStream, self Member, o LeaseOptions) (_ *Lease, err error) {
	if o.TTL == 0 {
		o.TTL = DefaultLeaseTTL
	}
	if o.TTL < MinLeaseTTL {
		return nil, fmt.Errorf("%w: lease TTL %s: use at least %s", ErrInvalidOption, o.TTL, MinLeaseTTL)
	}
	if !validToken(self.Name) {
		return nil, fmt.Errorf("%w: node name %q: use 1..64 letters, digits, '_' or '-'", ErrInvalidOption, self.Name)
	}
	var nc *nats.Conn
	if o.Dial != nil {
		if nc, err = o.Dial(); err != nil {
			return nil, fmt.Errorf("cluster: the lease's connection: %w", err)
		}
		defer func() {
			if err != nil {
				nc.Close()
			}
		}()
		if js, err = jetstream.New(nc); err != nil {
			return nil, err
		}
	}
	kv, err := leaseBucket(ctx, js, o.TTL, o.Replicas)
	if err != nil {
		return nil, err
	}
	self.TTLMS = o.TTL.Milliseconds()
	value, _ := json.Marshal(self)
	l := &Lease{js: js, nc: nc, kv: kv, self: self, value: value, ttl: o.TTL, margin: max(o.TTL/5, 500*time.Millisecond),
		opts: o, stop: make(chan struct{}), done: make(chan struct{})}
	var logged time.Time
	giveUp := time.Now().Add(2*o.TTL + 2*time.Second)
	for {
		ok, holder, err := l.create(ctx)
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		if ok {
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: node %s: %v", ErrLeaseHeld, self.Name, ctx.Err())
		}
		if holder != nil && time.Now().After(giveUp) {
			return nil, fmt.Errorf("%w: node %s: its lease is held by incarnation %s (started %s, serving %s) and still renewed after %s: another node runs with this name; give each node of a fleet its own --name",
				ErrLeaseHeld, self.Name, holder.Incarnation, holder.Started.Format(time.RFC3339), holder.HTTP, 2*o.TTL)
		}
		if time.Since(logged) >= WaitEvery {
			what := fmt.Sprint(err)
			if holder != nil {
				what = fmt.Sprintf("held by incarnation %s started %s", holder.Incarnation, holder.Started.Format(time.RFC3339))
			}
			l.log().Info("waiting for this node's lease to lapse: this node restarted within its lease, or another process runs with the same --name",
				"node", self.Name, "holder", what)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	go l.renew()
	return l, nil
}

// create tries to create the lease key; when it exists it returns its
// holder.
func (l *Lease) create(ctx context.Context) (bool, *Member, error) {
	before := time.Now()
	cctx, cancel := context.WithTimeout(ctx, l.ttl/2)
	rev, err := l.kv.Create(cctx, l.self.Name, l.value, jetstream.KeyTTL(l.ttl))
	cancel()
	if err == nil {
		l.mu.Lock()
		l.acked(rev, before)
		l.held = true
		l.mu.Unlock()
		l.renewed()
		return true, nil, nil
	}
	if !taken(err) {
		return false, nil, err
	}
	gctx, cancel := context.WithTimeout(ctx, l.ttl/2)
	defer cancel()
	e, gerr := l.kv.Get(gctx, l.self.Name)
	if gerr != nil {
		return false, nil, err
	}
	var m Member
	if json.Unmarshal(e.Value(), &m) == nil && m.Incarnation == l.self.Incarnation {
		// Our own key (a create whose answer was lost): hold it.
		l.mu.Lock()
		l.acked(e.Revision(), before)
		l.held = true
		l.mu.Unlock()
		l.renewed()
		return true, nil, nil
	}
	return false, &m, err
}

func (l *Lease) log() *slog.Logger {
	if l.opts.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.opts.Logger
}

// Self is the member this lease announces.
func (l *Lease) Self() Member { return l.self }

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// renewEvery is how often the lease is renewed; retryEvery is how soon a
// renewal that failed is tried again.
func (l *Lease) renewEvery() time.Duration { return l.ttl / 5 }
func (l *Lease) retryEvery() time.Duration { return max(l.ttl/20, 100*time.Millisecond) }

// lastWrite returns the revision of the lease's latest write the server
// acknowledged and when it did (Members checks its watch against it).
func (l *Lease) lastWrite() (uint64, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev, l.wroteAt
}

// acked records that the server stored the lease's write rev, sent at
// sent: the node may act until TTL minus the margin after it. l.mu must be
// held.
func (l *Lease) acked(rev uint64, sent time.Time) {
	if !l.sent.IsZero() {
		l.stats.LongestGap = max(l.stats.LongestGap, sent.Sub(l.sent))
	}
	l.stats.Renewals++
	l.rev, l.sent, l.deadline, l.wroteAt, l.unacked = rev, sent, sent.Add(l.ttl-l.margin), time.Now(), time.Time{}
}

// renewed tells OnRenewed.
func (l *Lease) renewed() {
	if l.opts.OnRenewed != nil {
		l.opts.OnRenewed()
	}
}

// LeaseStats are what a lease saw since OpenLease.
type LeaseStats struct {
	// Renewals counts the lease's writes the server acknowledged
	// (renewals and creations).
	Renewals uint64
	// Lost counts the times the node lost its lease.
	Lost uint64
	// LongestGap is the longest time between two acknowledged writes, each
	// counted from when it was sent: the node stops acting once that
	// reaches the TTL less the margin, and a loss counts in full.
	LongestGap time.Duration
}

// Stats reports what the lease saw since it was opened.
func (l *Lease) Stats() LeaseStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Check reports whether the node may act now: nil while it holds its lease
// with at least the margin to spare, else ErrLeaseLost.
func (l *Lease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held || !time.Now().Before(l.deadline) {
		return ErrLeaseLost
	}
	return nil
}

// renew is the lease's goroutine: it renews every TTL/5 (a renewal that
// failed is tried again after TTL/20), notices when the node may no longer
// act, and creates a new lease once the old one lapsed. It ends with
// Release or Close.
func (l *Lease) renew() {
	defer close(l.done)
	timer := time.NewTimer(l.renewEvery())
	defer timer.Stop()
	wasHeld := true
	var lostAt, logged time.Time
	for {
		select {
		case <-l.stop:
			return
		case <-timer.C:
		}
		start, next := time.Now(), l.renewEvery()
		l.mu.Lock()
		rev, held := l.rev, l.held
		l.mu.Unlock()
		if held && !l.renewOnce(rev) {
			next = l.retryEvery()
		}
		l.mu.Lock()
		held = l.held
		l.mu.Unlock()
		if wasHeld && !held {
			// The lease lapsed or was taken, and this process did not act
			// on it yet: it was stopped (SIGSTOP, a paused VM) past the TTL
			// and the first tick after it runs again finds the key gone. A
			// lease created again at once below must not hide that: by now
			// another node may own this node's sessions, so the node hears
			// it lost the lease (OnLost) before it holds the new one.
			l.lost()
			lostAt, wasHeld = time.Now(), false
		}
		if !held {
			// Lost: take the name's lease again once it lapsed.
			ctx, cancel := context.WithTimeout(context.Background(), l.ttl/2)
			_, _, err := l.create(ctx)
			cancel()
			if err != nil && !taken(err) && time.Since(logged) >= WaitEvery {
				l.log().Warn("taking the lease again failed", "node", l.self.Name, "err", err)
				logged = time.Now()
			}
		}
		now := l.Check() == nil
		switch {
		case wasHeld && !now:
			l.lost()
			lostAt = time.Now()
		case !wasHeld && now:
			l.log().Info("lease regained: this node acts again", "node", l.self.Name, "after_ms", time.Since(lostAt).Milliseconds())
			if l.opts.OnRegained != nil {
				l.opts.OnRegained()
			}
		}
		wasHeld = now
		// The period counts from the renewal's start, so a slow one does
		// not push the next one later.
		timer.Reset(max(time.Until(start.Add(next)), 0))
	}
}

// lost says the node lost its lease, and tells OnLost.
func (l *Lease) lost() {
	l.mu.Lock()
	l.stats.Lost++
	l.mu.Unlock()
	l.log().Warn("lease lost: no renewal within the TTL less its margin, or the key lapsed or was taken; this node stops appending and starting calls",
		"node", l.self.Name, "within", (l.ttl - l.margin).String())
	if l.opts.OnLost != nil {
		l.opts.OnLost()
	}
}

// attempt bounds one request of a renewal: half the time left before the
// node must stop acting, so a request left unanswered (sent to a bucket
// electing a leader, which never answers it) leaves time for another, and
// at least a renewal period.
func (l *Lease) attempt(now time.Time) time.Duration {
	l.mu.Lock()
	left := l.deadline.Sub(now)
	l.mu.Unlock()
	return max(left/2, l.renewEvery())
}

// renewOnce publishes the lease again, guarded on rev, and reports whether
// the server stored it. A refused guard means the key moved on: by a
// renewal of this process whose answer came too late (it is adopted), or
// because the lease lapsed or another process took the name. Then the node
// forgets it and tries to create a new one at once (after a leader
// election of the nodes bucket longer than the TTL every lease has lapsed,
// and the sooner each is back the fewer sessions move).
func (l *Lease) renewOnce(rev uint64) bool {
	before := time.Now()
	l.mu.Lock()
	if l.unacked.IsZero() {
		l.unacked = before
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), l.attempt(before))
	ack, err := l.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + NodesBucket + "." + l.self.Name, Data: l.value},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(l.ttl))
	cancel()
	if err == nil {
		l.mu.Lock()
		l.acked(ack.Sequence, before)
		l.mu.Unlock()
		l.renewed()
		return true
	}
	if !wrongLastSequence(err) {
		// Transient (a leader election, a slow server): try again soon;
		// Check fails on its own once the deadline passes.
		return false
	}
	switch l.adopt(rev) {
	case adopted:
		return true
	case notOurs:
		l.mu.Lock()
		l.held = false
		l.mu.Unlock()
	}
	return false
}

// Outcomes of adopt.
const (
	adopted = iota // the key's latest revision is this process's renewal
	notOurs        // the key lapsed, or another process holds it
	unknown        // the key could not be read: try again
)

// adopt reads the lease's key after a renewal guarded on rev was refused.
// When its latest revision is a later write of this incarnation (a renewal
// that timed out here and was stored after all), the lease goes on from
// it, counted from when the first renewal not yet acknowledged was sent
// (that write came no earlier).
func (l *Lease) adopt(rev uint64) int {
	ctx, cancel := context.WithTimeout(context.Background(), l.attempt(time.Now()))
	e, err := l.kv.Get(ctx, l.self.Name)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return notOurs
	}
	if err != nil {
		return unknown
	}
	var m Member
	if e.Revision() <= rev || json.Unmarshal(e.Value(), &m) != nil || m.Incarnation != l.self.Incarnation {
		return notOurs
	}
	l.mu.Lock()
	l.acked(e.Revision(), l.unacked)
	l.mu.Unlock()
	l.renewed()
	return adopted
}

// Release deletes the lease (a graceful shutdown: the fleet takes this
// node's sessions at once instead of after the TTL), stops renewing and
// closes the lease's own connection. It is safe to call more than once.
func (l *Lease) Release(ctx context.Context) error {
	l.stopRenewing()
	defer l.closeConn()
	l.mu.Lock()
	rev, held := l.rev, l.held
	l.held = false
	l.mu.Unlock()
	if !held {
		return nil
	}
	if err := l.kv.Delete(ctx, l.self.Name, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("cluster: release the lease of %s: %w", l.self.Name, err)
	}
	return nil
}

// Close stops renewing without deleting the lease (it lapses after the
// TTL), waits for the renewal goroutine and closes the lease's own
// connection. Safe to call more than once.
func (l *Lease) Close() {
	l.stopRenewing()
	l.closeConn()
}

// stopRenewing ends the renewal goroutine and waits for it.
func (l *Lease) stopRenewing() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// closeConn closes the connection Dial opened, if any.
func (l *Lease) closeConn() {
	l.closeOnce.Do(func() {
		if l.nc != nil {
			l.nc.Close()
		}
	})
}

// DropLease removes the lease of name, whoever holds it. Only for a node
// whose NATS server serves it alone (a standalone embedded server, whose
// store only one process can hold): a lease left there by an earlier process
// belongs to a process that is gone.
func DropLease(ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration, replicas int) error {
	kv, err := leaseBucket(ctx, js, ttl, replicas)
	if err != nil {
		return err
	}
	if err := kv.Purge(ctx, name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("cluster: drop the lease of %s: %w", name, err)
	}
	return nil
}

// taken reports whether err says a KV key was written first by someone
// else: ErrKeyExists from Create, a revision mismatch from Update, or the
// bare "wrong last sequence" a replicated stream answers (10164; 10071 on
// one replica) when two writers race for a key that was deleted (nats.go's
// Create retries such a key with its revision and returns the second
// refusal unwrapped).
func taken(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	return wrongLastSequence(err)
}

// wrongLastSequence reports whether err is a publish refused by its
// expected last sequence.
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
