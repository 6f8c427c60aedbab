// Command peers measures the bench's no-op call on a workflow engine:
// Temporal, run in this process as the temporal CLI's dev server runs it
// (go.temporal.io/server/temporal, SQLite persistence), driven by Temporal's
// Go SDK client and worker in the same process. `go run ./bench -peers`
// builds it and prints its rows beside callsheet's from the same run, with
// their ratios (docs/performance.md, "The peer").
//
// It is a Go module of its own so that the product's go.mod does not carry
// Temporal's server and its dependencies: `go test ./...` and `go vet ./...`
// of the callsheet module never build it, and CI does not run it.
//
// It measures, per setting (-settings):
//
//	default         the dev server as `temporal server start-dev
//	                --db-filename` runs it: default dynamic config (the
//	                history service's queue processors poll at most 20 times
//	                a second), SQLite's defaults (rollback journal,
//	                synchronous=FULL: an fsync at every commit)
//	tuned-fsync     the queue processors' poll rates raised to 10,000/s,
//	                SQLite in WAL mode with synchronous=FULL (the WAL
//	                fsynced at every commit), the visibility store in a
//	                file of its own: callsheet's fsync durability
//	tuned-interval  the same, with synchronous=NORMAL (no fsync per
//	                commit, only at checkpoints): callsheet's interval
//	                durability
//	tuned-memory    the same, in memory: not durable, not measured unless
//	                named; it shows what the disk costs
//
// and per shape (-shapes): a standalone activity (client.ExecuteActivity,
// then the handle's Get: one durable activity execution) and a workflow
// that runs the activity once (ExecuteWorkflow, then Get: the shape of a
// one-call turn on a workflow engine). Latency rows time one call at a
// time (p50, p99); throughput rows (-throughput) count standalone
// activities per second with -concurrency callers.
//
// Usage:
//
//	cd bench/peers
//	go run . [-json] [-settings tuned-fsync] [-calls 1000] [-duration 5s] [-cpuprofile cpu.out]
//	go test ./...    # starts a dev server and completes one activity
//
// Each setting runs on a server of its own, in a fresh directory under
// $TMPDIR that Close removes.
package main
