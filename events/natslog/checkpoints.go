package natslog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
)

// The checkpoint store (docs/audit.md, "Checkpoints and the witness"): a KV
// bucket that keeps, per session, the latest signed head its node made
// (events.Checkpoint), outside the session's own subjects, keyed
// TENANT.SESSION so a tenant's checkpoints are the keys TENANT.*. It only
// moves forward: a checkpoint never replaces one of a later head.

// DefaultCheckpointBucket is the KV bucket of the checkpoints.
const DefaultCheckpointBucket = "cs_checkpoints"

// ErrNoCheckpoints is returned by OpenCheckpoints when the store has no
// checkpoint bucket (a node makes it at start).
var ErrNoCheckpoints = errors.New("natslog: no checkpoint store")

// checkpointRetries bounds Put's attempts when another writer raced it.
const checkpointRetries = 4

// Checkpoints is the checkpoint store. It is safe for concurrent use.
type Checkpoints struct {
	kv jetstream.KeyValue
}

// Checkpoints creates (or updates) the KV bucket DefaultCheckpointBucket,
// file-backed with the Log's replica count, one value per key, and returns
// the store on it.
func (l *Log) Checkpoints(ctx context.Context) (*Checkpoints, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	kv, err := ensureKV(ctx, l.js, jetstream.KeyValueConfig{
		Bucket:      DefaultCheckpointBucket,
		Description: "callsheet session checkpoints: signed heads kept outside the sessions' logs",
		Storage:     jetstream.FileStorage,
		Replicas:    l.cfg.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: checkpoint store %s: %w", DefaultCheckpointBucket, err)
	}
	return &Checkpoints{kv: kv}, nil
}

// OpenCheckpoints opens an existing checkpoint store without creating or
// changing anything (for readers such as cmd/callsheet-replay). It returns
// ErrNoCheckpoints when there is none.
func OpenCheckpoints(ctx context.Context, js jetstream.JetStream) (*Checkpoints, error) {
	kv, err := js.KeyValue(ctx, DefaultCheckpointBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: the store has no bucket %s (a node makes it at start)", ErrNoCheckpoints, DefaultCheckpointBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("natslog: checkpoint store %s: %w", DefaultCheckpointBucket, err)
	}
	return &Checkpoints{kv: kv}, nil
}

// Put stores cp as its session's latest checkpoint, unless the store holds
// one of the same or a later head that trusted accepts (the writer's check
// of its signature: a value someone else forged with a later seq is
// replaced, not obeyed). rev is the revision the caller last stored or read
// for the session (0: unknown); Put returns the revision the session's
// value has now. A write raced by another (a node that owned the session
// before) is retried against what the store holds. It fails with
// ErrInvalidID for ids that are not subject tokens.
func (c *Checkpoints) Put(ctx context.Context, cp events.Checkpoint, rev uint64, trusted func(events.Checkpoint) bool) (uint64, error) {
	if err := ValidateIDs(cp.Tenant, cp.Session); err != nil {
		return rev, err
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return rev, err
	}
	key := sessionKey(cp.Tenant, cp.Session)
	for range checkpointRetries {
		var n uint64
		if rev == 0 {
			n, err = c.kv.Create(ctx, key, b)
		} else {
			n, err = c.kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return rev, fmt.Errorf("natslog: checkpoint of %s: %w", key, err)
		}
		cur, curRev, ok, err := c.get(ctx, key)
		if err != nil && curRev == 0 {
			return rev, err
		}
		if ok && cur.Seq >= cp.Seq && trusted(cur) {
			return curRev, nil
		}
		rev = curRev
	}
	return rev, fmt.Errorf("natslog: checkpoint of %s: raced %d times", key, checkpointRetries)
}

// Get returns the session's latest checkpoint; ok is false when it has
// none. A value that is not a checkpoint is an error that says so.
func (c *Checkpoints) Get(ctx context.Context, tenant, session string) (cp events.Checkpoint, ok bool, err error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return events.Checkpoint{}, false, err
	}
	cp, _, ok, err = c.get(ctx, sessionKey(tenant, session))
	return cp, ok, err
}

func (c *Checkpoints) get(ctx context.Context, key string) (events.Checkpoint, uint64, bool, error) {
	e, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return events.Checkpoint{}, 0, false, nil
	}
	if err != nil {
		return events.Checkpoint{}, 0, false, fmt.Errorf("natslog: checkpoint of %s: %w", key, err)
	}
	cp, err := events.ParseCheckpoint(e.Value())
	if err != nil {
		return events.Checkpoint{}, e.Revision(), false, fmt.Errorf("natslog: checkpoint of %s (revision %d): %w", key, e.Revision(), err)
	}
	return cp, e.Revision(), true, nil
}

// Watch delivers the latest checkpoint of each of tenant's sessions (of
// session alone, when not ""), then every new one, on the returned channel
// until ctx ends, when the channel is closed. A value that is not a
// checkpoint is skipped. With follow false the channel is closed once the
// latest ones are delivered. The goroutine it starts ends with ctx (or
// then); Watch is safe for concurrent use.
func (c *Checkpoints) Watch(ctx context.Context, tenant, session string, follow bool) (<-chan events.Checkpoint, error) {
	filter := tenant + ".*"
	if session != "" {
		if err := ValidateIDs(tenant, session); err != nil {
			return nil, err
		}
		filter = sessionKey(tenant, session)
	} else if err := ValidateIDs(tenant, "x"); err != nil {
		return nil, err
	}
	opts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
	w, err := c.kv.Watch(ctx, filter, opts...)
	if err != nil {
		return nil, fmt.Errorf("natslog: watch checkpoints of %s: %w", filter, err)
	}
	out := make(chan events.Checkpoint, 64)
	var once sync.Once
	stop := func() { once.Do(func() { _ = w.Stop() }) }
	go func() {
		defer close(out)
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil { // the latest values are all delivered
					if !follow {
						return
					}
					continue
				}
				cp, err := events.ParseCheckpoint(e.Value())
				if err != nil {
					continue
				}
				select {
				case out <- cp:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
