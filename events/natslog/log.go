package natslog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/jsensure"
)

// ErrInvalidID is wrapped by errors about a tenant or session id that cannot
// be a subject token.
var ErrInvalidID = errors.New("natslog: invalid tenant or session id")

// ErrInvalidEvent is wrapped by errors about events Append cannot store: a
// wrong tenant, session or sequence, a missing id or type, or a request with
// an unknown concurrency class.
var ErrInvalidEvent = errors.New("natslog: invalid event")

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("natslog: log is closed")

// JetStream headers used by appends.
const (
	hdrMsgID         = "Nats-Msg-Id"
	hdrExpLastSubj   = "Nats-Expected-Last-Subject-Sequence"
	hdrExpLastSubjTo = "Nats-Expected-Last-Subject-Sequence-Subject"
	hdrBatchID       = "Nats-Batch-Id"
	hdrBatchSeq      = "Nats-Batch-Sequence"
	hdrBatchCommit   = "Nats-Batch-Commit"
)

// JetStream error codes that mean "the session moved on" or "already stored".
const (
	codeWrongLastSeq          = 10071
	codeWrongLastSeqConstant  = 10164
	codeDuplicateConflict     = 10158
	codeAtomicBatchDuplicated = 10201
)

// JetStream error codes that mean "not now": the server could not decide,
// most often because a stream or its leader is moving (Unavailable).
const (
	codeClusterNotAssigned  = 10007 // JetStream cluster not assigned to this server
	codeClusterNotAvail     = 10008 // JetStream system temporarily unavailable
	codeClusterNotLeader    = 10009 // JetStream cluster can not handle request
	codeStreamOffline       = 10118 // stream is offline
	codeLastSeqNotReady     = 10163 // expected last sequence per subject temporarily unavailable
	codeStreamOfflineReason = 10194 // stream is offline: {err}
)

// ValidateIDs reports whether tenant and session can be subject tokens; the
// error wraps ErrInvalidID.
func ValidateIDs(tenant, session string) error {
	if !events.ValidID(tenant) {
		return fmt.Errorf("%w: tenant %q: use 1..128 letters, digits, '_' or '-'", ErrInvalidID, tenant)
	}
	if !events.ValidID(session) {
		return fmt.Errorf("%w: session %q: use 1..128 letters, digits, '_' or '-'", ErrInvalidID, session)
	}
	return nil
}

// Log is the JetStream event log. It is safe for concurrent use; Close ends
// its Watch goroutines.
type Log struct {
	js   jetstream.JetStream
	nc   *nats.Conn
	cfg  config
	api  string // JetStream API prefix, with its trailing dot
	info *jetstream.StreamInfo

	// ackPrefix starts the server's acknowledgement of a message stored
	// on the stream (ack.go).
	ackPrefix []byte

	mu     sync.Mutex
	pos    map[string]position // tenant.session → last known position
	closed bool

	tips *snapTips // the snapshots' tips (snapcache.go)

	refs payloads // the object store of payloads stored by reference (refs.go)

	// Group commit (group.go): the committer's queue, nil when off; the
	// appends in flight; the group commits stored.
	group    chan groupItem
	inflight atomic.Int64
	groups   atomic.Int64

	ctx    context.Context // ends Watch goroutines on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ events.Log = (*Log)(nil)

// position is where a session's last event is: its per-session Seq and its
// stream sequence, which the append guard needs.
type position struct {
	seq, sseq uint64
}

// New creates the event stream, or updates it to this configuration, and
// returns a Log on it. The stream is file-backed with limits retention,
// direct gets and atomic batches allowed. It fails with ErrInvalidOption for
// a bad option, or the server's error (atomic batches need nats-server 2.12).
func New(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Log, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	l := &Log{js: js, nc: js.Conn(), cfg: cfg, api: jsensure.APIPrefix(js), pos: map[string]position{}, tips: newSnapTips(cfg.snapCache),
		ackPrefix: ackPrefix(cfg.stream)}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	s, err := ensureStream(ctx, js, jetstream.StreamConfig{
		Name:               cfg.stream,
		Description:        "callsheet event log",
		Subjects:           []string{cfg.prefix + ".>"},
		Storage:            jetstream.FileStorage,
		Retention:          jetstream.LimitsPolicy,
		Replicas:           cfg.replicas,
		Duplicates:         cfg.duplicates,
		AllowDirect:        true,
		AllowAtomicPublish: true,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: create stream %s: %w", cfg.stream, err)
	}
	l.info = s.CachedInfo()
	if err := l.ensureSnapshots(ctx); err != nil {
		return nil, err
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if cfg.group > 0 {
		l.group = make(chan groupItem, groupQueue)
		l.wg.Add(1)
		go l.commitGroups()
	}
	return l, nil
}

// Stream returns the name of the event stream.
func (l *Log) Stream() string { return l.cfg.stream }

// Close stops every Watch and waits until their goroutines have ended. The
// Log must not be used afterwards; the connection stays open (the caller
// owns it).
func (l *Log) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	return nil
}

func (l *Log) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.cfg.timeout)
}

