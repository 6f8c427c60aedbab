package natslog

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
)

// Session snapshots: a contiguous copy of each session's log messages, so
// that reading one session does not grow with the log (docs/performance.md,
// "Replay").
//
// Why: the file store keeps a stream in 8 MiB blocks and, to hand out one
// message, loads the whole block it sits in; a session whose messages are
// spread through a large log costs one block load per block it touches
// (nats-server 2.15.2 filestore.go: LoadNextMsg walks every block between
// the filter's first and last, msgBlock.firstMatching loads each). A
// snapshot is the session's messages copied, in order and byte for byte,
// into one message (a chunk) of a stream of its own, so a read costs one
// block load for the snapshot and the blocks of the tail written since.
//
// Layout: stream <log stream>_SNAP, subjects <prefix>_snap.<tenant>.
// <session>.<k>, one message per subject (MaxMsgsPerSubject 1: rewriting a
// chunk replaces it). Chunk 0 holds the session's first log messages, chunk
// k+1 those after chunk k's last, each up to snapChunkLimit bytes; writers
// keep the last chunk within snapOpenLimit (extendSnapshot), so extending
// the snapshot rewrites little. A chunk's
// body is snapMagic and then, per log message, its stream sequence and its
// length as uvarints and the message's data as stored.
//
// Who writes: Read, when it had to read at least snapMinTail messages from
// the log past the snapshot (it has them in hand), extends the snapshot with
// them; Compact does the same on request, from the snapshot's tip when the
// Log remembers it (snapcache.go): then it reads only the log past the tip
// and rewrites the last chunk. Every write is guarded by the last stream
// sequence of the session's chunks (expected-last-subject-sequence on
// <prefix>_snap.<tenant>.<session>.>), so concurrent writers cannot
// interleave: a refused write is dropped, the next read writes again.
//
// Trust: the log stays the truth; a snapshot is a cache that may be deleted
// at any time. A read uses it only when it is consistent with the log: the
// events are the session's, in Seq order from 1 without gaps, in stream
// order, and the snapshot's last message is the log's message at that stream
// sequence (the same event ids), which the read checks as it starts the tail
// there. Anything else and the read falls back to the log alone.

// snapMagic starts every chunk: the format's name and version.
const snapMagic = "CSS1"

// snapMinTail is how many log messages past the snapshot a read must have
// read before it writes them into the snapshot. Below it a read costs at
// most that many block loads, and a session that is read often (every
// rebuild of its actor) is not rewritten for a message or two.
const snapMinTail = 8

// snapStreamSuffix names the snapshot stream after the log stream.
const snapStreamSuffix = "_SNAP"

// snapEntry is one log message in a snapshot: its stream sequence in the log
// and its data as stored.
type snapEntry struct {
	sseq uint64
	data []byte
}

// snapChunk is one chunk as read: its index, its stream sequence in the
// snapshot stream, and its entries.
type snapChunk struct {
	k       int
	seq     uint64
	entries []snapEntry
	body    []byte // as stored; entries alias it
}

// snapSubjects is the snapshot stream's subject prefix for a log prefix.
func snapSubjects(prefix string) string { return prefix + "_snap" }

func (l *Log) snapFilter(tenant, session string) string {
	return snapSubjects(l.cfg.prefix) + "." + tenant + "." + session + ".>"
}

func (l *Log) snapSubject(tenant, session string, k int) string {
	return snapSubjects(l.cfg.prefix) + "." + tenant + "." + session + "." + strconv.Itoa(k)
}

