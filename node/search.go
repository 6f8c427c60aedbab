package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/opsmetrics"
	"github.com/callsheet/callsheet/projections"
)

// The session search index, kept as the log is written (docs/audit.md,
// "Finding sessions"): every session actor hands the events of each append,
// once they are durable, to the node's indexer (actors.Durable), which
// folds them into the session's summary (projections.Summary) and files it
// in the index (natslog.Search). Nothing waits for the index: a caller hears
// of its turn when the log holds it.
//
// Two goroutines: the fold, which only folds in memory (so it keeps up with
// any rate of appends), and the writer, which files what changed: a session
// at most once per DefaultIndexDelay (1 s), its markers (a tool, or an
// outcome, it was not filed under) with its summary, and in all at most
// DefaultIndexRate writes a second, so that with fsync durability the index
// never takes more than a small share of the disk's syncs from the log (a
// new session costs about four writes once: its summary and a marker per
// tool and outcome; then at most one a second). Under more load than that
// the index lags; the log never waits for it.
//
// The index is derived, never authoritative. A batch the fold could not take
// (its queue full), a node that stopped before filing, or a session another
// node carried on are caught where they show: a batch that does not follow
// the summary on file makes the writer fold the session again from its log,
// and at start the node compares every session's last event with its
// summary and indexes again what is missing or behind (sessions from before
// the index included).

// Defaults of the indexer.
const (
	// indexQueue bounds the batches waiting for the fold; one more marks
	// its session for indexing again from the log.
	indexQueue = 4096
	// indexCache bounds the summaries the indexer keeps in memory (a
	// session with changes not yet filed is never dropped).
	indexCache = 10_000
	// indexTimeout bounds one filing.
	indexTimeout = 30 * time.Second
	// DefaultIndexDelay is how long a session's changes (but a new marker)
	// may wait to be filed: a session is filed at most once per delay.
	DefaultIndexDelay = time.Second
	// DefaultIndexRate is the most index writes a node makes per second
	// (summaries, markers and sessions folded again from their logs).
	DefaultIndexRate = 200
	// indexFlush bounds how long Close lets the writer file what waits.
	indexFlush = 5 * time.Second
)

type indexBatch struct {
	tenant, session string
	evs             []events.Event
}

// lastEvent is a session and the Seq of its last event.
type lastEvent struct {
	tenant, session string
	seq             uint64
}

// indexEntry is one session's summary in memory; the indexer's mu guards
// it.
type indexEntry struct {
	sum *projections.Summary
	rev uint64
	// resolved is false until the writer has looked up what the index
	// holds (a session this node did not open): pending holds its events
	// meanwhile.
	resolved bool
	pending  []events.Event
	// dirty: sum holds changes not yet filed; filed is when it was last
	// filed.
	dirty bool
	filed time.Time
	// reindex: fold the session again from its log.
	reindex bool
	// filedSeq is the Seq of the summary on file (or the one folded, when
	// nothing since changed what the index shows).
	filedSeq uint64
}

// lag is how many of the entry's events the index does not show yet.
func (e *indexEntry) lag() int {
	n := len(e.pending)
	if e.sum.Seq > e.filedSeq {
		n += int(e.sum.Seq - e.filedSeq)
	}
	return n
}

// indexer keeps the search index; the Node owns it (Close stops it, once it
// has filed what waited, and waits for its goroutines).
type indexer struct {
	search *natslog.Search
	log    *natslog.Log
	logger *slog.Logger
	delay  time.Duration
	rate   int
	in     chan indexBatch
	wake   chan struct{}

	mu    sync.Mutex
	cache map[cluster.SessionKey]*indexEntry
	ops   *opsmetrics.Set // callsheet_index_lag_events; nil counts nothing
	lag   int             // the entries' lag, summed
	// gone are the deleted sessions, not to be filed again (deletion.go).
	gone *tombstones

	ctx    context.Context // cancelled when the last flush has had its time
	cancel context.CancelFunc
	done   chan struct{} // closed by stop
	folded chan struct{} // closed by fold as it ends
	wg     sync.WaitGroup
}

func newIndexer(search *natslog.Search, log *natslog.Log, logger *slog.Logger) *indexer {
	x := &indexer{search: search, log: log, logger: logger, delay: DefaultIndexDelay, rate: DefaultIndexRate,
		in: make(chan indexBatch, indexQueue), wake: make(chan struct{}, 1), cache: map[cluster.SessionKey]*indexEntry{}, done: make(chan struct{}), folded: make(chan struct{})}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.wg.Add(2)
	go x.fold()
	go x.write()
	return x
}

// Durable takes a batch of durable events from a session actor
// (actors.Durable). It never blocks: with the queue full, the session is
// marked to be indexed again from its log.
func (x *indexer) Durable(tenant, session string, evs []events.Event) {
	select {
	case x.in <- indexBatch{tenant: tenant, session: session, evs: evs}:
	default:
		x.reindexLater(tenant, session)
	}
}

// setOps gives the indexer the gauge of its lag.
func (x *indexer) setOps(ops *opsmetrics.Set) {
	x.mu.Lock()
	x.ops = ops
	x.mu.Unlock()
}

