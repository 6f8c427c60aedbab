package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
)

// DefaultToolsBucket is the KV bucket of harness tool registrations: key
// TENANT.NAME, value the Spec as JSON.
const DefaultToolsBucket = "cs_harness_tools"

// ErrNotFound: no registration of that name for the tenant.
var ErrNotFound = errors.New("harness: no such tool")

// ErrLimit: the tenant has MaxToolsPerTenant tools already.
var ErrLimit = errors.New("harness: limit reached")

// Apply receives the whole set of one tenant's registrations whenever it
// changes (an empty set when the last is deleted). It is called from one
// goroutine at a time, the Store's watcher, in the order of changes.
type Apply func(tenant string, specs map[string]Spec)

// Store keeps harness tool registrations durable in a KV bucket that every
// node watches: a registration made on any node reaches every node's
// registry, and every restart reads them all back before it serves. It is
// safe for concurrent use; Close stops its watcher.
type Store struct {
	kv    jetstream.KeyValue
	apply Apply
	log   *slog.Logger

	mu      sync.Mutex
	specs   map[string]map[string]Spec // tenant → name → spec, as applied
	applied uint64                     // the last revision applied
	changed chan struct{}              // closed and replaced at each applied revision

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// OpenStore opens (creating it if missing) the registrations bucket of js
// with replicas, applies every registration in it, then follows changes in
// a goroutine it owns until Close.
func OpenStore(ctx context.Context, js jetstream.JetStream, replicas int, apply Apply, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kv, err := cluster.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      DefaultToolsBucket,
		Description: "callsheet harness tool registrations",
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		History:     1,
	})
	if err != nil {
		return nil, fmt.Errorf("harness: registrations bucket: %w", err)
	}
	s := &Store{kv: kv, apply: apply, log: log, specs: map[string]map[string]Spec{}, changed: make(chan struct{})}
	wctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("harness: watching registrations: %w", err)
	}
	// The initial values, up to the nil marker, are applied before OpenStore
	// returns: a node serves no turn before it knows every harness tool.
	for upd := range w.Updates() {
		if upd == nil {
			break
		}
		s.take(upd)
	}
	if ctx.Err() != nil {
		cancel()
		_ = w.Stop()
		return nil, ctx.Err()
	}
	s.wg.Add(1)
	go func() { // owned by the Store: ends with Close
		defer s.wg.Done()
		defer w.Stop()
		for {
			select {
			case upd, ok := <-w.Updates():
				if !ok {
					return
				}
				if upd != nil {
					s.take(upd)
				}
			case <-wctx.Done():
				return
			}
		}
	}()
	return s, nil
}

// take applies one change of the bucket.
func (s *Store) take(e jetstream.KeyValueEntry) {
	tenant, name, ok := strings.Cut(e.Key(), ".")
	s.mu.Lock()
	defer func() {
		s.applied = max(s.applied, e.Revision())
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}()
	if !ok {
		return
	}
	set := s.specs[tenant]
	if set == nil {
		set = map[string]Spec{}
		s.specs[tenant] = set
	}
	switch e.Operation() {
	case jetstream.KeyValuePut:
		var sp Spec
		if err := json.Unmarshal(e.Value(), &sp); err != nil {
			s.log.Error("undecodable registration ignored", "key", e.Key(), "err", err)
			return
		}
		set[name] = sp
	default: // delete or purge
		delete(set, name)
	}
	cp := make(map[string]Spec, len(set))
	for k, v := range set {
		cp[k] = v
	}
	if len(set) == 0 {
		delete(s.specs, tenant)
	}
	s.apply(tenant, cp)
}

// waitApplied waits until revision rev is applied here (read your writes:
// the node that answered a PUT plans with the tool at once), at most 10 s.
func (s *Store) waitApplied(ctx context.Context, rev uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		s.mu.Lock()
		done, ch := s.applied >= rev, s.changed
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("harness: the registration is stored but this node has not seen it yet: %w", ctx.Err())
		}
	}
}

// Put stores tenant's registration of name (checked by the caller) and
// waits until this node applied it. ErrLimit when the tenant already has
// MaxToolsPerTenant other tools.
func (s *Store) Put(ctx context.Context, tenant, name string, sp Spec) error {
	s.mu.Lock()
	_, exists := s.specs[tenant][name]
	n := len(s.specs[tenant])
	s.mu.Unlock()
	if !exists && n >= MaxToolsPerTenant {
		return fmt.Errorf("%w: tenant %q has %d harness tools, the most one tenant may register; delete one first (DELETE /v1/tools/{name})", ErrLimit, tenant, n)
	}
	b, err := json.Marshal(sp)
	if err != nil {
		return err
	}
	rev, err := s.kv.Put(ctx, tenant+"."+name, b)
	if err != nil {
		return fmt.Errorf("harness: storing the registration: %w", err)
	}
	return s.waitApplied(ctx, rev)
}

// Delete removes tenant's registration of name and waits until this node
// applied it. ErrNotFound when there is none.
func (s *Store) Delete(ctx context.Context, tenant, name string) error {
	if _, ok := s.Get(tenant, name); !ok {
		return fmt.Errorf("%w: tenant %q has no harness tool %q", ErrNotFound, tenant, name)
	}
	if err := s.kv.Delete(ctx, tenant+"."+name); err != nil {
		return fmt.Errorf("harness: deleting the registration: %w", err)
	}
	// The delete's revision is at most the bucket's last sequence now;
	// wait for this node's watcher to reach it.
	st, err := s.kv.Status(ctx)
	if err != nil {
		return nil // deleted; this node sees it shortly
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return nil
	}
	return s.waitApplied(ctx, bs.StreamInfo().State.LastSeq)
}

// Get returns tenant's registration of name as applied here.
func (s *Store) Get(tenant, name string) (Spec, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, ok := s.specs[tenant][name]
	return sp, ok
}

// Close stops following changes.
func (s *Store) Close() {
	s.cancel()
	s.wg.Wait()
}
