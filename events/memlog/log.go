package memlog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/callsheet/callsheet/events"
)

// DefaultWatchBuffer is the capacity of a Watch channel.
const DefaultWatchBuffer = 256

// Errors returned by the Log.
var (
	// ErrInvalidEvent is wrapped by errors about events Append cannot store:
	// a wrong tenant, session or sequence, a missing id or type, or an id
	// that is not a token.
	ErrInvalidEvent = errors.New("memlog: invalid event")
	// ErrInvalidOption is wrapped by every error about a bad option.
	ErrInvalidOption = errors.New("memlog: invalid option")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("memlog: closed")
)

// Option configures New.
type Option func(*Log) error

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
	watchBuffer int

	mu       sync.Mutex
	sessions map[string]*session
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
	l := &Log{watchBuffer: DefaultWatchBuffer, sessions: map[string]*session{}}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l, nil
}

// Close stops every Watch and waits until their goroutines have ended. The
// Log must not be used afterwards.
func (l *Log) Close() error {
	l.mu.Lock()
	l.closed = true
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

// Append stores evs after the session's event expectedLast (events.Log).
// A refused append whose events are
// already stored there succeeds; one of which a prefix is stored stores the
// rest. Errors wrap ErrInvalidEvent or events.ErrConflict, or are ErrClosed.
func (l *Log) Append(ctx context.Context, tenant, session string, expectedLast uint64, evs []events.Event) error {
	if err := checkIDs(tenant, session); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
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
	return nil
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
