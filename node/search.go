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
// of its turn when the log holds it, and the index follows within
// milliseconds. A session is filed when it gains a marker (a tool or an
// outcome it was not filed under) and when a turn, the session or a
// signature settles: its counts are those of its last completed turn, while
// its markers follow every append.
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
	// indexCache bounds the summaries the indexer keeps in memory.
	indexCache = 10_000
	// indexTimeout bounds one session's filing.
	indexTimeout = 30 * time.Second
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
}

// indexer is the goroutine that keeps the search index; the Node owns it
// (Close stops it and waits).
type indexer struct {
	search *natslog.Search
	log    *natslog.Log
	logf   func(string, ...any)
	in     chan indexBatch

	mu   sync.Mutex
	lost map[string]indexBatch // sessions whose batches did not fit in the queue
	kick chan struct{}

	cache  map[string]*indexEntry // the loop's own
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newIndexer(search *natslog.Search, log *natslog.Log, logf func(string, ...any)) *indexer {
	x := &indexer{search: search, log: log, logf: logf, in: make(chan indexBatch, indexQueue),
		lost: map[string]indexBatch{}, kick: make(chan struct{}, 1), cache: map[string]*indexEntry{}}
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

func (x *indexer) stop() {
	x.cancel()
	x.wg.Wait()
}

func (x *indexer) run() {
	defer x.wg.Done()
	for {
		var b indexBatch
		select {
		case <-x.ctx.Done():
			return
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
		// Everything queued meanwhile, by session, in order: a burst of
		// appends is one filing per session.
		batches := map[string]*indexBatch{key(b.tenant, b.session): &b}
		order := []string{key(b.tenant, b.session)}
	drain:
		for len(order) < 256 {
			select {
			case nb := <-x.in:
				k := key(nb.tenant, nb.session)
				if p, ok := batches[k]; ok {
					p.evs = append(p.evs, nb.evs...)
					continue
				}
				batches[k], order = &nb, append(order, k)
			default:
				break drain
			}
		}
		for _, k := range order {
			x.file(*batches[k])
		}
	}
}

// file folds a batch into its session's summary and files it when it
// changed, or folds the whole session again when the batch does not follow
// the summary it has.
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
			e = &indexEntry{sum: sum, rev: rev}
		}
	}
	// Filed when the session gains a marker (a tool or an outcome it was
	// not filed under: the filters find it at once), and when a turn, the
	// session or a signature settles; counts in between wait for the
	// turn's end, so a one-call turn costs two index writes, not one per
	// append.
	changed := false
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
			e.sum.Apply(ev)
			changed = changed || settles(ev.Type)
		}
		changed = changed || (e != nil && len(e.sum.Markers()) != marks)
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
		e, changed = &indexEntry{sum: projections.FoldSummary(b.tenant, b.session, evs), rev: rev}, true
	}
	if len(x.cache) >= indexCache {
		for k := range x.cache { // evict an arbitrary entry: a miss costs one get
			delete(x.cache, k)
			break
		}
	}
	x.cache[k] = e
	if !changed {
		return
	}
	rev, err := x.search.Put(ctx, e.sum, e.rev)
	switch {
	case errors.Is(err, natslog.ErrStaleSummary):
		delete(x.cache, k) // another node's is newer: read it next time
	case err != nil:
		x.logf("node: search index: filing session %s/%s: %v", b.tenant, b.session, err)
		delete(x.cache, k)
		x.reindexLater(b.tenant, b.session)
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