// ensureSnapshots creates the snapshot stream, or updates it to this
// configuration.
func (l *Log) ensureSnapshots(ctx context.Context) error {
	_, err := ensureStream(ctx, l.js, jetstream.StreamConfig{
		Name:              l.cfg.stream + snapStreamSuffix,
		Description:       "callsheet session snapshots: each session's log messages copied contiguously (a cache of " + l.cfg.stream + ")",
		Subjects:          []string{snapSubjects(l.cfg.prefix) + ".>"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		Replicas:          l.cfg.replicas,
		MaxMsgsPerSubject: 1,
		AllowDirect:       true,
	})
	if err != nil {
		return fmt.Errorf("natslog: create stream %s: %w", l.cfg.stream+snapStreamSuffix, err)
	}
	return nil
}

// snapChunkLimit is the most bytes of one chunk: within the server's
// max_payload with room for the headers.
func (l *Log) snapChunkLimit() int {
	limit := 1 << 20
	if mp := l.nc.MaxPayload(); mp > 0 && int64(limit) > mp {
		limit = int(mp)
	}
	return max(limit-4096, 1)
}

// encodeSnap is the body of a chunk holding entries.
func encodeSnap(entries []snapEntry) []byte {
	n := len(snapMagic)
	for _, e := range entries {
		n += 2*binary.MaxVarintLen64 + len(e.data)
	}
	b := make([]byte, 0, n)
	b = append(b, snapMagic...)
	for _, e := range entries {
		b = appendEntry(b, e)
	}
	return b
}

// appendEntry appends e's encoding to a chunk's body.
func appendEntry(b []byte, e snapEntry) []byte {
	b = binary.AppendUvarint(b, e.sseq)
	b = binary.AppendUvarint(b, uint64(len(e.data)))
	return append(b, e.data...)
}

// entrySize is what one entry adds to a chunk's body.
func entrySize(e snapEntry) int {
	return uvarintLen(e.sseq) + uvarintLen(uint64(len(e.data))) + len(e.data)
}

// uvarintLen is the length of v's shortest uvarint: a chunk's only
// encoding of it (decodeSnap refuses longer ones).
func uvarintLen(v uint64) int {
	var tmp [binary.MaxVarintLen64]byte
	return binary.PutUvarint(tmp[:], v)
}

// decodeSnap decodes a chunk's body. Entries must be non-empty and in
// strictly increasing stream order; the data of each is not decoded here.
// The entries' data alias b.
func decodeSnap(b []byte) ([]snapEntry, error) {
	if !strings.HasPrefix(string(b), snapMagic) {
		return nil, fmt.Errorf("natslog: snapshot chunk does not start with %q", snapMagic)
	}
	b = b[len(snapMagic):]
	var out []snapEntry
	var last uint64
	for len(b) > 0 {
		sseq, n := binary.Uvarint(b)
		if n <= 0 || n != uvarintLen(sseq) {
			return nil, fmt.Errorf("natslog: snapshot chunk entry %d: bad stream sequence", len(out))
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || n != uvarintLen(size) {
			return nil, fmt.Errorf("natslog: snapshot chunk entry %d: bad length", len(out))
		}
		b = b[n:]
		if size == 0 || size > uint64(len(b)) {
			return nil, fmt.Errorf("natslog: snapshot chunk entry %d: length %d, %d bytes left", len(out), size, len(b))
		}
		if sseq <= last {
			return nil, fmt.Errorf("natslog: snapshot chunk entry %d: stream sequence %d after %d", len(out), sseq, last)
		}
		out = append(out, snapEntry{sseq: sseq, data: b[:size:size]})
		b, last = b[size:], sseq
	}
	if len(out) == 0 {
		return nil, errors.New("natslog: empty snapshot chunk")
	}
	return out, nil
}

// loadSnapshot returns the session's chunks in order, with one multi-subject
// direct get (each chunk is the last message of its subject), and the
// highest stream sequence among them (usable or not), which guards the next
// write. A chunk that cannot be decoded, or a gap in the chunk indices, ends
// the snapshot there.
func (l *Log) loadSnapshot(ctx context.Context, tenant, session string) (chunks []snapChunk, guard uint64, err error) {
	filter := l.snapFilter(tenant, session)
	req, _ := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
	}{[]string{filter}})
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := l.nc.PublishRequest(l.api+"DIRECT.GET."+l.cfg.stream+snapStreamSuffix, inbox, req); err != nil {
		return nil, 0, err
	}
	prefix := len(filter) - 1 // the subject up to the chunk index
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("snapshot of %s/%s: %w", tenant, session, err)
		}
		switch st := m.Header.Get("Status"); st {
		case "":
		case "204", "404": // end of the answer, or no snapshot
			return orderChunks(chunks), guard, nil
		default:
			return nil, 0, fmt.Errorf("snapshot of %s/%s: status %s %s", tenant, session, st, m.Header.Get("Description"))
		}
		subj := m.Header.Get(jetstream.SubjectHeader)
		if len(subj) <= prefix {
			continue
		}
		k, err := strconv.Atoi(subj[prefix:])
		if err != nil || k < 0 {
			continue
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("snapshot of %s/%s: bad %s header %q", tenant, session, jetstream.SequenceHeader, m.Header.Get(jetstream.SequenceHeader))
		}
		guard = max(guard, seq) // an unusable chunk too: the next write replaces it
		entries, err := decodeSnap(m.Data)
		if err != nil {
			entries = nil // unusable: orderChunks ends the snapshot before it
		}
		chunks = append(chunks, snapChunk{k: k, seq: seq, entries: entries, body: m.Data})
	}
}

