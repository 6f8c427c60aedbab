package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Change is a change of the fleet's membership, as Members reports it.
type Change struct {
	// Member is the node that joined (Joined) or left.
	Member Member
	Joined bool
}

// MembersOption configures WatchMembers.
type MembersOption func(*Members) error

// WithLease names the watching node's own lease, whose renewals tell
// Members whether its watch is current (see Members). A node should always
// give it; without it a lease counts as lapsed on the watcher's clock alone,
// even while the watch itself stands still.
func WithLease(l *Lease) MembersOption {
	return func(m *Members) error {
		if l == nil {
			return fmt.Errorf("%w: WithLease(nil): give the node's own lease", ErrInvalidOption)
		}
		m.lease = l
		return nil
	}
}

// WithMembersLogger has Members say, through l, when its watch stood still
// and when it started it again: the moments that hold a takeover back
// (docs/operations.md, "A fleet").
func WithMembersLogger(l *slog.Logger) MembersOption {
	return func(m *Members) error {
		m.logger = l
		return nil
	}
}

// Members is the fleet as the NodesBucket shows it: every node whose lease
// is alive. It watches the bucket with one goroutine it owns (ended by
// Close) and calls onChange, from that goroutine, for every node that joins
// or leaves (a lease created, or one deleted (released), or not renewed
// within the TTL). Its methods are safe for concurrent use.
//
// A lease counts as lapsed once no renewal of it has arrived for the TTL,
// on this process's monotonic clock, whether or not the server has yet
// expired the key: the server expires keys only on the stream's leader, so
// while that leader is the very node that stopped (SIGSTOP, a partition) no
// expiry, and no delete marker, comes at all. This is safe against the
// holder: it stops acting at TTL minus a margin after it sent its last
// renewal (Lease.Check), and that renewal arrives here after it was sent.
//
// The clock counts only while the watch is current (WithLease): while it
// delivers renewals, each at most staleAfter (two renewal periods) after
// the one before (a fleet's nodes together renew several times a period,
// this node's own lease among them). A watch that stands still (this process was stopped, or the
// bucket has no leader, so nobody's renewal is stored, or the watch's
// consumer was lost with a server) says nothing about the others, and a
// node that counted them lapsed then would take live owners' sessions; so
// no lease lapses until the watch delivers renewals again and every member
// has had a grace (staleAfter) to show one too. A watch that
// has not shown a renewal the server acknowledged is started again from
// the last revision it delivered. An expiry marker is not a departure
// either: after a leader election longer than the TTL the new leader
// expires every key at once, and their nodes write them again within a
// renewal; a lease that was truly not renewed lapses on the clock. Counting
// later than the clock alone would is still safe: it only delays a
// takeover.
type Members struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	wctx   context.Context
	cancel context.CancelFunc
	done   chan struct{}
	ttl    time.Duration
	lease  *Lease
	logger *slog.Logger

	// staleAfter is how long the watch may go without delivering a
	// renewal and still count as current: two renewal periods.
	staleAfter time.Duration

	wmu sync.Mutex
	w   jetstream.KeyWatcher

	mu    sync.Mutex
	alive map[string]Member
	// seen is when each live member's latest renewal arrived.
	seen  map[string]time.Time
	ready chan struct{}
	// The watch's freshness (used with a lease): the last revision it
	// delivered, when its latest entry arrived, the revision of this
	// node's own latest entry, since when the watch is current, and its
	// last restart.
	lastRev   uint64
	heardAt   time.Time
	selfRev   uint64
	current   time.Time
	restarted time.Time
	// behindSince is when this node's lease had an acknowledged write the
	// watch had not shown (zero while the watch shows its latest);
	// polledSelf is the revision of this node's own entry that the last
	// direct read showed.
	behindSince time.Time
	polledSelf  uint64
}

// WatchMembers starts watching the fleet's leases. It returns once the
// current members are known.
func WatchMembers(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int, onChange func(Change), opts ...MembersOption) (*Members, error) {
	m := &Members{done: make(chan struct{}), ttl: ttl, alive: map[string]Member{}, seen: map[string]time.Time{}, ready: make(chan struct{})}
	for _, o := range opts {
		if err := o(m); err != nil {
			return nil, err
		}
	}
	if m.lease != nil {
		m.staleAfter = max(2*m.lease.renewEvery(), time.Second)
	}
	kv, err := leaseBucket(ctx, js, ttl, replicas)
	if err != nil {
		return nil, err
	}
	m.js, m.kv = js, kv
	m.wctx, m.cancel = context.WithCancel(context.Background())
	w, err := kv.WatchAll(m.wctx)
	if err != nil {
		m.cancel()
		return nil, fmt.Errorf("cluster: watch %s: %w", NodesBucket, err)
	}
	m.w = w
	go m.run(onChange)
	select {
	case <-m.ready:
		return m, nil
	case <-ctx.Done():
		m.Close()
		return nil, fmt.Errorf("cluster: watch %s: %w", NodesBucket, ctx.Err())
	}
}

