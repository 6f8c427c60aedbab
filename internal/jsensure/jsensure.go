// Package jsensure opens JetStream streams and buckets the way every node
// of a fleet must: it creates one, or updates it when it differs from what
// is asked, and leaves it alone when it already is. Every node opens the same
// ones at start, and concurrent identical updates of a replicated stream only
// queue behind each other in the cluster's meta layer (observed: creates
// stalled beyond 30 s when three nodes started at once; docs/operations.md,
// "A fleet"). The event log (events/natslog), the fleet (cluster) and the
// harness all open theirs here.
package jsensure

import (
	"context"
	"errors"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream returns the stream cfg names, created or updated to cfg.
func Stream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		have := s.CachedInfo().Config
		if slices.Equal(have.Subjects, cfg.Subjects) && have.Replicas == max(cfg.Replicas, 1) && have.Duplicates == cfg.Duplicates &&
			have.Storage == cfg.Storage && have.Retention == cfg.Retention && have.AllowDirect == cfg.AllowDirect &&
			have.AllowAtomicPublish == cfg.AllowAtomicPublish && have.Description == cfg.Description {
			return s, nil
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	return js.CreateOrUpdateStream(ctx, cfg)
}

// KV returns the KV bucket cfg names, created or updated to cfg.
func KV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
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

// Objects returns the object store cfg names, created or updated to
// cfg.
func Objects(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, cfg.Bucket)
	if err == nil {
		if st, err := obs.Status(ctx); err == nil && st.Replicas() == max(cfg.Replicas, 1) {
			return obs, nil
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	return js.CreateOrUpdateObjectStore(ctx, cfg)
}

// APIPrefix is the JetStream API prefix js uses, honouring a domain or a
// custom prefix, so raw requests (direct gets, batched reads) reach the
// same API as js's own.
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		if o.APIPrefix[len(o.APIPrefix)-1] != '.' {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	default:
		return jetstream.DefaultAPIPrefix
	}
}