// orderChunks sorts chunks by index and keeps the run 0, 1, 2, … of usable
// ones whose stream sequences increase from chunk to chunk.
func orderChunks(chunks []snapChunk) []snapChunk {
	slices.SortFunc(chunks, func(a, b snapChunk) int { return a.k - b.k })
	for i, c := range chunks {
		if c.k != i || len(c.entries) == 0 || (i > 0 && c.entries[0].sseq <= chunks[i-1].entries[len(chunks[i-1].entries)-1].sseq) {
			return chunks[:i]
		}
	}
	return chunks
}

// snapOpenLimit is how large the last chunk grows before its messages are
// folded into the chunk before it (or it is left as it is and a new one
// started): a compaction rewrites at most this much, and the chunk before
// once every this many bytes.
const snapOpenLimit = 32 << 10

// snapBuf is one chunk being extended; dirty says it differs from the
// stored one (and owns its body).
type snapBuf struct {
	k     int
	body  []byte
	dirty bool
}

// add appends e, copying the stored body first.
func (b *snapBuf) add(e snapEntry) {
	b.own()
	b.body = appendEntry(b.body, e)
}

func (b *snapBuf) own() {
	if !b.dirty {
		b.body = append(make([]byte, 0, len(b.body)+snapOpenLimit), b.body...)
		b.dirty = true
	}
}

// ownRoom is own with room for n bytes in all.
func (b *snapBuf) ownRoom(n int) {
	switch {
	case !b.dirty:
		b.body = append(make([]byte, 0, max(n, len(b.body))), b.body...)
		b.dirty = true
	case cap(b.body) < n:
		b.body = slices.Grow(b.body, n-len(b.body))
	}
}

// newSnapBuf is an empty chunk k with room for n bytes.
func newSnapBuf(k, n int) *snapBuf {
	return &snapBuf{k: k, body: append(make([]byte, 0, max(n, len(snapMagic))), snapMagic...), dirty: true}
}

// extendSnapshot appends entries (the session's log messages right after
// the snapshot's last, in order) to the snapshot whose tip is tip (the zero
// tip with a guard: none usable), as planExtension lays them out. The
// changed chunks are written in order, each guarded on the one before; a
// write refused because another writer got there first (the guard), or that
// fails, ends the extension (the snapshot stays consistent: a chunk whose
// messages were folded into the one before repeats them, so a read ends the
// snapshot before it). It returns the tip of the snapshot as written, valid
// when the error is nil.
func (l *Log) extendSnapshot(ctx context.Context, tenant, session string, tip snapTip, entries []snapEntry) (snapTip, error) {
	p := planExtension(tip, entries, l.snapChunkLimit())
	if p.upto == 0 {
		return tip, nil
	}
	guard := tip.guard
	for _, b := range p.writes {
		m := nats.NewMsg(l.snapSubject(tenant, session, b.k))
		m.Data = b.body
		m.Header.Set(hdrExpLastSubj, strconv.FormatUint(guard, 10))
		m.Header.Set(hdrExpLastSubjTo, l.snapFilter(tenant, session))
		ack, err := l.js.PublishMsg(ctx, m)
		if err != nil {
			return snapTip{}, fmt.Errorf("snapshot of %s/%s chunk %d: %w", tenant, session, b.k, err)
		}
		guard = ack.Sequence
	}
	body := p.cur.kept()
	next := snapTip{k: p.cur.k, body: body, guard: guard, upto: p.upto, last: body[len(body)-p.lastLen:]}
	if p.fill != nil {
		next.prev = p.fill.kept()
	}
	return next, nil
}