// sessionFilter is the subject filter of every event of one session.
func (l *Log) sessionFilter(tenant, session string) string {
	return l.cfg.prefix + "." + tenant + "." + session + ".>"
}

func (l *Log) logSubject(tenant, session string) string {
	return l.cfg.prefix + "." + tenant + "." + session + ".log"
}

func sessionKey(tenant, session string) string { return tenant + "." + session }

// cached returns the last position this Log knows for a session.
func (l *Log) cached(key string) (position, bool) {
	l.mu.Lock()
	p, ok := l.pos[key]
	l.mu.Unlock()
	return p, ok
}

// remember records a session position. Stream sequences of one session only
// grow, so an older position never overwrites a newer one, whatever order
// concurrent appends and reads finish in.
func (l *Log) remember(key string, p position) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.pos[key]; ok {
		if p.sseq > old.sseq {
			l.pos[key] = p
		}
		return
	}
	if len(l.pos) >= l.cfg.cacheSize {
		for k := range l.pos { // evict an arbitrary entry: a miss only costs a lookup
			delete(l.pos, k)
			break
		}
	}
	l.pos[key] = p
}

// Append stores evs atomically and in order, guarded on the server by the
// session's last stream sequence (see the package doc). It returns an error
// wrapping ErrInvalidID or ErrInvalidEvent for bad input, events.ErrConflict
// when the session's last stored Seq is not expectedLast (or an event id is
// already stored elsewhere in the session), and nil when evs were already
// stored by an earlier attempt.
func (l *Log) Append(ctx context.Context, tenant, session string, expectedLast uint64, evs []events.Event) error {
	if err := ValidateIDs(tenant, session); err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	msgs, ends, refs, pooled, err := l.encode(tenant, session, expectedLast, evs)
	if err != nil {
		return err
	}
	stored := false
	defer func() {
		// Only once stored: a failed publish may have left the messages
		// with the group committer, which may still send them.
		if stored {
			putPacked(pooled)
		}
	}()
	if len(msgs) > MaxAppend && !l.cfg.sequential {
		return fmt.Errorf("%w: %d events in %d messages in one append to %s/%s: an atomic append holds at most %d messages", ErrInvalidEvent, len(evs), len(msgs), tenant, session, MaxAppend)
	}
	if l.cfg.writer != "" {
		for _, m := range msgs {
			m.Header[WriterHeader] = []string{l.cfg.writer}
		}
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	// Payloads stored by reference go first: a message never names an
	// object that is not there (refs.go).
	if err := l.putRefs(ctx, refs); err != nil {
		return fmt.Errorf("append to %s/%s after seq %d: %w", tenant, session, expectedLast, err)
	}

	key, filter := sessionKey(tenant, session), l.sessionFilter(tenant, session)
	guard, ok, err := l.guard(ctx, key, filter, expectedLast)
	if err != nil {
		return fmt.Errorf("append to %s/%s: %w", tenant, session, err)
	}
	if !ok {
		return l.settle(ctx, tenant, session, expectedLast, evs, nil)
	}
	if len(msgs) > 1 && l.cfg.sequential {
		err := l.appendSequential(ctx, tenant, session, expectedLast, evs, msgs, ends, guard)
		stored = err == nil
		return err
	}
	setGuard(msgs[0], guard, filter)
	ack, err := l.publish(ctx, key, msgs)
	if err != nil {
		if refused(err) {
			return l.settle(ctx, tenant, session, expectedLast, evs, err)
		}
		return fmt.Errorf("append to %s/%s after seq %d: %w", tenant, session, expectedLast, err)
	}
	if ack.Duplicate {
		// The guard passed but the server already had an id: the events are
		// stored elsewhere in the session, or the caller reused an id.
		return l.settle(ctx, tenant, session, expectedLast, evs, errors.New("duplicate message id"))
	}
	l.remember(key, position{seq: evs[len(evs)-1].Seq, sseq: ack.Sequence})
	stored = true
	return nil
}

// appendSequential publishes msgs one by one, each guarded on the stream
// sequence of the one before (WithSequentialAppends).
func (l *Log) appendSequential(ctx context.Context, tenant, session string, expectedLast uint64, evs []events.Event, msgs []*nats.Msg, ends []int, guard uint64) error {
	key, filter := sessionKey(tenant, session), l.sessionFilter(tenant, session)
	for i, m := range msgs {
		setGuard(m, guard, filter)
		ack, err := l.publish(ctx, key, []*nats.Msg{m})
		if err != nil {
			if refused(err) {
				return l.settle(ctx, tenant, session, expectedLast, evs, err)
			}
			return fmt.Errorf("append to %s/%s after seq %d (event %d of %d): %w", tenant, session, expectedLast, i+1, len(evs), err)
		}
		if ack.Duplicate {
			return l.settle(ctx, tenant, session, expectedLast, evs, errors.New("duplicate message id"))
		}
		guard = ack.Sequence
		l.remember(key, position{seq: evs[ends[i]].Seq, sseq: ack.Sequence})
	}
	return nil
}

func setGuard(m *nats.Msg, streamSeq uint64, filter string) {
	m.Header[hdrExpLastSubj] = []string{strconv.FormatUint(streamSeq, 10)}
	m.Header[hdrExpLastSubjTo] = []string{filter}
}

// encode checks evs and packs them into messages on the session's log
// subject, each of at most maxPacked bytes. Fewer messages is fewer round
// trips and, with SyncAlways, fewer fsyncs: a file-backed single replica
// syncs each message on its own.
// A message's id is its first event's id, so a retried append packs and
// de-duplicates the same way. ends[i] is the index in evs of message i's last
// event. An event larger than the reference threshold is packed as a stub,
// and its payload is returned in refs, to be stored before the messages
// (refs.go). pooled, when not nil, is the packBufs buffer holding the first
// message of several events: the caller puts it back (putPacked) once no
// one can send the messages any more.
func (l *Log) encode(tenant, session string, expectedLast uint64, evs []events.Event) (msgs []*nats.Msg, ends []int, refs []pendingRef, pooled *[]byte, err error) {
	// run is the events of the message being packed; a one-call turn's
	// append fits the array.
	var runs [8]json.RawMessage
	run := runs[:0]
	runStart := 0
	flush := func(end int) {
		if len(run) == 0 {
			return
		}
		var data []byte
		if len(run) == 1 {
			data = run[0]
		} else if pooled == nil {
			pooled = packBufs.Get().(*[]byte)
			*pooled = pack((*pooled)[:0], run)
			data = *pooled
		} else {
			data = pack(nil, run)
		}
		msgs = append(msgs, &nats.Msg{Subject: l.logSubject(tenant, session), Data: data, Header: nats.Header{hdrMsgID: []string{evs[runStart].ID}}})
		ends = append(ends, end)
		run, runStart = run[:0], end+1
	}
	size, threshold, limit := 0, l.refThreshold(), l.packLimit()
	for i, ev := range evs {
		want := expectedLast + 1 + uint64(i)
		switch {
		case ev.Tenant != tenant || ev.Session != session:
			return nil, nil, nil, nil, fmt.Errorf("%w: event %d (%s) belongs to %s/%s, not %s/%s", ErrInvalidEvent, i, ev.ID, ev.Tenant, ev.Session, tenant, session)
		case ev.Seq != want:
			return nil, nil, nil, nil, fmt.Errorf("%w: event %d (%s) of %s/%s has seq %d, want %d (expected last %d)", ErrInvalidEvent, i, ev.ID, tenant, session, ev.Seq, want, expectedLast)
		case ev.ID == "" || ev.Type == "":
			return nil, nil, nil, nil, fmt.Errorf("%w: event %d of %s/%s (seq %d) has no id or type", ErrInvalidEvent, i, tenant, session, ev.Seq)
		}
		// The event as events.Marshal encodes it: for an event the session
		// actor made with events.Encode, the bytes it encoded then.
		var data []byte
		if len(ev.Data) <= threshold { // else it goes by reference: skip encoding it whole
			if data, err = events.Marshal(ev); err != nil {
				return nil, nil, nil, nil, fmt.Errorf("%w: event %s of %s/%s: %v", ErrInvalidEvent, ev.ID, tenant, session, err)
			}
		}
		if len(ev.Data) > threshold || len(data) > threshold {
			var ref pendingRef
			if data, ref, err = l.byReference(ev); err != nil {
				return nil, nil, nil, nil, fmt.Errorf("%w: event %s of %s/%s: %v", ErrInvalidEvent, ev.ID, tenant, session, err)
			}
			refs = append(refs, ref)
		}
		if len(run) > 0 && size+len(data) > limit {
			flush(i - 1)
			size = 0
		}
		if len(run) == 0 {
			runStart = i
		}
		run = append(run, data)
		size += len(data)
	}
	flush(len(evs) - 1)
	return msgs, ends, refs, pooled, nil
}

// pack appends to dst several events as a JSON array. The events are
// already valid, compact JSON (events.Marshal made them), so they are joined
// rather than marshalled again.
func pack(dst []byte, run []json.RawMessage) []byte {
	n := len(run) + 1
	for _, r := range run {
		n += len(r)
	}
	dst = slices.Grow(dst, n)
	dst = append(dst, '[')
	for i, r := range run {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, r...)
	}
	return append(dst, ']')
}