// track runs change on e and keeps the lag up to date; mu is held.
func (x *indexer) track(e *indexEntry, change func()) {
	before := e.lag()
	change()
	x.lag += e.lag() - before
	x.ops.IndexLag(x.lag)
}

// reindexLater marks a session to be folded again from its log.
func (x *indexer) reindexLater(tenant, session string) {
	x.mu.Lock()
	k := sessionKey(tenant, session)
	e := x.cache[k]
	if e == nil {
		e = &indexEntry{sum: projections.NewSummary(tenant, session)}
		x.cache[k] = e
	}
	e.reindex = true
	x.mu.Unlock()
	x.poke()
}

func (x *indexer) poke() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// stop lets the writer file what waits (for at most indexFlush), then ends
// both goroutines.
func (x *indexer) stop() {
	close(x.done)
	timer := time.AfterFunc(indexFlush, x.cancel)
	x.wg.Wait()
	timer.Stop()
	x.cancel()
}

// fold is the goroutine that folds batches into the summaries in memory.
func (x *indexer) fold() {
	defer x.wg.Done()
	defer close(x.folded)
	for {
		select {
		case <-x.done:
			for { // what is queued still counts for the last flush
				select {
				case b := <-x.in:
					x.apply(b)
				default:
					return
				}
			}
		case b := <-x.in:
			x.apply(b)
		}
	}
}

// apply folds one batch. A session this indexer does not know yet waits for
// the writer to look up its summary; a batch that does not follow the
// summary marks the session to be folded again from its log.
func (x *indexer) apply(b indexBatch) {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := sessionKey(b.tenant, b.session)
	e := x.cache[k]
	if e == nil {
		e = &indexEntry{sum: projections.NewSummary(b.tenant, b.session)}
		// A session that starts here needs no lookup.
		e.resolved = len(b.evs) > 0 && b.evs[0].Seq == 1
		x.evict()
		x.cache[k] = e
	}
	if e.reindex || !e.resolved {
		// Folded after the lookup or the read of the log, on what it
		// finds (events it already holds are skipped).
		x.track(e, func() { e.pending = append(e.pending, b.evs...) })
		x.poke()
		return
	}
	x.track(e, func() { x.foldInto(e, b.evs) })
}

// foldInto folds events into a resolved entry; mu is held.
func (x *indexer) foldInto(e *indexEntry, evs []events.Event) {
	for _, ev := range evs {
		if ev.Seq <= e.sum.Seq {
			continue // folded already
		}
		if ev.Seq != e.sum.Seq+1 {
			e.reindex = true // a gap: the log has what the index missed
			x.poke()
			return
		}
		if e.sum.Apply(ev) || settles(ev.Type) {
			e.dirty = true
		}
	}
	if !e.dirty {
		e.filedSeq = e.sum.Seq // nothing the index shows changed
	}
}

// evict drops a filed entry when the cache is full; mu is held.
func (x *indexer) evict() {
	if len(x.cache) < indexCache {
		return
	}
	for k, e := range x.cache { // an arbitrary one: a miss costs one lookup
		if e.resolved && !e.dirty && !e.reindex {
			x.lag -= e.lag()
			delete(x.cache, k)
			return
		}
	}
}

// write is the goroutine that files what changed, at most x.rate writes a
// second: sessions to look up or fold again from their logs first, then
// those whose changes have waited a delay since their last filing.
func (x *indexer) write() {
	defer x.wg.Done()
	tick := time.NewTicker(max(x.delay/4, 10*time.Millisecond))
	defer tick.Stop()
	budget, refill := x.rate, time.Now()
	for {
		stopping := false
		select {
		case <-x.done:
			<-x.folded // the fold has taken what was queued
			stopping = true
		case <-tick.C:
		case <-x.wake:
		}
		for {
			if now := time.Now(); now.Sub(refill) >= time.Second {
				budget, refill = x.rate, now
			}
			if budget <= 0 && !stopping {
				break
			}
			k, job := x.next(stopping)
			if job == nil {
				break
			}
			budget--
			x.held(k, job)
			if x.ctx.Err() != nil {
				return
			}
		}
		if stopping {
			return
		}
	}
}

// held runs job for the session k names unless it was deleted, in which
// case the session is dropped from the cache instead.
func (x *indexer) held(k cluster.SessionKey, job func(cluster.SessionKey)) {
	release, ok := x.gone.hold(k.Tenant, k.Session)
	if !ok {
		x.mu.Lock()
		delete(x.cache, k)
		x.mu.Unlock()
		return
	}
	defer release()
	job(k)
}

// next picks the most urgent job: a lookup or a fold from the log, then
// changes a delay old (any changes when stopping, but no log reads).
func (x *indexer) next(stopping bool) (cluster.SessionKey, func(cluster.SessionKey)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := time.Now()
	var due cluster.SessionKey
	found := false
	for k, e := range x.cache {
		switch {
		case (e.reindex || !e.resolved) && !stopping:
			return k, x.resolve
		case e.dirty && (stopping || now.Sub(e.filed) >= x.delay) && !found:
			due, found = k, true
		}
	}
	if found {
		return due, x.put
	}
	return cluster.SessionKey{}, nil
}