// extension is how an extension changes a snapshot: the chunks to write, in
// order, the last chunk and the one before it (fill, nil for none) as they
// will be, and the stream sequence and data length of the last entry copied
// (upto 0: none).
type extension struct {
	writes    []*snapBuf
	cur, fill *snapBuf
	upto      uint64
	lastLen   int
}

// planExtension lays entries out after the snapshot's tip, in chunks of at
// most limit bytes. Each entry goes into the last chunk while that stays
// within snapOpenLimit (or is empty); otherwise the last chunk's messages
// are folded into the chunk before it when that has room within a whole
// chunk, and the entry starts the last chunk again, or else the entry starts
// a new chunk. The layout thus depends on the entries only, not on how they
// were batched. An entry larger than a whole chunk cannot be copied: the
// plan stops before it.
func planExtension(tip snapTip, entries []snapEntry, limit int) extension {
	open := min(snapOpenLimit, limit)
	var fill *snapBuf // chunk cur.k-1
	if tip.k > 0 && tip.prev != nil {
		fill = &snapBuf{k: tip.k - 1, body: tip.prev}
	}
	cur := &snapBuf{k: tip.k, body: tip.body}
	if cur.body == nil {
		cur.body = []byte(snapMagic)
	}
	var sealed []*snapBuf // changed chunks before fill, in order
	var x extension
	// left is what the entries not yet laid out add: a chunk gets room for
	// what it can still take of them once, so the appends that follow do
	// not copy it again.
	left := 0
	for _, e := range entries {
		left += entrySize(e)
	}
	for _, e := range entries {
		es := entrySize(e)
		if len(snapMagic)+es > limit {
			break
		}
		switch {
		case len(cur.body) == len(snapMagic) || len(cur.body)+es <= open:
		case fill != nil && len(fill.body)+len(cur.body)-len(snapMagic) <= limit:
			fill.ownRoom(min(limit, len(fill.body)+len(cur.body)-len(snapMagic)+left))
			fill.body = append(fill.body, cur.body[len(snapMagic):]...)
			if cur.dirty {
				cur.body = cur.body[:len(snapMagic)] // copied: its room is reused
			} else {
				cur = newSnapBuf(cur.k, min(open, len(snapMagic)+left))
			}
		default:
			if fill != nil && fill.dirty {
				sealed = append(sealed, fill)
			}
			fill, cur = cur, newSnapBuf(cur.k+1, min(open, len(snapMagic)+left))
		}
		cur.add(e)
		left -= es
		x.upto, x.lastLen = e.sseq, len(e.data)
	}
	x.cur, x.fill = cur, fill
	for _, b := range append(sealed, fill, cur) {
		if b != nil && b.dirty {
			x.writes = append(x.writes, b)
		}
	}
	return x
}

// kept is the body to remember in a tip: a copy without the room own left
// for appends when that room is most of it. The next extension copies the
// body before it appends anyway (own), so the room would only hold memory:
// up to snapOpenLimit a session, idle sessions' included, until the tip is
// dropped.
func (b *snapBuf) kept() []byte {
	if !b.dirty || cap(b.body)-len(b.body) <= len(b.body)/4 {
		return b.body
	}
	return bytes.Clone(b.body)
}

// tipOf is the tip of a snapshot read and checked against the log: its
// usable chunks, in order, ending with the message at log stream sequence
// upto whose data is last, and the guard loadSnapshot found.
func tipOf(chunks []snapChunk, guard, upto uint64, last []byte) snapTip {
	if len(chunks) == 0 {
		return snapTip{guard: guard}
	}
	c := chunks[len(chunks)-1]
	t := snapTip{k: c.k, body: c.body, guard: guard, upto: upto, last: last}
	if len(chunks) > 1 {
		t.prev = chunks[len(chunks)-2].body
	}
	return t
}

