package memlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/callsheet/callsheet/events"
)

// Defaults of the options.
const (
	// DefaultAckWait is how long a request handed out may stay unsettled
	// before it is delivered again.
	DefaultAckWait = 30 * time.Second
	// DefaultWatchBuffer is the capacity of a Watch channel.
	DefaultWatchBuffer = 256
)

// Errors returned by the Log.
var (
	// ErrInvalidEvent is wrapped by errors about events Append cannot store:
	// a wrong tenant, session or sequence, a missing id or type, an id that
	// is not a token, or a request with an unknown concurrency class.
	ErrInvalidEvent = errors.New("memlog: invalid event")
	// ErrInvalidOption is wrapped by every error about a bad option.
	ErrInvalidOption = errors.New("memlog: invalid option")
	// ErrClosed is returned after Close, and by a stopped RequestSource.
	ErrClosed = errors.New("memlog: closed")
)

// Option configures New.
type Option func(*Log) error

// WithAckWait sets how long a delivered request may stay unsettled before it
// is delivered again; default DefaultAckWait.
func WithAckWait(d time.Duration) Option {
	return func(l *Log) error {
		if d <= 0 {
			return fmt.Errorf("%w: ack wait %s: use a positive duration", ErrInvalidOption, d)
		}
		l.ackWait = d
		return nil
	}
}

// WithWatchBuffer sets the capacity of Watch channels; default
// DefaultWatchBuffer.
func WithWatchBuffer(n int) Option {
	return func(l *Log) error {
		if n < 1 {
			return fmt.Errorf("%w: watch buffer %d: use at least 1", ErrInvalidOption, n)
		}
		l.watchBuffer = n
		return nil
	}
}

