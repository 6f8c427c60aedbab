// Package gopool runs functions on goroutines that stay alive between them.
//
// Why: the node starts a goroutine for every append of a session and for
// every tool call (the actor model of docs/architecture.md: Receive never
// blocks, I/O runs beside it). A fresh goroutine starts with a small stack
// and grows it, copying it each time, through the JSON and NATS frames of
// the work: stack growth (runtime.newstack, copystack) was 14 % of the
// node's CPU for a no-op call (docs/performance.md, "CPU per call"). A
// goroutine kept for the next function has its stack already grown.
//
// A Pool never queues a function behind a busy one: Go hands it to a worker
// that is waiting, or starts one, so concurrency and ordering are what plain
// go statements give. A worker waits at most the idle time for its next
// function, then ends.
package gopool
