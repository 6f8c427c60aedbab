package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/projections"
)

// The session search index, kept as the log is written (docs/audit.md,
// "Finding sessions"): every session actor hands the events of each append,
// once they are durable, to the node's indexer (actors.Deps.Durable), which
// folds them into the session's summary (projections.Summary) and files it
// in the index (natslog.Search). Nothing waits for the index: a caller hears
// of its turn when the log holds it. A session is filed at once when it
// gains a marker (a tool, or an outcome, it was not filed under: the
// filters find it at once), and its other changes (counts, its close, a
// signature) at most once per DefaultIndexDelay (1 s): the index costs at
// most one write per active session per second, however fast it appends.
//
// The index is derived, never authoritative. A batch the indexer could not
// take (its queue full), a node that stopped before filing one, or a
// session another node carried on are caught where they show: a batch that
// does not follow the summary on file makes the indexer fold the session
// again from its log, and at start the node compares every session's last
// event with its summary and indexes again what is missing or behind
// (sessions from before the index included).

// Defaults of the indexer.
const (
	// indexQueue bounds the batches waiting for the indexer; one more marks
	// its session for indexing again from the log.
	indexQueue = 4096
	// indexCache bounds the summaries the indexer keeps in memory (a
	// session with changes not yet filed is never dropped).
	indexCache = 10_000
	// indexTimeout bounds one session's filing.
	indexTimeout = 30 * time.Second
	// DefaultIndexDelay is how long a session's changes may wait to be
	// filed: a session is filed at most once per delay (a new marker at
	// once), so the index costs at most one write per active session per
	// second, whatever the rate of its appends. With fsync durability
	// every write is an fsync, competing with the log's.
	DefaultIndexDelay = time.Second
	// indexFlush bounds how long Close lets the indexer file what waits.
	indexFlush = 5 * time.Second
)

type indexBatch struct {
	tenant, session string
	evs             []events.Event
	// reindex folds the session again from its log; evs is empty.
	reindex bool
}

// lastEvent is a session and the Seq of its last event.
type lastEvent struct {
	tenant, session string
	seq             uint64
}

type indexEntry struct {
	sum *projections.Summary
	rev uint64
	// dirty: sum holds changes not yet filed; filed is when it last was.
	dirty bool
	filed time.Time
}

// indexer is the goroutine that keeps the search index; the Node owns it
// (Close stops it, after it has filed what waited, and waits).
type indexer struct {
	search *natslog.Search
	log    *natslog.Log
	logf   func(string, ...any)
	delay  time.Duration
	in     chan indexBatch

	mu   sync.Mutex
	lost map[string]indexBatch // sessions whose batches did not fit in the queue
	kick chan struct{}

	cache  map[string]*indexEntry // the loop's own
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wg     sync.WaitGroup
}

func newIndexer(search *natslog.Search, log *natslog.Log, logf func(string, ...any)) *indexer {
	x := &indexer{search: search, log: log, logf: logf, delay: DefaultIndexDelay, in: make(chan indexBatch, indexQueue),
		lost: map[string]indexBatch{}, kick: make(chan struct{}, 1), cache: map[string]*indexEntry{}, done: make(chan struct{})}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.wg.Add(1)
	go x.run()
	return x
}

// durable takes a batch of durable events from a session actor. It never
// blocks: with the queue full, the session is marked to be indexed again
// from its log.
func (x *indexer) durable(tenant, session string, evs []events.Event) {
	select {
	case x.in <- indexBatch{tenant: tenant, session: session, evs: evs}:
	default:
		x.reindexLater(tenant, session)
	}
}

func (x *indexer) reindexLater(tenant, session string) {
	x.mu.Lock()
	x.lost[key(tenant, session)] = indexBatch{tenant: tenant, session: session, reindex: true}
	x.mu.Unlock()
	select {
	case x.kick <- struct{}{}:
	default:
	}
}

// stop files what waits (for at most indexFlush), then ends the goroutines.
func (x *indexer) stop() {
	close(x.done)
	timer := time.AfterFunc(indexFlush, x.cancel)
	x.wg.Wait()
	timer.Stop()
	x.cancel()
}