func (m *Members) run(onChange func(Change)) {
	defer close(m.done)
	initial := true
	tick := time.NewTicker(max(min(m.ttl, MinLeaseTTL)/10, 100*time.Millisecond))
	defer tick.Stop()
	m.wmu.Lock()
	updates := m.w.Updates()
	m.wmu.Unlock()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-tick.C:
			if !initial {
				// A watch that stands still is read past first (a direct
				// get, which needs no consumer), then started again.
				for _, e := range m.pollIfBehind(time.Now()) {
					for _, ch := range m.apply(e, time.Now(), false, true) {
						if onChange != nil {
							onChange(ch)
						}
					}
				}
				if u := m.restartIfBehind(time.Now()); u != nil {
					updates = u
				}
				for _, ch := range m.lapsed(time.Now()) {
					if onChange != nil {
						onChange(ch)
					}
				}
			}
			continue
		case u, ok := <-updates:
			if !ok {
				if m.wctx.Err() != nil || m.lease == nil {
					return
				}
				// The watch ended under us (its subscription closed): the
				// next tick starts it again.
				updates = nil
				continue
			}
			e = u
		}
		if e == nil { // the current values are all in
			if initial {
				initial = false
				close(m.ready)
			}
			continue
		}
		for _, ch := range m.apply(e, time.Now(), initial, false) {
			if onChange != nil {
				onChange(ch)
			}
		}
	}
}

// apply takes one entry of the watch, arrived at now, and returns the
// changes it makes (none while the initial values come in).
func (m *Members) apply(e jetstream.KeyValueEntry, now time.Time, initial, polled bool) []Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev := e.Revision(); rev != 0 {
		if rev <= m.lastRev {
			return nil // delivered before this watch was started again
		}
		m.lastRev = rev
	}
	name := e.Key()
	if m.lease != nil {
		if m.heardAt.IsZero() || now.Sub(m.heardAt) > m.staleAfter {
			// Current again after standing still: from now on the clock
			// counts, after a grace for every member.
			m.current = now
			if !m.heardAt.IsZero() {
				m.log("members watch current again", "without_renewal", now.Sub(m.heardAt).Round(time.Millisecond), "revision", e.Revision())
			}
		}
		m.heardAt = now
		if name == m.lease.Self().Name && e.Operation() == jetstream.KeyValuePut {
			// What the watch showed decides when it is started again; what
			// a direct read showed, only whether to read again.
			if polled {
				m.polledSelf = e.Revision()
			} else {
				m.selfRev = e.Revision()
			}
		}
	}
	var out []Change
	switch e.Operation() {
	case jetstream.KeyValuePut:
		var mem Member
		if json.Unmarshal(e.Value(), &mem) != nil || mem.Name != name {
			return nil
		}
		old, was := m.alive[name]
		m.alive[name] = mem
		// A lease read at start may be older than now: counting it from
		// now only delays its lapse, by at most the TTL.
		m.seen[name] = now
		if !was || old.Incarnation != mem.Incarnation {
			if was {
				// The same name in a new process: the old one left.
				out = append(out, Change{Member: old})
			}
			out = append(out, Change{Member: mem, Joined: true})
		}
	case jetstream.KeyValueDelete: // released: the node handed its sessions over
		if old, was := m.alive[name]; was {
			delete(m.alive, name)
			delete(m.seen, name)
			out = append(out, Change{Member: old})
		}
	default:
		// Purged or expired (a marker): not a departure by itself, since a
		// leader election expires live leases too; a lease not renewed
		// lapses on the clock (lapsed).
	}
	if initial {
		return nil
	}
	return out
}

// lapsed removes the members whose latest renewal arrived more than the
// TTL before now, while the watch is current and past its grace, and
// returns them as changes.
func (m *Members) lapsed(now time.Time) []Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	self := ""
	if m.lease != nil {
		if m.heardAt.IsZero() || now.Sub(m.heardAt) > m.staleAfter || now.Sub(m.current) < m.staleAfter {
			return nil // the watch stands still, or has only just moved again
		}
		self = m.lease.Self().Name
	}
	var out []Change
	for name, at := range m.seen {
		if name != self && now.Sub(at) > m.alive[name].ttl(m.ttl) {
			out = append(out, Change{Member: m.alive[name]})
			delete(m.alive, name)
			delete(m.seen, name)
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Member.Name, b.Member.Name) })
	return out
}

