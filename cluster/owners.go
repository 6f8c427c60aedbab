package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// OwnersBucket is the KV bucket of the session owners: key
// "<tenant>.<session>", value an Ownership.
const OwnersBucket = "cs_owners"

// Ownership is who owns a session, as the owners index has it. The log is
// the truth (OwnershipTaken, docs/spec.md §7); the index is how the fleet
// finds a lost node's sessions without reading every log, and how a node
// routes a call without reading the session's log. It may lag the log by
// one change of owner; a node that acts on it stale is corrected by the
// log's guard.
type Ownership struct {
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
	// Released: the owner handed the session over; any live node may take it.
	Released bool `json:"released,omitempty"`
	// WorkspaceNode keeps the session's workspace ("" when shared).
	WorkspaceNode string `json:"workspace_node,omitempty"`
}

// Owners is the owners index: a KV bucket mirrored in memory by one watch
// goroutine it owns (ended by Close). Its methods are safe for concurrent
// use.
type Owners struct {
	kv     jetstream.KeyValue
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	m  map[string]Ownership
}

// SessionKey names a session in the owners index.
type SessionKey struct{ Tenant, Session string }

// WatchOwners opens the owners index and returns once its current content
// is mirrored. onChange, if not nil, is called from the watch goroutine for
// every change after that.
func WatchOwners(ctx context.Context, js jetstream.JetStream, replicas int, onChange func(SessionKey, Ownership)) (*Owners, error) {
	kv, err := ensureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      OwnersBucket,
		Description: "callsheet session owners (a hint; the log is the truth)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: owners bucket %s: %w", OwnersBucket, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: watch %s: %w", OwnersBucket, err)
	}
	o := &Owners{kv: kv, w: w, cancel: cancel, done: make(chan struct{}), m: map[string]Ownership{}}
	ready := make(chan struct{})
	go o.run(ready, onChange)
	select {
	case <-ready:
		return o, nil
	case <-ctx.Done():
		o.Close()
		return nil, fmt.Errorf("cluster: watch %s: %w", OwnersBucket, ctx.Err())
	}
}

func (o *Owners) run(ready chan struct{}, onChange func(SessionKey, Ownership)) {
	defer close(o.done)
	initial := true
	for e := range o.w.Updates() {
		if e == nil {
			if initial {
				initial = false
				close(ready)
			}
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			// A deleted session's entry (Delete).
			o.mu.Lock()
			delete(o.m, e.Key())
			o.mu.Unlock()
			continue
		}
		var own Ownership
		if json.Unmarshal(e.Value(), &own) != nil {
			continue
		}
		tenant, session, ok := strings.Cut(e.Key(), ".")
		if !ok {
			continue
		}
		o.mu.Lock()
		o.m[e.Key()] = own
		o.mu.Unlock()
		if !initial && onChange != nil {
			onChange(SessionKey{tenant, session}, own)
		}
	}
}

// Get returns a session's owner as the index has it.
func (o *Owners) Get(tenant, session string) (Ownership, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	own, ok := o.m[tenant+"."+session]
	return own, ok
}

// OwnedBy lists the sessions the index says node owns (released ones
// included when released is true).
func (o *Owners) OwnedBy(node string, released bool) []SessionKey {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []SessionKey
	for k, own := range o.m {
		if own.Node != node || (own.Released && !released) {
			continue
		}
		t, s, _ := strings.Cut(k, ".")
		out = append(out, SessionKey{t, s})
	}
	return out
}

// Released lists the sessions released and not yet taken again.
func (o *Owners) Released() []SessionKey {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []SessionKey
	for k, own := range o.m {
		if own.Released {
			t, s, _ := strings.Cut(k, ".")
			out = append(out, SessionKey{t, s})
		}
	}
	return out
}

// CountsFor returns how many of tenant's sessions the index gives each
// node (released ones not counted).
func (o *Owners) CountsFor(tenant string) map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, own := range o.m {
		if t, _, _ := strings.Cut(k, "."); t == tenant && !own.Released {
			out[own.Node]++
		}
	}
	return out
}

// Set records own for a session, unless the index already holds a later
// epoch (or the same epoch released, when own is not released): updates are
// compare-and-set on the key's revision, so a late write of an earlier
// owner never overwrites a later one.
func (o *Owners) Set(ctx context.Context, tenant, session string, own Ownership) error {
	key := tenant + "." + session
	value, _ := json.Marshal(own)
	for range 5 {
		e, err := o.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err = o.kv.Create(ctx, key, value); err == nil || !taken(err) {
				return o.wrap(key, err)
			}
			continue
		case err != nil:
			return o.wrap(key, err)
		}
		var cur Ownership
		if json.Unmarshal(e.Value(), &cur) == nil && (cur.Epoch > own.Epoch || (cur.Epoch == own.Epoch && cur.Released && !own.Released)) {
			return nil // the index already knows better
		}
		if _, err = o.kv.Update(ctx, key, value, e.Revision()); err == nil || !taken(err) {
			return o.wrap(key, err)
		}
	}
	return fmt.Errorf("cluster: owners index %s: too many concurrent updates", key)
}

// Delete removes a session's entry (the session was deleted): every
// node's mirror drops it as the watch delivers the purge. An entry that is
// not there is not an error.
func (o *Owners) Delete(ctx context.Context, tenant, session string) error {
	key := tenant + "." + session
	if err := o.kv.Purge(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return o.wrap(key, err)
	}
	o.mu.Lock()
	delete(o.m, key)
	o.mu.Unlock()
	return nil
}

func (o *Owners) wrap(key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("cluster: owners index %s: %w", key, err)
}

// Close stops watching and waits for the goroutine. Safe to call more than
// once.
func (o *Owners) Close() {
	o.cancel()
	_ = o.w.Stop()
	<-o.done
}
