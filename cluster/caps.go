package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// CapsBucket is the KV bucket of the fleet-wide caps' slots: key
// "<scope>.<tool>.<i>" for slot i of a tool's cap, its value the Holder.
const CapsBucket = "cs_caps"

// CapGrace is how long a slot outlives the deadline of the call that holds
// it: the node kills a call's process group at its deadline and drains its
// output within seconds, and a sandboxed call's namespace ends by itself
// just after the deadline (sandbox.Run.Deadline), even on a node that is
// stopped.
const CapGrace = 5 * time.Second

// Holder is what a held slot says about the call that holds it.
type Holder struct {
	Node    string `json:"node"`
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	Call    string `json:"call"`
	Attempt int    `json:"attempt"`
	// Until is the latest the slot is held without a renewal.
	Until time.Time `json:"until"`
}

// Caps hands out the slots of tools' fleet-wide caps (docs/spec.md §7): at
// most N calls of a tool run at once across every session and node of a
// tenant (or of the fleet). A slot is a KV key, created once (kv.Create
// succeeds for one caller only) with a per-message TTL, and deleted when its
// call ends. What holds a slot, and for how long:
//
//   - a call with a deadline holds its slot until the deadline plus
//     CapGrace, whatever happens to its node: a node that dies or is
//     stopped past its lease leaves the slot held for as long as its call
//     could still be running, so the cap is never exceeded;
//   - a call without a deadline (a person's answer) holds it for LeaseTTL,
//     renewed while it runs: a stopped node runs nothing in-process, so
//     its slot may lapse with its lease.
//
// It watches the bucket with one goroutine it owns (ended by Close), to
// wake waiters when a slot frees. Safe for concurrent use.
type Caps struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	lease  time.Duration
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	freed chan struct{} // closed and replaced whenever a slot frees
}

// OpenCaps opens the caps bucket. lease is how long a slot of a call without
// a deadline lives between renewals (the fleet's lease TTL).
func OpenCaps(ctx context.Context, js jetstream.JetStream, replicas int, lease time.Duration) (*Caps, error) {
	kv, err := ensureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:         CapsBucket,
		Description:    "callsheet fleet-wide caps: one key per held slot",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       max(replicas, 1),
		LimitMarkerTTL: max(lease, time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: caps bucket %s: %w", CapsBucket, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx, jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: watch %s: %w", CapsBucket, err)
	}
	c := &Caps{js: js, kv: kv, lease: max(lease, MinLeaseTTL), w: w, cancel: cancel, done: make(chan struct{}), freed: make(chan struct{})}
	go c.run()
	return c, nil
}

func (c *Caps) run() {
	defer close(c.done)
	for e := range c.w.Updates() {
		if e == nil || e.Operation() == jetstream.KeyValuePut {
			continue
		}
		c.mu.Lock()
		close(c.freed)
		c.freed = make(chan struct{})
		c.mu.Unlock()
	}
}

// Close stops watching; held slots stay held until released or expired.
func (c *Caps) Close() {
	c.cancel()
	_ = c.w.Stop()
	<-c.done
}

// Scope is the key prefix of a cap's slots: per tenant ("tenant") or one for
// the whole fleet ("fleet").
func Scope(scope, tenant string) string {
	if scope == "fleet" {
		return "fleet"
	}
	return "t_" + tenant
}

// Slot is one held slot of a fleet-wide cap. Its methods are safe for
// concurrent use.
type Slot struct {
	c   *Caps
	key string

	mu       sync.Mutex
	rev      uint64
	holder   Holder
	deadline time.Time
	stop     chan struct{}
	stopped  chan struct{}
	gone     bool
	bound    bool
}

// Key names the slot.
func (s *Slot) Key() string { return s.key }

// Deadline is when the call holding the slot must have ended (zero for a
// call without a timeout).
func (s *Slot) Deadline() time.Time { return s.deadline }

// Until is the latest the slot is held without a renewal: a call's processes
// that run no later than it stay within the cap.
func (s *Slot) Until() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder.Until
}

// BindMargin is how long before the slot's key may lapse the processes of a
// bound call must have been ended (Bind): the server's expiry of a key has
// a granularity of its own.
const BindMargin = time.Second

// Bind makes a slot taken for a deadline lapse with this node's renewals
// instead: renewed every fifth of the lease TTL for the lease TTL, so that
// when the node dies or stops, the slot frees within the lease, not at the
// call's deadline plus CapGrace. The caller must then end the call's
// processes by the moments Bind hands set, even if the node is stopped:
// sandbox.Reaper does. set is called, before the first renewal, with a
// moment no later than the slot's end, however that renewal goes, and after
// each renewal that succeeded with the next such moment (the renewal's send
// time plus the TTL less BindMargin); a renewal that fails moves nothing,
// so a node cut off from the servers has its call ended before its slot
// lapses. Bind reports false, and changes nothing, for a slot without a
// deadline (it is renewed already), a slot bound already or released.
func (s *Slot) Bind(set func(until time.Time)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone || s.bound || s.deadline.IsZero() {
		return false
	}
	s.bound = true
	s.stop, s.stopped = make(chan struct{}), make(chan struct{})
	go s.renewBound(set)
	return true
}