// restartIfBehind starts the watch again, from the revision after the last
// it delivered, when the server acknowledged a write of this node's lease
// that the watch has not shown within half of staleAfter (its consumer
// stands still: it was on a server that is gone, or this process was
// stopped past its heartbeats). It returns the new watch's updates, or nil
// when it did not start one. At most one try per staleAfter.
func (m *Members) restartIfBehind(now time.Time) <-chan jetstream.KeyValueEntry {
	if m.lease == nil {
		return nil
	}
	m.mu.Lock()
	// Timed from the first write the watch has not shown, not from the
	// latest: the lease is renewed every TTL/5, more often than the
	// threshold, so timed from the latest a watch that stood still would
	// always lag a write only just acknowledged, and never start again.
	rev := m.noteBehindLocked(now)
	behind := !m.behindSince.IsZero() && now.Sub(m.behindSince) > m.staleAfter/2 && now.Sub(m.restarted) > m.staleAfter
	from, seen := m.lastRev+1, m.selfRev
	if behind {
		m.restarted = now
	}
	m.mu.Unlock()
	if !behind || noWatchRestart {
		return nil
	}
	w, err := m.kv.WatchAll(m.wctx, jetstream.ResumeFromRevision(from))
	if err != nil {
		m.log("members watch behind this node's own renewal: starting it again failed", "renewal", rev, "seen", seen, "from", from, "err", err)
		return nil // the bucket may have no leader yet: the next try
	}
	m.log("members watch behind this node's own renewal: started again", "renewal", rev, "from", from)
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if m.wctx.Err() != nil {
		_ = w.Stop()
		return nil
	}
	_ = m.w.Stop()
	m.w = w
	return w.Updates()
}

func (m *Members) log(msg string, args ...any) {
	if m.logger != nil {
		m.logger.Info(msg, args...)
	}
}

// noWatchRestart, set by tests only, keeps restartIfBehind from starting a
// watch again, as when no consumer can be made (no meta leader).
var noWatchRestart bool

// noteBehindLocked sets or clears behindSince from this node's latest
// acknowledged lease write, and returns that write's revision. m.mu is held.
func (m *Members) noteBehindLocked(now time.Time) uint64 {
	rev, _ := m.lease.lastWrite()
	switch {
	case rev <= m.selfRev:
		m.behindSince = time.Time{}
	case m.behindSince.IsZero():
		m.behindSince = now
	}
	return rev
}

// pollIfBehind reads every key's latest entry from the bucket while the
// watch lags this node's own acknowledged renewal by over half of
// staleAfter (once for each renewal it lags, while the watch is also being
// started again), and returns the entries not delivered yet, oldest
// first. It is a batched direct get: any replica answers it (this node's
// own server first), with no consumer and so without the JetStream meta
// leader, which starting the watch again needs. That restart is slow just
// when it matters: after a node is killed its server may have held the
// watch's consumer and led the meta group (a new consumer waits for the
// meta election, 4-9 s), and a new consumer can even be placed on a
// stopped server that still counts as online. An entry the poll returns is
// as good as one the watch would have delivered: it was stored, and a
// replica that lags shows this node's own latest renewal as missing too, so
// the watch stays behind and the poll runs again.
func (m *Members) pollIfBehind(now time.Time) []jetstream.KeyValueEntry {
	if m.lease == nil {
		return nil
	}
	m.mu.Lock()
	rev := m.noteBehindLocked(now)
	// Once per renewal of this node's own lease while the watch lags.
	behind := !m.behindSince.IsZero() && now.Sub(m.behindSince) > m.staleAfter/2 && rev > m.polledSelf
	last := m.lastRev
	m.mu.Unlock()
	if !behind {
		return nil
	}
	ctx, cancel := context.WithTimeout(m.wctx, m.staleAfter)
	defer cancel()
	es, err := lastEntries(ctx, m.js, NodesBucket)
	if err != nil {
		return nil // the next tick tries again
	}
	es = slices.DeleteFunc(es, func(e jetstream.KeyValueEntry) bool { return e.Revision() <= last })
	slices.SortFunc(es, func(a, b jetstream.KeyValueEntry) int { return cmp.Compare(a.Revision(), b.Revision()) })
	if len(es) > 0 {
		m.log("members watch behind this node's own renewal: read newer entries directly", "entries", len(es), "bucket", NodesBucket, "revision", es[len(es)-1].Revision())
	}
	return es
}

// Alive returns a node's member record while its lease is alive.
func (m *Members) Alive(name string) (Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.alive[name]
	return mem, ok
}

// List returns the live members, by name.
func (m *Members) List() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.alive))
	for _, mem := range m.alive {
		out = append(out, mem)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Names returns the live members' names, sorted.
func (m *Members) Names() []string {
	var out []string
	for _, mem := range m.List() {
		out = append(out, mem.Name)
	}
	return out
}

// Close stops watching and waits for the goroutine. Safe to call more than
// once.
func (m *Members) Close() {
	m.cancel()
	m.wmu.Lock()
	_ = m.w.Stop()
	m.wmu.Unlock()
	<-m.done
}