// resolve looks up what the index holds of a session this indexer did not
// know and folds its pending events onto it, or folds the session again
// from its log when they do not follow (or it was marked so).
func (x *indexer) resolve(k cluster.SessionKey) {
	ctx, cancel := context.WithTimeout(x.ctx, indexTimeout)
	defer cancel()
	x.mu.Lock()
	e := x.cache[k]
	tenant, session, reindex := e.sum.Tenant, e.sum.Session, e.reindex
	x.mu.Unlock()
	stored, rev, ok, err := x.search.Stored(ctx, tenant, session, time.Time{})
	if err != nil {
		x.logger.Warn("search index failed", "tenant", tenant, "session", session, "err", err)
		return
	}
	if !reindex {
		x.mu.Lock()
		if !ok {
			stored = projections.NewSummary(tenant, session)
		}
		if len(e.pending) == 0 || e.pending[0].Seq <= stored.Seq+1 {
			x.track(e, func() {
				e.sum, e.rev, e.resolved, e.filed, e.filedSeq = stored, rev, true, time.Now(), stored.Seq
				pending := e.pending
				e.pending = nil
				x.foldInto(e, pending)
			})
			x.mu.Unlock()
			return
		}
		e.reindex = true // its events do not follow the summary on file
		x.mu.Unlock()
	}
	evs, err := x.log.Read(ctx, tenant, session, 0)
	if err != nil {
		x.logger.Warn("search index: reading a session failed", "tenant", tenant, "session", session, "err", err)
		return
	}
	sum := projections.FoldSummary(tenant, session, evs)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.track(e, func() {
		e.sum, e.rev, e.resolved, e.reindex = sum, rev, true, false
		e.dirty, e.filed = true, time.Time{} // filed at once
		pending := e.pending
		e.pending = nil
		x.foldInto(e, pending) // what came while the log was read
	})
}

// put files an entry's summary now.
func (x *indexer) put(k cluster.SessionKey) {
	ctx, cancel := context.WithTimeout(x.ctx, indexTimeout)
	defer cancel()
	x.mu.Lock()
	e := x.cache[k]
	snap, rev := e.sum.Clone(), e.rev
	e.dirty, e.filed = false, time.Now()
	x.mu.Unlock()
	next, err := x.search.Put(ctx, snap, rev)
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case errors.Is(err, natslog.ErrStaleSummary):
		// Another node's is as new: the session is carried on elsewhere.
		// Its next batch here, if any, starts with a lookup.
		x.track(e, func() { e.pending, e.filedSeq = nil, e.sum.Seq })
		delete(x.cache, k)
	case err != nil:
		x.logger.Warn("search index: filing a session failed", "tenant", snap.Tenant, "session", snap.Session, "err", err)
		e.dirty = true
	default:
		x.track(e, func() { e.rev, e.filedSeq = next, max(e.filedSeq, snap.Seq) })
	}
}

// settles reports whether an event of type t ends something the index
// shows: a turn, the session, a signature (or starts the session).
func settles(t events.Type) bool {
	switch t {
	case events.TypeSessionOpened, events.TypeTurnCompleted, events.TypeSessionClosed, events.TypeHeadSigned, events.TypeWorkspaceRewound:
		return true
	}
	return false
}

// reconcile indexes again every session whose summary is missing or behind
// its log's last event (last: "TENANT/SESSION" → Seq), in the background.
func (x *indexer) reconcile(last map[string]lastEvent) {
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		ctx, cancel := context.WithTimeout(x.ctx, 10*time.Minute)
		defer cancel()
		have, err := x.search.Indexed(ctx)
		if err != nil {
			x.logger.Warn("search index: listing what is indexed failed", "err", err)
			return
		}
		n := 0
		for k, s := range last {
			if have[k] < s.seq {
				x.reindexLater(s.tenant, s.session)
				n++
			}
		}
		if n > 0 {
			x.logger.Info("search index: indexing sessions again from their logs", "sessions", n)
		}
	}()
}

// SessionQuery is a search of a tenant's sessions (natslog.Query): since,
// until, tool, outcome, limit and cursor.
type SessionQuery = natslog.Query

// SessionPage is one page of a search, newest first, with the next page's
// cursor (natslog.Page).
type SessionPage = natslog.Page

// MaxSessionLimit is the largest page ListSessions answers.
const MaxSessionLimit = natslog.MaxSearchLimit

// ListSessions answers a search of the tenant's sessions (GET
// /v1/sessions): newest first, filtered by q, one page. Errors wrap
// ErrInvalid for a bad query.
func (n *Node) ListSessions(ctx context.Context, tenant string, q SessionQuery) (_ SessionPage, err error) {
	defer code(&err)
	p, err := n.store.search.Find(ctx, tenant, q)
	if errors.Is(err, natslog.ErrBadQuery) {
		return natslog.Page{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return p, err
}
