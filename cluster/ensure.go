package cluster

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// The ensure functions create a stream or bucket, or update it when it
// differs from what is asked, and leave it alone when it already is: every
// node of a fleet opens the same ones at start, and concurrent identical
// updates of a replicated stream only queue behind each other in the
// cluster's meta layer (observed: creates stalled beyond 30 s when three
// nodes started at once).

// ensureKV returns the KV bucket cfg names, created or updated to cfg.
func ensureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		if st, err := kv.Status(ctx); err == nil {
			if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo().Config.Replicas == max(cfg.Replicas, 1) {
				return kv, nil
			}
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	return js.CreateOrUpdateKeyValue(ctx, cfg)
}

// EnsureKV returns the KV bucket cfg names, created or updated to cfg, or
// left alone when it already has cfg's replica count (see ensureKV): for
// the buckets of other packages every node opens at start (harness).
func EnsureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return ensureKV(ctx, js, cfg)
}