// Compact brings the session's snapshot up to date with its log, so the next
// Read of it costs one snapshot get and the log's blocks written since. A
// node calls it after each batch of a session's events; Read does the same
// by itself once the tail it read is long enough. When the Log remembers the
// snapshot's tip (snapcache.go) it reads only the log written since and
// rewrites the last chunk; a session without a snapshot has its log's
// messages copied as stored (nothing decoded, no payload stored by reference
// fetched); otherwise, or when the tip is no longer the stored snapshot's,
// it reads and checks the whole snapshot as Read does. Errors wrap
// ErrInvalidID, or are the server's.
func (l *Log) Compact(ctx context.Context, tenant, session string) error {
	if err := ValidateIDs(tenant, session); err != nil {
		return err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	key := sessionKey(tenant, session)
	if tip, ok := l.tips.get(key); ok {
		done, err := l.compactTip(ctx, tenant, session, tip)
		if err != nil {
			return fmt.Errorf("compact %s/%s: %w", tenant, session, err)
		}
		if done {
			return nil
		}
		l.tips.forget(key)
	}
	// A session without a snapshot (new, or its snapshot dropped) is
	// compacted as from a tip at the log's start: its messages are copied
	// as stored, not decoded, and no payload stored by reference is fetched.
	var loaded *snapLoad
	switch chunks, guard, err := l.loadSnapshot(ctx, tenant, session); {
	case err == nil && len(chunks) == 0:
		done, err := l.compactTip(ctx, tenant, session, snapTip{guard: guard})
		if err != nil {
			return fmt.Errorf("compact %s/%s: %w", tenant, session, err)
		}
		if done {
			return nil
		}
	case err == nil:
		loaded = &snapLoad{chunks: chunks, guard: guard} // read and checked as Read does
	}
	_, err := l.readSnap(ctx, tenant, session, 0, 0, 1, true, false, loaded)
	if err != nil {
		return fmt.Errorf("compact %s/%s: %w", tenant, session, err)
	}
	return nil
}

// compactTip extends the snapshot whose tip is tip with the session's log
// messages past it: it reads the log from the tip's last message, which
// must still be the log's message at that stream sequence, byte for byte,
// to the session's last; a tip with upto 0 (no snapshot) copies the log from
// the session's first message. done false says the tip is not the log's or not
// the stored snapshot's (a write refused by the guard): the caller reads
// the snapshot as stored. An error is the server's, reading the log.
func (l *Log) compactTip(ctx context.Context, tenant, session string, tip snapTip) (done bool, err error) {
	key, filter := sessionKey(tenant, session), l.sessionFilter(tenant, session)
	last, found, err := l.lastStored(ctx, filter)
	if err != nil {
		return false, err
	}
	if !found || last.sseq < tip.upto {
		return false, nil
	}
	l.remember(key, position{seq: last.ev.Seq, sseq: last.sseq})
	if last.sseq == tip.upto {
		return bytes.Equal(last.msg, tip.last), nil
	}
	var tail []snapEntry
	checked := tip.upto == 0 // a tip at the log's start matches nothing
	for start := max(tip.upto, 1); start <= last.sseq; {
		batch, err := l.directGet(ctx, start, filter, readBatch, 0, decodeRaw)
		if err != nil {
			return false, err
		}
		if len(batch) == 0 {
			// A replica behind the leader answered; wait for it.
			select {
			case <-ctx.Done():
				return false, fmt.Errorf("stream seq %d not yet readable: %w", last.sseq, ctx.Err())
			case <-time.After(lagRetry):
			}
			continue
		}
		for _, m := range batch {
			if m.sseq > last.sseq {
				start = m.sseq
				break
			}
			start = m.sseq + 1
			if !checked {
				if m.sseq != tip.upto || !bytes.Equal(m.data, tip.last) {
					return false, nil
				}
				checked = true
				continue
			}
			tail = append(tail, snapEntry{sseq: m.sseq, data: m.data})
		}
	}
	next, err := l.extendSnapshot(ctx, tenant, session, tip, tail)
	if err != nil {
		return false, nil
	}
	if next.upto > 0 {
		l.tips.put(key, next)
	}
	return true, nil
}

// snapLoad is a session's snapshot as loadSnapshot returned it.
type snapLoad struct {
	chunks []snapChunk
	guard  uint64
}

// snapPrefix is what a snapshot gives a read: the session's first events
// with their stream sequences.
type snapPrefix struct {
	evs []storedEvent
	// upto is the log stream sequence of the last message used; 0: none.
	upto uint64
	// last is that message's data, to match in the log.
	last []byte
	// cut says the snapshot holds messages past the read's last (written
	// meanwhile): the read does not extend it.
	cut bool
	// bad says the snapshot contradicts itself: the read rejects it.
	bad bool
	// chunks and guard are what loadSnapshot read, for extending it.
	chunks []snapChunk
	guard  uint64
}

// snapEvents decodes the chunks' messages up to the log stream sequence
// lastSseq, checking that they are the session's events in order from Seq
// 1 and that every hash link among them holds (docs/events.md, "The hash
// chain"): with the last message matched byte for byte in the log by the
// caller, a changed chained event anywhere in the snapshot breaks a link.
// An error is a payload stored by reference that could not be fetched.
func (l *Log) snapEvents(ctx context.Context, tenant, session string, chunks []snapChunk, lastSseq uint64) (snapPrefix, error) {
	var p snapPrefix
	var prev *events.Event
	for _, c := range chunks {
		for _, e := range c.entries {
			if e.sseq > lastSseq {
				// Written since the read found the session's last message;
				// but the session's first message is older than that.
				if p.upto == 0 {
					return snapPrefix{bad: true}, nil
				}
				p.cut = true
				return p, nil
			}
			ss, err := decodeStored(e.data)
			if err != nil {
				return snapPrefix{bad: true}, nil
			}
			for _, st := range ss {
				var first *events.Event
				if len(p.evs) > 0 {
					first = &p.evs[0].ev
				}
				if !l.snapLinks(tenant, session, first, prev, st.ev) {
					return snapPrefix{bad: true}, nil
				}
				// A payload stored by reference fails here as it would
				// from the log: the message is the same.
				ev, err := l.resolve(ctx, st)
				if err != nil {
					return snapPrefix{}, fmt.Errorf("stream %s seq %d: %w", l.cfg.stream, e.sseq, err)
				}
				p.evs = append(p.evs, storedEvent{ev: ev, sseq: e.sseq})
				prev = &p.evs[len(p.evs)-1].ev
			}
			p.upto, p.last = e.sseq, e.data
		}
	}
	return p, nil
}

// snapLinks reports whether ev may follow prev (nil: ev is the first) in
// the session's snapshot, whose first event is first: the session's, the
// next Seq, and linked to prev, by the session's rule, when it carries a
// link.
func (l *Log) snapLinks(tenant, session string, first, prev *events.Event, ev events.Event) bool {
	if ev.Tenant != tenant || ev.Session != session {
		return false
	}
	if prev == nil {
		return ev.Seq == 1 && (!events.Chained(ev) || ev.Prev == events.Chain2.Genesis(tenant, session) || ev.Prev == events.Chain1.Genesis(tenant, session))
	}
	if ev.Seq != prev.Seq+1 {
		return false
	}
	if !events.Chained(ev) {
		return true
	}
	h, err := events.ChainOf(tenant, session, *first).Hash(*prev)
	return err == nil && h == ev.Prev
}

// dropSnapshot removes every chunk of the session's snapshot.
func (l *Log) dropSnapshot(ctx context.Context, tenant, session string) error {
	st, err := l.js.Stream(ctx, l.cfg.stream+snapStreamSuffix)
	if err != nil {
		return err
	}
	l.tips.forget(sessionKey(tenant, session))
	return st.Purge(ctx, jetstream.WithPurgeSubject(l.snapFilter(tenant, session)))
}

// ForgetTip drops the session's cached snapshot tip (WithSnapshotCache): an
// idle session then costs no tip memory, and its next Read stores one again.
func (l *Log) ForgetTip(tenant, session string) {
	l.tips.forget(sessionKey(tenant, session))
}

// CachedTips reports how many sessions' snapshot tips the Log holds.
func (l *Log) CachedTips() int {
	l.tips.mu.Lock()
	defer l.tips.mu.Unlock()
	return len(l.tips.byKey)
}