// packBufs keeps the buffers Append packs events into: one an append (the
// first message of several events), put back once the append is stored,
// when the connection has copied it and no group commit holds it.
var packBufs = sync.Pool{New: func() any { return new([]byte) }}

// putPacked puts back a buffer encode took from packBufs, unless it grew
// past maxPooledPack.
func putPacked(b *[]byte) {
	if b != nil && cap(*b) <= maxPooledPack {
		packBufs.Put(b)
	}
}

// maxPooledPack bounds the buffers packBufs keeps: a larger append's is
// left to the collector.
const maxPooledPack = 64 << 10

// maxPacked bounds the events packed into one message (the server's default
// payload limit is 1 MiB); packLimit lowers it for a server that allows less.
const maxPacked = 512 << 10

// guard returns the stream sequence the append must find as the session's
// last, and false when the session's last event is not expectedLast.
func (l *Log) guard(ctx context.Context, key, filter string, expectedLast uint64) (uint64, bool, error) {
	if expectedLast == 0 {
		return 0, true, nil // the server checks that no message matches filter
	}
	if p, ok := l.cached(key); ok && p.seq == expectedLast {
		return p.sseq, true, nil
	}
	last, found, err := l.lastStored(ctx, filter)
	if err != nil || !found {
		return 0, false, err
	}
	l.remember(key, position{seq: last.ev.Seq, sseq: last.sseq})
	return last.sseq, last.ev.Seq == expectedLast, nil
}

