// Package natslog stores callsheet's event log in NATS JetStream: it
// implements events.Log, keeps full outputs and file pre-images in an object
// store, indexes sessions in KV buckets, and keeps each session's snapshot.
//
// # Subjects
//
// Every event lives in one stream (DefaultStream, subjects "cs.ev.>"). The
// events of session S of tenant T are stored, several packed to a message,
// on
//
//	cs.ev.T.S.log
//
// so reading one session is the filter "cs.ev.T.S.>" (the stream's subject
// index finds its first and last message, but the file store loads every
// block in between: see Reads). Logs written when requests were dispatched
// through JetStream consumers also hold messages on cs.ev.T.S.req.CLASS and
// cs.ev.T.S.req.CLASS.NODE; the same filter reads them. Tenant and session
// ids become subject tokens and must match ^[A-Za-z0-9_-]{1,128}$.
//
// # Appends
//
// Append is guarded on the server: the first message of an append carries
// Nats-Expected-Last-Subject-Sequence with the subject "cs.ev.T.S.>", so the
// server refuses it when any message of the session was stored after the one
// the caller last saw, whichever node wrote it. The guard needs the stream
// sequence of the session's last event; a per-Log cache, filled by its own
// appends and reads, gives it without a round trip, and a miss asks the
// stream leader. A stale cache is harmless: the server refuses the append and
// the cache is refreshed.
//
// A single event is one guarded publish. Several events are one atomic batch
// (Nats-Batch-Id / -Sequence / -Commit, stream option AllowAtomicPublish):
// the server stages the batch and checks the guard and every Nats-Msg-Id at
// commit, then stores all of it or none, under the stream's write isolation
// so readers never see half a batch. With SyncAlways the commit is fsynced
// once for the whole batch.
//
// Atomic batches cost more than they should on an R1 file-backed stream:
// nats-server 2.15 stages each batch in a file store of its own (about 3
// mkdir, 3 fsync and 17 open calls per batch, even without SyncAlways). A
// 3-event append measured 2.7–3.2 ms p50 against 90 µs for three chained
// guarded publishes (779 µs against 2.7 ms with SyncAlways).
// WithSequentialAppends trades atomicity on a crash for that speed; see it.
//
// Every message carries Nats-Msg-Id = event ID. A retried append whose first
// attempt was stored but whose acknowledgement was lost is refused by the
// guard (or, inside the duplicate window, by the batch's duplicate-id check);
// Append then reads the session and, when the events with those ids already
// sit at those sequences, reports success. Any other refusal is
// events.ErrConflict.
//
// # Reads
//
// Read asks the stream leader for the session's last message (so it sees
// every acknowledged append), then pulls the session with batched direct gets
// up to that stream sequence. Watch uses an ordered consumer on the session's
// filter, after the history Read gives it. A session's history comes from
// its snapshot when there is one (snapshot.go): a contiguous copy of its log
// messages in the stream <log stream>_SNAP, checked against the log before it
// is used, so reading one session does not load every block of the log it
// spans. In a replicated stream direct gets may be answered by a follower
// a few milliseconds behind; Read waits until it has reached the sequence the
// leader reported, so it still reads its own writes.
//
// # Deletion
//
// A deleted session is removed by subject and by name (purge.go): its
// subjects of the event stream and of the snapshot stream are purged, its
// objects (named TENANT/SESSION/...) deleted, its index, search and
// checkpoint keys purged; the deletions log (deletions.go, stream
// CALLSHEET_DELETIONS, subjects cs.del.TENANT.SESSION) keeps a signed,
// chained receipt per deleted session, appended under a guard that keeps
// each tenant's chain linear and each session receipted once.
//
// # Goroutines
//
// Each Watch runs one goroutine, owned by the Log: it ends when the watch's
// context ends or Close is called, and Close waits for all of them. A Log
// made WithGroupCommit runs one committer goroutine, which Close ends.
package natslog