// renewBound renews a bound slot until Release (Bind).
func (s *Slot) renewBound(set func(time.Time)) {
	defer close(s.stopped)
	ttl := s.c.lease.Truncate(time.Second)
	if ttl < s.c.lease {
		ttl += time.Second
	}
	tick := time.NewTicker(s.c.lease / 5)
	defer tick.Stop()
	// Before the first renewal: no later than the key's end, whether the
	// renewal is stored (it ends a TTL after it is sent) or not (the
	// deadline's end is later still).
	set(time.Now().Add(ttl - BindMargin))
	for {
		if send, ok := s.renewOnce(ttl); ok {
			set(send.Add(ttl - BindMargin))
		}
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

// renewOnce stores the slot again for ttl from now, guarded on the
// revision this slot last stored, and reports when it sent the renewal
// that was stored. A renewal refused because an earlier one was stored
// after its answer was given up on (the key moved, still to this holder)
// is sent again from that revision: it is this slot's own move, not a loss.
func (s *Slot) renewOnce(ttl time.Duration) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for retried := false; ; retried = true {
		send := time.Now()
		h := s.holder
		h.Until = send.Add(ttl).UTC()
		value, _ := json.Marshal(h)
		ctx, cancel := context.WithTimeout(context.Background(), s.c.lease/5)
		ack, err := s.c.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + CapsBucket + "." + s.key, Data: value},
			jetstream.WithExpectLastSequencePerSubject(s.rev), jetstream.WithMsgTTL(ttl))
		cancel()
		if err == nil {
			s.rev, s.holder = ack.Sequence, h
			return send, true
		}
		if retried || !wrongLastSequence(err) || !s.adoptStored() {
			return time.Time{}, false
		}
	}
}

// adoptStored takes the key's stored revision as this slot's when it still
// names this slot's holder (a renewal stored after its answer was given up
// on). Called with s.mu held.
func (s *Slot) adoptStored() bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.c.lease/5)
	defer cancel()
	e, err := s.c.kv.Get(ctx, s.key)
	if err != nil {
		return false
	}
	var h Holder
	if json.Unmarshal(e.Value(), &h) != nil || h.Node != s.holder.Node || h.Tenant != s.holder.Tenant ||
		h.Session != s.holder.Session || h.Call != s.holder.Call || h.Attempt != s.holder.Attempt {
		return false
	}
	s.rev = e.Revision()
	return true
}

// Acquire waits until one of the n slots of tool's cap in scope is free and
// takes it for h (h.Until is set here), or until ctx ends. A call with a
// timeout must end by the slot's Deadline (now plus timeout, when the slot
// is taken), and holds the slot until Deadline plus CapGrace; a call
// without (timeout 0) holds it for the lease TTL, renewed until Release.
// Errors are ctx's, or the server's.
func (c *Caps) Acquire(ctx context.Context, scope, tool string, n int, timeout time.Duration, h Holder) (*Slot, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: fleet cap %d of %s: use at least 1", ErrInvalidOption, n, tool)
	}
	renew := timeout <= 0
	for {
		c.mu.Lock()
		freed := c.freed
		c.mu.Unlock()
		now := time.Now()
		ttl, deadline := c.lease, time.Time{}
		if !renew {
			ttl, deadline = timeout+CapGrace, now.Add(timeout)
		}
		h.Until = now.Add(ttl).UTC()
		value, _ := json.Marshal(h)
		first := rand.IntN(n)
		for k := range n {
			key := scope + "." + tool + "." + strconv.Itoa((first+k)%n)
			rev, err := c.kv.Create(ctx, key, value, jetstream.KeyTTL(ttl.Round(time.Second)+time.Second))
			if err == nil {
				s := &Slot{c: c, key: key, rev: rev, holder: h, deadline: deadline, stop: make(chan struct{}), stopped: make(chan struct{})}
				if renew {
					go s.renew()
				} else {
					close(s.stopped)
				}
				return s, nil
			}
			if !taken(err) {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("cluster: take a slot of %s's fleet cap: %w", tool, err)
			}
		}
		// All held: wait for one to free (a release, or a TTL running out;
		// the bucket's markers make both visible), and look again at least
		// every second in case a wake-up was missed.
		select {
		case <-freed:
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// renew keeps a slot without a deadline alive while its call runs.
func (s *Slot) renew() {
	defer close(s.stopped)
	tick := time.NewTicker(s.c.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.renewOnce(s.c.lease + time.Second)
	}
}

// Release frees the slot, unless it lapsed and another call holds it now.
// Safe to call more than once.
func (s *Slot) Release(ctx context.Context) error {
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return nil
	}
	s.gone = true
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	stopped := s.stopped
	s.mu.Unlock()
	<-stopped
	s.mu.Lock()
	rev := s.rev
	s.mu.Unlock()
	err := s.c.kv.Delete(ctx, s.key, jetstream.LastRevision(rev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("cluster: release slot %s: %w", s.key, err)
	}
	return nil
}

// Held lists the holders of the slots of tool's cap in scope now (for
// tests and metrics).
func (c *Caps) Held(ctx context.Context, scope, tool string, n int) ([]Holder, error) {
	var out []Holder
	for i := range n {
		e, err := c.kv.Get(ctx, scope+"."+tool+"."+strconv.Itoa(i))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var h Holder
		if json.Unmarshal(e.Value(), &h) == nil {
			out = append(out, h)
		}
	}
	return out, nil
}
