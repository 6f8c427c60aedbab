// Package memlog is an events.Log kept in memory: the same contract as the
// JetStream log (events/natslog), checked by the same suite (events/logtest),
// for tests of the actors and for embedding without a server. Nothing
// survives the process.
//
// Appends are guarded by the session's last Seq and idempotent by event id,
// as natslog's are.
//
// # Goroutines
//
// Each Watch runs one goroutine, owned by the Log: it ends when the watch's
// context ends or Close is called, and Close waits for all of them.
package memlog
