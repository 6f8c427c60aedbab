// Package memlog is an events.Log kept in memory: the same contract as the
// JetStream log (events/natslog), checked by the same suite (events/logtest),
// for tests of the actors and for embedding without a server. Nothing
// survives the process.
//
// Appends are guarded by the session's last Seq and idempotent by event id,
// as natslog's are. An append dispatches every ToolCallRequested it stores
// to the queue of its concurrency class and node; a RequestSource takes from
// that queue. A request handed out and not settled within the ack wait
// (WithAckWait) is delivered again, as JetStream's AckWait does.
//
// # Goroutines
//
// Each Watch runs one goroutine, owned by the Log: it ends when the watch's
// context ends or Close is called, and Close waits for all of them. A Nak
// with a delay holds a timer until the delay passes.
package memlog
