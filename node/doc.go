// Package node is the callsheet runtime as a Go API (docs/spec.md §8 "Go
// API"): sessions, turns, transcripts and live events without HTTP. cmd/callsheet-node
// serves it over HTTP; a Go program can embed it directly.
//
// A Node is wiring. New assembles its collaborators, each a type of its own
// that owns what it starts: the store (the NATS connection, embedded or not,
// the event log and the other stores: store.go), the tool surface (the
// registry, the MCP servers, harness tools, and the rules calls are planned
// with: surface.go), the session registry (registry.go), the fleet
// supervisor (lease, members, owners index, caps, takeovers: fleet.go), the
// workspaces, the hooks, the turn watches (limits.go), the search indexer,
// the checkpointer and the compactor. It hands the actors theirs as the
// interfaces of actors.Deps, asks cluster.Route who serves a session, and
// runs its own goroutines under one supervisor (internal/supervise). Close
// stops each collaborator after those that use it.
//
// It also keeps the tenants in force (tenants.go: the config's, or a
// tenants_file re-read as it changes), deletes sessions with a receipt in
// their tenant's deletions log (deletion.go), and sweeps each tenant's
// closed sessions past its retention (retention.go).
//
// Every error a Node method returns is an *Error with a Code (errors.go).
package node
