package natslog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
)

// DefaultIndexBucket is the KV bucket of the session index.
const DefaultIndexBucket = "cs_sessions"

// ErrSessionExists is returned by Index.Create for a session already indexed.
var ErrSessionExists = errors.New("natslog: session already exists")

// Index is the session index: one KV entry per session, keyed
// "<tenant>.<session>", holding the caller's info (workspace, agent, owner).
// It is safe for concurrent use.
type Index struct {
	kv  jetstream.KeyValue
	log *Log // its connection and API prefix ask the bucket's leader
}

// IndexEntry is one indexed session.
type IndexEntry struct {
	Tenant, Session string
	Info            []byte
	// Revision is the entry's revision in the bucket (DeleteAt), Created
	// when it was written.
	Revision uint64
	Created  time.Time
}

// Index creates (or updates) the KV bucket DefaultIndexBucket, file-backed
// with the Log's replica count, and returns the index on it.
func (l *Log) Index(ctx context.Context) (*Index, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	kv, err := ensureKV(ctx, l.js, jetstream.KeyValueConfig{
		Bucket:      DefaultIndexBucket,
		Description: "callsheet sessions",
		Storage:     jetstream.FileStorage,
		Replicas:    l.cfg.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: session index %s: %w", DefaultIndexBucket, err)
	}
	return &Index{kv: kv, log: l}, nil
}

// Create indexes a new session. It fails with ErrSessionExists when the
// session is already indexed (by any node), and with ErrInvalidID for ids
// that are not subject tokens.
func (x *Index) Create(ctx context.Context, tenant, session string, info []byte) error {
	if err := ValidateIDs(tenant, session); err != nil {
		return err
	}
	if _, err := x.kv.Create(ctx, sessionKey(tenant, session), info); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %s/%s", ErrSessionExists, tenant, session)
		}
		return fmt.Errorf("index session %s/%s: %w", tenant, session, err)
	}
	return nil
}

// Get returns a session's info, or an error wrapping events.ErrNotFound.
// A key a direct get does not find is asked of the bucket's leader too: the
// replica that answered may not have the session another node just indexed.
func (x *Index) Get(ctx context.Context, tenant, session string) ([]byte, error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return nil, err
	}
	key := sessionKey(tenant, session)
	e, err := x.kv.Get(ctx, key)
	switch {
	case err == nil:
		return e.Value(), nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, fmt.Errorf("get session %s/%s: %w", tenant, session, err)
	}
	ctx, cancel := x.log.withTimeout(ctx)
	defer cancel()
	m, found, err := leaderGet(ctx, x.log.nc, x.log.api, "KV_"+DefaultIndexBucket, lastBySubject{"$KV." + DefaultIndexBucket + "." + key})
	switch {
	case err != nil:
		return nil, fmt.Errorf("get session %s/%s from the index's leader: %w", tenant, session, err)
	case !found || kvRemoved(m.Header):
		return nil, fmt.Errorf("%w: %s/%s", events.ErrNotFound, tenant, session)
	}
	return m.Data, nil
}

// kvRemoved reports whether a KV message's headers (as sent on the wire)
// mark its key deleted or purged.
func kvRemoved(hdr []byte) bool {
	if len(hdr) == 0 {
		return false
	}
	h, err := nats.DecodeHeadersMsg(hdr)
	if err != nil {
		return false
	}
	op := h.Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}

// List returns every indexed session, in key order.
func (x *Index) List(ctx context.Context) ([]IndexEntry, error) {
	w, err := x.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	return x.list(ctx, w, err)
}

// ListTenant returns tenant's indexed sessions, in key order.
func (x *Index) ListTenant(ctx context.Context, tenant string) ([]IndexEntry, error) {
	if !events.ValidID(tenant) {
		return nil, fmt.Errorf("%w: tenant %q", ErrInvalidID, tenant)
	}
	w, err := x.kv.WatchFiltered(ctx, []string{tenant + ".*"}, jetstream.IgnoreDeletes())
	return x.list(ctx, w, err)
}

func (x *Index) list(ctx context.Context, w jetstream.KeyWatcher, err error) ([]IndexEntry, error) {
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []IndexEntry
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list sessions: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("list sessions: watcher closed")
			}
			if e == nil { // initial values done
				return sortEntries(out), nil
			}
			tenant, session, ok := strings.Cut(e.Key(), ".")
			if !ok {
				continue // not ours
			}
			out = append(out, IndexEntry{Tenant: tenant, Session: session, Info: e.Value(), Revision: e.Revision(), Created: e.Created()})
		}
	}
}

func sortEntries(es []IndexEntry) []IndexEntry {
	// WatchAll delivers in stream order; sort so List is stable.
	slices.SortFunc(es, func(a, b IndexEntry) int {
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return strings.Compare(a.Session, b.Session)
	})
	return es
}
