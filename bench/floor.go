package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
)

// rig runs one-call turns: the node, or a floor done directly with JetStream.
type rig interface {
	// prepare readies workers 0..n-1 (their sessions).
	prepare(ctx context.Context, n int) error
	// call runs one call for worker w and waits until it is done. Calls of
	// one worker never overlap.
	call(ctx context.Context, w int) error
	close()
}

var (
	_ rig = (*nodeRig)(nil)
	_ rig = (*minimalFloor)(nil)
	_ rig = (*writesFloor)(nil)
)

// waiters hands completions to the worker waiting for them. Each prepare
// starts a new generation, so a late completion of an earlier one wakes
// nobody.
type waiters struct {
	mu  sync.RWMutex
	gen int
	chs []chan struct{}
}

func (w *waiters) prepare(n int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	w.chs = make([]chan struct{}, n)
	for i := range w.chs {
		w.chs[i] = make(chan struct{}, 1)
	}
	return w.gen
}

// session names worker i of the current generation, as a subject token.
func (w *waiters) session(i int) (string, chan struct{}) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return "g" + strconv.Itoa(w.gen) + "w" + strconv.Itoa(i), w.chs[i]
}

// wake signals the worker a session token names, if it is current.
func (w *waiters) wake(token string) {
	g, i, ok := strings.Cut(strings.TrimPrefix(token, "g"), "w")
	if !ok {
		return
	}
	gen, err1 := strconv.Atoi(g)
	idx, err2 := strconv.Atoi(i)
	w.mu.RLock()
	defer w.mu.RUnlock()
	if err1 != nil || err2 != nil || gen != w.gen || idx >= len(w.chs) {
		return
	}
	select {
	case w.chs[idx] <- struct{}{}:
	default:
	}
}

func (w *waiters) wait(ctx context.Context, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// minimalFloor is the floor docs/facts.md defines for one durable call: publish a
// request (ack), a worker consumes it, runs a no-op, publishes a completion
// (ack), a consumer receives the completion. Two filtered durable pull
// consumers on one limits stream; ~300 B payloads.
type minimalFloor struct {
	srv     *server
	payload []byte
	w       waiters
	ctx     context.Context
	cancel  context.CancelFunc
	work    tracker
	reqs    jetstream.ConsumeContext
	dones   jetstream.ConsumeContext
}

// tracker counts the goroutines consumer callbacks start, and refuses new
// ones once closing: a WaitGroup's Add must not race its Wait.
type tracker struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	stopped bool
}

func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *tracker) done() { t.wg.Done() }

func (t *tracker) stopAndWait() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.wg.Wait()
}

const minimalPayload = 300

