// Package cluster runs and reaches the NATS JetStream server that holds
// callsheet's log: an embedded nats-server with a file store for a single node
// (the default, `go run ./cmd/callsheet-node`), or a connection to an existing NATS
// cluster (`--nats URL`).
//
// Durability is server-wide in nats-server: EmbeddedOptions.SyncAlways makes
// the embedded server fsync every write before it acknowledges it (docs/spec.md §4
// "durability": "fsync"); without it JetStream syncs periodically
// ("durability": "interval"). In a replicated cluster the RAFT log carries
// durability and the setting belongs to the external servers' configuration.
//
// Authentication (docs/spec.md §10 "Log"): an embedded server admits exactly
// one nkey user, EmbeddedOptions.Credentials, over TCP and in-process; there
// is no anonymous access and no other user. A node keeps its seed in
// DATA/credentials/nats.nk (DefaultCredentialsPath, made by EnsureCredentials
// with mode 0600 in a 0700 directory); cmd/callsheet-replay reads the same file, and a
// fleet's nodes can be given one shared file. Credentials also load a .creds
// file (user JWT and seed) for an external operator-mode cluster, and Connect
// presents whatever credentials it is given as a nats.Option.
//
// A full disk under the store does not need a restart: the *Embedded value
// restarts its JetStream once the store's file system has room again
// (heal.go), and a node's lease is taken again once it can be stored.
//
// The package owns no goroutines of its own; the embedded server's goroutines
// and its healer belong to the *Embedded value and end with Shutdown.
package cluster