func (x *indexer) run() {
	defer x.wg.Done()
	tick := time.NewTicker(max(x.delay/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		var b indexBatch
		select {
		case <-x.done:
			x.drain()
			x.flush(time.Time{})
			return
		case now := <-tick.C:
			x.flush(now)
			continue
		case b = <-x.in:
		case <-x.kick:
			x.mu.Lock()
			lost := x.lost
			x.lost = map[string]indexBatch{}
			x.mu.Unlock()
			for _, lb := range lost {
				x.file(lb)
			}
			continue
		}
		x.file(b)
	}
}

// drain folds what is queued, for the last flush.
func (x *indexer) drain() {
	for {
		select {
		case b := <-x.in:
			x.file(b)
		default:
			return
		}
	}
}

// flush files every session with changes whose last filing is a delay
// old (all of them for a zero now).
func (x *indexer) flush(now time.Time) {
	for _, e := range x.cache {
		if e.dirty && (now.IsZero() || now.Sub(e.filed) >= x.delay) {
			x.put(e)
		}
	}
}

// file folds a batch into its session's summary: it files it at once when
// the session gains a marker (a tool or an outcome it was not filed under:
// the filters find it at once), else marks it to be filed by the next flush
// a delay after its last filing. A batch that does not follow the summary
// it has folds the whole session again from its log.
func (x *indexer) file(b indexBatch) {
	ctx, cancel := context.WithTimeout(x.ctx, indexTimeout)
	defer cancel()
	k := key(b.tenant, b.session)
	e := x.cache[k]
	if e == nil && !b.reindex && len(b.evs) > 0 && b.evs[0].Seq == 1 {
		e = &indexEntry{sum: projections.NewSummary(b.tenant, b.session)}
	}
	if e == nil && !b.reindex {
		sum, rev, ok, err := x.search.Stored(ctx, b.tenant, b.session, time.Time{})
		if err != nil {
			x.logf("node: search index: session %s/%s: %v", b.tenant, b.session, err)
			x.reindexLater(b.tenant, b.session)
			return
		}
		if ok {
			e = &indexEntry{sum: sum, rev: rev, filed: time.Now()}
		}
	}
	marked := false
	if e != nil && !b.reindex {
		marks := len(e.sum.Markers())
		for _, ev := range b.evs {
			if ev.Seq <= e.sum.Seq {
				continue // folded already
			}
			if ev.Seq != e.sum.Seq+1 {
				e = nil // a gap: the log has what the index missed
				break
			}
			if e.sum.Apply(ev) || settles(ev.Type) {
				e.dirty = true
			}
		}
		marked = e != nil && len(e.sum.Markers()) != marks
	}
	if e == nil {
		evs, err := x.log.Read(ctx, b.tenant, b.session, 0)
		if err != nil {
			x.logf("node: search index: reading session %s/%s: %v", b.tenant, b.session, err)
			return
		}
		_, rev, _, err := x.search.Stored(ctx, b.tenant, b.session, time.Time{})
		if err != nil {
			x.logf("node: search index: session %s/%s: %v", b.tenant, b.session, err)
			return
		}
		e, marked = &indexEntry{sum: projections.FoldSummary(b.tenant, b.session, evs), rev: rev, dirty: true}, true
	}
	if len(x.cache) >= indexCache {
		for ck, ce := range x.cache { // evict a filed entry: a miss costs one get
			if !ce.dirty {
				delete(x.cache, ck)
				break
			}
		}
	}
	x.cache[k] = e
	if marked {
		x.put(e)
	}
}

// put files an entry's summary now.
func (x *indexer) put(e *indexEntry) {
	ctx, cancel := context.WithTimeout(x.ctx, indexTimeout)
	defer cancel()
	k := key(e.sum.Tenant, e.sum.Session)
	rev, err := x.search.Put(ctx, e.sum, e.rev)
	e.dirty, e.filed = false, time.Now()
	switch {
	case errors.Is(err, natslog.ErrStaleSummary):
		delete(x.cache, k) // another node's is newer: read it next time
	case err != nil:
		x.logf("node: search index: filing session %s/%s: %v", e.sum.Tenant, e.sum.Session, err)
		delete(x.cache, k)
		x.reindexLater(e.sum.Tenant, e.sum.Session)
	default:
		e.rev = rev
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
			x.logf("node: search index: %v", err)
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
			x.logf("node: search index: indexing %d sessions again from their logs", n)
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
func (n *Node) ListSessions(ctx context.Context, tenant string, q SessionQuery) (SessionPage, error) {
	p, err := n.search.Find(ctx, tenant, q)
	if errors.Is(err, natslog.ErrBadQuery) {
		return natslog.Page{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return p, err
}
