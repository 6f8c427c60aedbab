// Package node is the callsheet runtime as a Go API (docs/spec.md §8 "Go API"): it
// starts or connects to JetStream, opens the event log, registers the tools,
// runs the actor engine with one tool actor per concurrency class, and offers
// sessions, turns, transcripts and live events without HTTP. cmd/node serves
// it over HTTP; a Go program can embed it directly.
//
// It also keeps the tenants in force (tenants.go: the config's, or a
// tenants_file re-read as it changes), deletes sessions with a receipt in
// their tenant's deletions log (deletion.go), and sweeps each tenant's
// closed sessions past its retention (retention.go).
package node
