// Package actors is the I/O shell around the decision core: hollywood actors,
// in process only (every durable or cross-node guarantee comes from
// JetStream).
//
// A Session actor owns one session. It rebuilds its state from the log when
// it starts, decides with package core, applies what it decided at once and
// appends it through one append goroutine at a time (so a burst of decisions
// is one append), and acts on an event only once it is durable: a worker runs
// a call only after its claim is in the log, a caller hears of a turn only
// after it is recorded. It passivates itself when idle. A Pool is the tool
// actor of one concurrency class: it takes the requests its session actors
// hand it (LocalRequests) within its capacity, checkpoints, claims, runs the
// tool with its timeout and context, caps the output, and reports the
// outcome to the session. Pools are a node's three. Receive never blocks;
// replies travel on buffered channels.
//
// The actors get their collaborators as interfaces, in Deps (Rules, Tools,
// Workspaces, Clock, Sessions, Fleet, Calls, ...), which the node
// implements; a test implements them too and runs the actors on
// events/memlog or on a real JetStream log.
package actors
