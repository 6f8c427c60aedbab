package cluster

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/internal/jsensure"
)

// ensureKV opens the fleet's buckets as every node opens them
// (internal/jsensure).
var ensureKV = jsensure.KV

// EnsureKV returns the KV bucket cfg names, created or updated to cfg, or
// left alone when it already is as asked: for the buckets of other packages
// every node opens at start (harness).
func EnsureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return jsensure.KV(ctx, js, cfg)
}
