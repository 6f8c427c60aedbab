// Package cluster runs and reaches the NATS JetStream server that holds
// callsheet's log: an embedded nats-server with a file store for a single node
// (the default, `go run ./cmd/node`), or a connection to an existing NATS
// cluster (`--nats URL`).
//
// Durability is server-wide in nats-server: EmbeddedOptions.SyncAlways makes
// the embedded server fsync every write before it acknowledges it (docs/spec.md §4
// "durability": "fsync"); without it JetStream syncs periodically
// ("durability": "interval"). In a replicated cluster the RAFT log carries
// durability and the setting belongs to the external servers' configuration.
//
// The package owns no goroutines of its own; the embedded server's goroutines
// belong to the *Embedded value and end with Shutdown.
package cluster
