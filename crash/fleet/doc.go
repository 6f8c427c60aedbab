// Package fleet is the fleet crash suite (docs/recovery.md, "The fleet
// suite"): real node processes on one machine (internal/testnode), three of
// them clustered from their flags alone, sessions under load, and the
// failures a fleet must ride out: kill -9 of a session's owner, kill -9 of
// the node leading the event stream, a node stopped (SIGSTOP) past its lease
// and resumed, and a graceful shutdown. It measures and prints takeover time
// (kill to the first turn served through a survivor, p50 and p99), events
// lost, never-replay calls run twice, stale appends accepted (a message of a
// node that no longer owned its session), calls left unsettled and overshoots
// of a fleet-wide cap. It has test files only.
package fleet