func startMinimalFloor(ctx context.Context, durability string) (_ *minimalFloor, err error) {
	srv, err := startServer(durability)
	if err != nil {
		return nil, err
	}
	f := &minimalFloor{srv: srv, payload: []byte(strings.Repeat("x", minimalPayload))}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	if _, err := srv.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "FLOOR", Subjects: []string{"fl.>"}, Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy, Replicas: 1,
	}); err != nil {
		return nil, err
	}
	cons := func(name, filter string) (jetstream.Consumer, error) {
		return srv.js.CreateOrUpdateConsumer(ctx, "FLOOR", jetstream.ConsumerConfig{
			Durable: name, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000,
		})
	}
	req, err := cons("req", "fl.*.req")
	if err != nil {
		return nil, err
	}
	done, err := cons("done", "fl.*.done")
	if err != nil {
		return nil, err
	}
	// The worker: every request gets a goroutine that publishes the
	// completion (waiting for its ack) and acks the request.
	f.reqs, err = req.Consume(func(m jetstream.Msg) {
		if !f.work.add() {
			return
		}
		go func() {
			defer f.work.done()
			tok := strings.Split(m.Subject(), ".")[1]
			if _, err := f.srv.js.Publish(f.ctx, "fl."+tok+".done", f.payload); err != nil {
				return
			}
			_ = m.Ack()
		}()
	}, jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, err
	}
	f.dones, err = done.Consume(func(m jetstream.Msg) {
		f.w.wake(strings.Split(m.Subject(), ".")[1])
		_ = m.Ack()
	}, jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (f *minimalFloor) prepare(_ context.Context, n int) error { f.w.prepare(n); return nil }

func (f *minimalFloor) call(ctx context.Context, w int) error {
	tok, ch := f.w.session(w)
	if _, err := f.srv.js.Publish(ctx, "fl."+tok+".req", f.payload); err != nil {
		return err
	}
	return f.w.wait(ctx, ch)
}

func (f *minimalFloor) close() {
	for _, cc := range []jetstream.ConsumeContext{f.reqs, f.dones} {
		if cc != nil {
			cc.Stop()
		}
	}
	f.cancel()
	f.work.stopAndWait()
	f.srv.close()
}

// writesFloor does the same durable writes as one no-op call of the node, of
// the same sizes and to the same kind of stream and subjects, with plain
// synchronous publishes (no dedup id, no guard) and one pull-consumer
// delivery: the caller publishes the messages up to the request (events
// packed into messages as natslog packs them); a worker consumes the
// request, publishes the rest as one packed message (a read-only, safe call
// records its claim with its outcome), acks, and wakes the caller.
type writesFloor struct {
	srv    *server
	before [][]byte // the caller's writes; the last one is the request
	after  [][]byte // the worker's writes; the first one is the claim
	w      waiters
	ctx    context.Context
	cancel context.CancelFunc
	work   tracker
	reqs   jetstream.ConsumeContext
}

const (
	floorPrefix = "cs.ev"
	floorClass  = "parallel_safe"
)

func startWritesFloor(ctx context.Context, durability string, p *probe) (_ *writesFloor, err error) {
	srv, err := startServer(durability)
	if err != nil {
		return nil, err
	}
	f := &writesFloor{srv: srv}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	split := -1
	var run, after []json.RawMessage
	pack := func(rs []json.RawMessage) []byte {
		if len(rs) == 1 {
			return rs[0]
		}
		b, _ := json.Marshal(rs)
		return b
	}
	for i, ev := range p.writes {
		b, err := events.Marshal(ev)
		if err != nil {
			return nil, err
		}
		switch {
		case split >= 0:
			after = append(after, b)
		case ev.Type == events.TypeToolCallRequested:
			f.before = append(f.before, pack(append(run, b)))
			run = nil
			split = i
		default:
			run = append(run, b)
		}
	}
	if split < 0 || len(after) == 0 {
		return nil, fmt.Errorf("writes floor: the probe's call has no request followed by an outcome: %s", p.describe())
	}
	f.after = [][]byte{pack(after)}
	// The stream and consumer are configured as natslog configures the
	// event log and the request consumer of one class.
	if _, err := srv.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "CALLSHEET", Subjects: []string{floorPrefix + ".>"}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, Replicas: 1, Duplicates: 2 * time.Minute, AllowDirect: true, AllowAtomicPublish: true,
	}); err != nil {
		return nil, err
	}
	cons, err := srv.js.CreateOrUpdateConsumer(ctx, "CALLSHEET", jetstream.ConsumerConfig{
		Durable: "cs-req-" + floorClass, FilterSubject: floorPrefix + ".*.*.req." + floorClass,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxAckPending: 1024,
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxDeliver: -1,
	})
	if err != nil {
		return nil, err
	}
	f.reqs, err = cons.Consume(func(m jetstream.Msg) {
		if !f.work.add() {
			return
		}
		go func() {
			defer f.work.done()
			sess := strings.Split(m.Subject(), ".")[3]
			subj := floorPrefix + "." + tenant + "." + sess + ".log"
			if _, err := f.srv.js.Publish(f.ctx, subj, f.after[0]); err != nil {
				return
			}
			if err := m.Ack(); err != nil {
				return
			}
			f.w.wake(sess)
		}()
	}, jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (f *writesFloor) prepare(_ context.Context, n int) error { f.w.prepare(n); return nil }

func (f *writesFloor) call(ctx context.Context, w int) error {
	sess, ch := f.w.session(w)
	base := floorPrefix + "." + tenant + "." + sess
	for i, b := range f.before {
		subj := base + ".log"
		if i == len(f.before)-1 {
			subj = base + ".req." + floorClass
		}
		if _, err := f.srv.js.Publish(ctx, subj, b); err != nil {
			return err
		}
	}
	return f.w.wait(ctx, ch)
}

func (f *writesFloor) close() {
	if f.reqs != nil {
		f.reqs.Stop()
	}
	f.cancel()
	f.work.stopAndWait()
	f.srv.close()
}