// settle decides a refused append by reading what follows expectedLast:
// success when evs are already stored there (a retry whose first ack was
// lost); when only a prefix of evs is, the session's tail (a sequential
// append cut short), the rest is appended; anything else is ErrConflict.
func (l *Log) settle(ctx context.Context, tenant, session string, expectedLast uint64, evs []events.Event, cause error) error {
	stored, err := l.read(ctx, tenant, session, expectedLast, len(evs))
	if err != nil {
		return fmt.Errorf("append to %s/%s: check after refusal (%v): %w", tenant, session, cause, err)
	}
	k := 0
	for k < len(stored) && stored[k].ev.ID == evs[k].ID && stored[k].ev.Seq == evs[k].Seq {
		k++
	}
	switch {
	case k == len(evs):
		return nil // read remembered the position
	case k > 0 && k == len(stored):
		return l.Append(ctx, tenant, session, expectedLast+uint64(k), evs[k:])
	case cause == nil:
		p, _ := l.cached(sessionKey(tenant, session))
		return fmt.Errorf("%w: %s/%s: last stored seq is %d, append expected %d", events.ErrConflict, tenant, session, p.seq, expectedLast)
	default:
		return fmt.Errorf("%w: %w", events.ErrConflict, cause)
	}
}

// Unavailable reports whether err is the log's servers out of reach for a
// moment rather than a refusal or a fault: no server answered, one timed
// out, the connection is down, or JetStream said "not now" (a stream, its
// leader or its per-subject state moving after a server was lost or came
// back). A caller told so retries; a write that timed out may still have
// been stored, so only a write guarded by an id is retried as it was.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected):
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case codeClusterNotAvail, codeLastSeqNotReady, codeClusterNotLeader, codeClusterNotAssigned, codeStreamOffline, codeStreamOfflineReason:
		return true
	}
	return false
}

