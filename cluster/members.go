package cluster

import (
	"context"
	"encoding/json"
	"fmt"
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

// Members is the fleet as the NodesBucket shows it: every node whose lease
// is alive. It watches the bucket with one goroutine it owns (ended by
// Close) and calls onChange, from that goroutine, for every node that joins
// or leaves (a lease created, or one deleted, expired, or not renewed
// within the TTL). Its methods are safe for concurrent use.
//
// A lease counts as lapsed once no renewal of it has arrived for the TTL,
// on this process's monotonic clock, whether or not the server has yet
// expired the key: the server expires keys only on the stream's leader, so
// while that leader is the very node that stopped (SIGSTOP, a partition) no
// expiry, and no delete marker, comes at all. This is safe against the
// holder: it stops acting at TTL minus a margin after it sent its last
// renewal (Lease.Check), and that renewal arrives here after it was sent.
type Members struct {
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
	done   chan struct{}
	ttl    time.Duration

	mu    sync.Mutex
	alive map[string]Member
	// seen is when each live member's latest renewal arrived.
	seen  map[string]time.Time
	ready chan struct{}
}

// WatchMembers starts watching the fleet's leases. It returns once the
// current members are known.
func WatchMembers(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int, onChange func(Change)) (*Members, error) {
	kv, err := leaseBucket(ctx, js, ttl, replicas)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: watch %s: %w", NodesBucket, err)
	}
	m := &Members{w: w, cancel: cancel, done: make(chan struct{}), ttl: ttl, alive: map[string]Member{}, seen: map[string]time.Time{}, ready: make(chan struct{})}
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
	updates := m.w.Updates()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-tick.C:
			if !initial {
				for _, ch := range m.lapsed(time.Now()) {
					if onChange != nil {
						onChange(ch)
					}
				}
			}
			continue
		case u, ok := <-updates:
			if !ok {
				return
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
		name := e.Key()
		var ch *Change
		m.mu.Lock()
		switch e.Operation() {
		case jetstream.KeyValuePut:
			var mem Member
			if json.Unmarshal(e.Value(), &mem) != nil || mem.Name != name {
				m.mu.Unlock()
				continue
			}
			old, was := m.alive[name]
			m.alive[name] = mem
			// A lease read at start may be older than now: counting it from
			// now only delays its lapse, by at most the TTL.
			m.seen[name] = time.Now()
			if !was || old.Incarnation != mem.Incarnation {
				if was && !initial {
					// The same name in a new process: the old one left.
					left := Change{Member: old}
					m.mu.Unlock()
					if onChange != nil {
						onChange(left)
					}
					m.mu.Lock()
				}
				ch = &Change{Member: mem, Joined: true}
			}
		default: // deleted (released) or expired (lapsed)
			if old, was := m.alive[name]; was {
				delete(m.alive, name)
				delete(m.seen, name)
				ch = &Change{Member: old}
			}
		}
		m.mu.Unlock()
		if ch != nil && !initial && onChange != nil {
			onChange(*ch)
		}
	}
}

// lapsed removes the members whose latest renewal arrived more than the
// TTL before now, and returns them as changes.
func (m *Members) lapsed(now time.Time) []Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Change
	for name, at := range m.seen {
		if now.Sub(at) > m.alive[name].ttl(m.ttl) {
			out = append(out, Change{Member: m.alive[name]})
			delete(m.alive, name)
			delete(m.seen, name)
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Member.Name, b.Member.Name) })
	return out
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
	_ = m.w.Stop()
	<-m.done
}
