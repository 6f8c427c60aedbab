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
// or leaves (a lease created, or one deleted or expired). Its methods are
// safe for concurrent use.
type Members struct {
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	alive map[string]Member
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
	m := &Members{w: w, cancel: cancel, done: make(chan struct{}), alive: map[string]Member{}, ready: make(chan struct{})}
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
	for e := range m.w.Updates() {
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
				ch = &Change{Member: old}
			}
		}
		m.mu.Unlock()
		if ch != nil && !initial && onChange != nil {
			onChange(*ch)
		}
	}
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