// refused reports a server refusal that settle must look at.
func refused(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case codeWrongLastSeq, codeWrongLastSeqConstant, codeDuplicateConflict, codeAtomicBatchDuplicated:
		return true
	}
	return false
}

// pubAck is the server's answer to a publish or a batch commit.
type pubAck struct {
	Error     *jetstream.APIError `json:"error,omitempty"`
	Stream    string              `json:"stream"`
	Sequence  uint64              `json:"seq"`
	Duplicate bool                `json:"duplicate,omitempty"`
	Batch     string              `json:"batch,omitempty"`
	Count     int                 `json:"count,omitempty"`
}

// publishOne publishes m and waits for its acknowledgement, as jetstream's
// PublishMsg does (a request with no responders is tried again twice, 250
// ms apart: a stream's leader moving), reading the answer with decodeAck.
func (l *Log) publishOne(ctx context.Context, m *nats.Msg) (pubAck, error) {
	resp, err := l.nc.RequestMsgWithContext(ctx, m)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		select {
		case <-ctx.Done():
		case <-time.After(jetstream.DefaultPubRetryWait):
		}
		resp, err = l.nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return pubAck{}, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return pubAck{}, err
	}
	return decodeAck(resp.Data, l.ackPrefix, l.cfg.stream)
}

// publishBatch publishes msgs as one atomic batch. Every message but the last
// goes without a reply subject, so the server stages it silently; the commit
// message's reply carries the outcome of the whole batch. A connection keeps
// the order of its publishes, so the server sees 1..n in order.
func (l *Log) publishBatch(ctx context.Context, msgs []*nats.Msg) (pubAck, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	for i, m := range msgs {
		m.Header[hdrBatchID] = []string{id}
		m.Header[hdrBatchSeq] = []string{strconv.Itoa(i + 1)}
		if i < len(msgs)-1 {
			if err := l.nc.PublishMsg(m); err != nil {
				return pubAck{}, fmt.Errorf("publish batch message %d: %w", i+1, err)
			}
		}
	}
	last := msgs[len(msgs)-1]
	last.Header[hdrBatchCommit] = []string{"1"}
	resp, err := l.nc.RequestMsgWithContext(ctx, last)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return pubAck{}, fmt.Errorf("commit batch: no stream answers %s: %w", last.Subject, jetstream.ErrNoStreamResponse)
		}
		return pubAck{}, fmt.Errorf("commit batch: %w", err)
	}
	ack, err := decodeAck(resp.Data, l.ackPrefix, l.cfg.stream)
	if err != nil {
		return pubAck{}, fmt.Errorf("commit batch: %w", err)
	}
	return ack, nil
}