// Log is an events.Log in memory. It is safe for concurrent use; Close ends
// its Watch goroutines.
type Log struct {
	ackWait     time.Duration
	watchBuffer int

	mu       sync.Mutex
	sessions map[string]*session
	queues   map[queueKey]*queue
	closed   bool

	ctx    context.Context // ends Watch goroutines on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ events.Log = (*Log)(nil)

type session struct {
	evs []events.Event
	ids map[string]uint64 // event id → Seq
	// changed is closed (and replaced) on every append: watchers wait on it.
	changed chan struct{}
}

// New returns an empty Log. It fails only for a bad option
// (ErrInvalidOption).
func New(opts ...Option) (*Log, error) {
	l := &Log{ackWait: DefaultAckWait, watchBuffer: DefaultWatchBuffer,
		sessions: map[string]*session{}, queues: map[queueKey]*queue{}}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l, nil
}

// Close stops every Watch and RequestSource and waits until the Watch
// goroutines have ended. The Log must not be used afterwards.
func (l *Log) Close() error {
	l.mu.Lock()
	l.closed = true
	for _, q := range l.queues {
		q.wake()
	}
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	return nil
}

func checkIDs(tenant, session string) error {
	if !events.ValidID(tenant) {
		return fmt.Errorf("%w: tenant %q: use 1..128 letters, digits, '_' or '-'", ErrInvalidEvent, tenant)
	}
	if !events.ValidID(session) {
		return fmt.Errorf("%w: session %q: use 1..128 letters, digits, '_' or '-'", ErrInvalidEvent, session)
	}
	return nil
}

func sessionKey(tenant, session string) string { return tenant + "." + session }

// sessionLocked returns the session's record, creating it; l.mu is held.
func (l *Log) sessionLocked(key string) *session {
	s, ok := l.sessions[key]
	if !ok {
		s = &session{ids: map[string]uint64{}, changed: make(chan struct{})}
		l.sessions[key] = s
	}
	return s
}

// Append stores evs after the session's event expectedLast and dispatches
// the requests among them (events.Log). A refused append whose events are
// already stored there succeeds; one of which a prefix is stored stores the
// rest. Errors wrap ErrInvalidEvent or events.ErrConflict, or are ErrClosed.
func (l *Log) Append(ctx context.Context, tenant, session string, expectedLast uint64, evs []events.Event) error {
	if err := checkIDs(tenant, session); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	reqs := make([]dispatch, 0, 1)
	for i, ev := range evs {
		want := expectedLast + 1 + uint64(i)
		switch {
		case ev.Tenant != tenant || ev.Session != session:
			return fmt.Errorf("%w: event %d (%s) belongs to %s/%s, not %s/%s", ErrInvalidEvent, i, ev.ID, ev.Tenant, ev.Session, tenant, session)
		case ev.Seq != want:
			return fmt.Errorf("%w: event %d (%s) of %s/%s has seq %d, want %d (expected last %d)", ErrInvalidEvent, i, ev.ID, tenant, session, ev.Seq, want, expectedLast)
		case ev.ID == "" || ev.Type == "":
			return fmt.Errorf("%w: event %d of %s/%s (seq %d) has no id or type", ErrInvalidEvent, i, tenant, session, ev.Seq)
		}
		if ev.Type != events.TypeToolCallRequested {
			continue
		}
		var call events.ToolCallRequested
		if err := json.Unmarshal(ev.Data, &call); err != nil {
			return fmt.Errorf("%w: request %s of %s/%s: bad payload: %v", ErrInvalidEvent, ev.ID, tenant, session, err)
		}
		class := string(call.Concurrency)
		if class == "" {
			class = classExclusive // undeclared takes the strictest (docs/spec.md §1)
		}
		if !validClass(class) {
			return fmt.Errorf("%w: request %s of %s/%s: concurrency %q: want %s, %s or %s", ErrInvalidEvent, ev.ID, tenant, session, call.Concurrency, classExclusive, classParallelSafe, classBackground)
		}
		if call.Node != "" && !events.ValidID(call.Node) {
			return fmt.Errorf("%w: request %s of %s/%s: node %q: use letters, digits, '_' or '-'", ErrInvalidEvent, ev.ID, tenant, session, call.Node)
		}
		reqs = append(reqs, dispatch{at: i, key: queueKey{class: class, node: call.Node}, call: call})
	}
	if len(evs) == 0 {
		return nil
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	s := l.sessionLocked(sessionKey(tenant, session))
	last := uint64(len(s.evs))
	from := 0
	if last != expectedLast {
		// Refused by the guard: success if evs (or a prefix of them) are
		// what follows expectedLast, as a retried append finds them.
		if last < expectedLast {
			return fmt.Errorf("%w: %s/%s: last stored seq is %d, append expected %d", events.ErrConflict, tenant, session, last, expectedLast)
		}
		stored := s.evs[expectedLast:]
		k := 0
		for k < len(stored) && k < len(evs) && stored[k].ID == evs[k].ID {
			k++
		}
		switch {
		case k == len(evs):
			return nil
		case k == len(stored):
			from = k // a prefix is stored: store the rest
		default:
			return fmt.Errorf("%w: %s/%s: last stored seq is %d, append expected %d", events.ErrConflict, tenant, session, last, expectedLast)
		}
	}
	for _, ev := range evs[from:] {
		if at, ok := s.ids[ev.ID]; ok {
			return fmt.Errorf("%w: %s/%s: event id %s is already stored at seq %d", events.ErrConflict, tenant, session, ev.ID, at)
		}
	}
	for _, ev := range evs[from:] {
		s.evs = append(s.evs, ev)
		s.ids[ev.ID] = ev.Seq
	}
	close(s.changed)
	s.changed = make(chan struct{})
	for _, d := range reqs {
		if d.at < from {
			continue // dispatched when it was first stored
		}
		l.queueLocked(d.key).push(&delivery{ev: evs[d.at], call: d.call})
	}
	return nil
}

type dispatch struct {
	at   int
	key  queueKey
	call events.ToolCallRequested
}

// Read returns the session's events with Seq > after, in order. Errors wrap
// ErrInvalidEvent for bad ids.
func (l *Log) Read(ctx context.Context, tenant, session string, after uint64) ([]events.Event, error) {
	if err := checkIDs(tenant, session); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.sessions[sessionKey(tenant, session)]
	if !ok || after >= uint64(len(s.evs)) {
		return []events.Event{}, nil
	}
	return append([]events.Event(nil), s.evs[after:]...), nil
}

// Watch delivers the session's events with Seq > after, then live ones, on a
// channel of capacity WithWatchBuffer, until ctx ends or Close is called.
func (l *Log) Watch(ctx context.Context, tenant, session string, after uint64) (<-chan events.Event, error) {
	if err := checkIDs(tenant, session); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	key := sessionKey(tenant, session)
	l.sessionLocked(key)
	l.wg.Add(1)
	l.mu.Unlock()
	out := make(chan events.Event, l.watchBuffer)
	go func() {
		defer l.wg.Done()
		defer close(out)
		last := after
		for {
			l.mu.Lock()
			s := l.sessions[key]
			var next []events.Event
			if last < uint64(len(s.evs)) {
				next = append(next, s.evs[last:]...)
			}
			changed := s.changed
			l.mu.Unlock()
			for _, ev := range next {
				select {
				case out <- ev:
					last = ev.Seq
				case <-ctx.Done():
					return
				case <-l.ctx.Done():
					return
				}
			}
			if len(next) > 0 {
				continue
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			case <-l.ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Concurrency classes, as tool.Concurrency names them.
const (
	classExclusive    = "exclusive"
	classParallelSafe = "parallel_safe"
	classBackground   = "isolated_background"
)

func validClass(c string) bool {
	return c == classExclusive || c == classParallelSafe || c == classBackground
}

type queueKey struct{ class, node string }

// queueLocked returns the queue of a class and node, creating it; l.mu is
// held.
func (l *Log) queueLocked(k queueKey) *queue {
	q, ok := l.queues[k]
	if !ok {
		q = &queue{log: l, inflight: map[*delivery]time.Time{}, changed: make(chan struct{})}
		l.queues[k] = q
	}
	return q
}

// Requests opens a source of the requests dispatched to sub's class and
// node. Every source of one class and node takes from the same queue.
// Errors wrap ErrInvalidOption, or are ErrClosed.
func (l *Log) Requests(ctx context.Context, sub events.Subscription) (events.RequestSource, error) {
	if !validClass(sub.Class) {
		return nil, fmt.Errorf("%w: concurrency class %q: want %s, %s or %s", ErrInvalidOption, sub.Class, classExclusive, classParallelSafe, classBackground)
	}
	if sub.Node != "" && !events.ValidID(sub.Node) {
		return nil, fmt.Errorf("%w: node %q: use letters, digits, '_' or '-'", ErrInvalidOption, sub.Node)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	return &source{q: l.queueLocked(queueKey{class: sub.Class, node: sub.Node}), stopped: make(chan struct{})}, nil
}

// queue holds the requests of one class and node: ready ones in order, and
// those handed out with the time they are due back. Guarded by log.mu.
type queue struct {
	log      *Log
	ready    []*delivery
	inflight map[*delivery]time.Time
	changed  chan struct{}
}

func (q *queue) push(d *delivery) {
	q.ready = append(q.ready, d)
	q.wake()
}

func (q *queue) wake() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// delivery is one request in a queue. Guarded by the queue's log.mu.
type delivery struct {
	ev        events.Event
	call      events.ToolCallRequested
	delivered int
}

type source struct {
	q        *queue
	stopOnce sync.Once
	stopped  chan struct{}
}

// Next hands out the next ready request, or one whose ack wait passed
// without a settlement, waiting until there is one or ctx ends.
func (s *source) Next(ctx context.Context) (events.Request, error) {
	l := s.q.log
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, ErrClosed
		}
		now := time.Now()
		due := time.Time{}
		for d, at := range s.q.inflight {
			if !at.After(now) {
				delete(s.q.inflight, d)
				s.q.ready = append(s.q.ready, d)
			} else if due.IsZero() || at.Before(due) {
				due = at
			}
		}
		if len(s.q.ready) > 0 {
			d := s.q.ready[0]
			s.q.ready = s.q.ready[1:]
			d.delivered++
			s.q.inflight[d] = now.Add(l.ackWait)
			l.mu.Unlock()
			return &request{q: s.q, d: d}, nil
		}
		changed := s.q.changed
		l.mu.Unlock()
		var timer <-chan time.Time
		var t *time.Timer
		if !due.IsZero() {
			t = time.NewTimer(time.Until(due))
			timer = t.C
		}
		var err error
		select {
		case <-changed:
		case <-timer:
		case <-s.stopped:
			err = ErrClosed
		case <-ctx.Done():
			err = fmt.Errorf("next request: %w", ctx.Err())
		}
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return nil, err
		}
	}
}

// Stop ends the source: a Next waiting returns ErrClosed. A memlog source
// holds no request it has not handed out.
func (s *source) Stop() { s.stopOnce.Do(func() { close(s.stopped) }) }

type request struct {
	q *queue
	d *delivery
}

func (r *request) Event() events.Event             { return r.d.ev }
func (r *request) Call() *events.ToolCallRequested { c := r.d.call; return &c }

// settle takes the request out of flight; it reports false when it was not
// in flight (already settled, or due back and redelivered).
func (r *request) settle() bool {
	if _, ok := r.q.inflight[r.d]; !ok {
		return false
	}
	delete(r.q.inflight, r.d)
	return true
}

func (r *request) Ack() error {
	r.q.log.mu.Lock()
	defer r.q.log.mu.Unlock()
	r.settle()
	return nil
}

func (r *request) Term() error { return r.Ack() }

func (r *request) Nak(delay time.Duration) error {
	l := r.q.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if !r.settle() {
		return nil
	}
	if delay <= 0 {
		r.q.push(r.d)
		return nil
	}
	time.AfterFunc(delay, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		r.q.push(r.d)
	})
	return nil
}

func (r *request) InProgress() error {
	r.q.log.mu.Lock()
	defer r.q.log.mu.Unlock()
	if _, ok := r.q.inflight[r.d]; ok {
		r.q.inflight[r.d] = time.Now().Add(r.q.log.ackWait)
	}
	return nil
}
