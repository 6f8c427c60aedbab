package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/nats-io/nats.go"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// Deleting a session (docs/spec.md §10, "Deletion"): DeleteSession closes
// the session (cancelling a running turn first), stops its actor and
// everything that writes what is derived from its log, records a signed
// receipt in the tenant's deletions log (once per session, fleet-wide),
// then removes the session from every store. The receipt comes first: a
// deletion cut short (a crash) is finished by the next DELETE or the
// retention sweep, and until then nothing of the session is served.

// Deletion is what DeleteSession did: the receipt, as stored in the
// tenant's deletions log, and what was removed from each store.
type Deletion struct {
	// Receipt is the stored receipt (events.Deletion, canonical JSON).
	Receipt json.RawMessage `json:"receipt"`
	// Finished: the receipt was recorded before (a deletion cut short, or
	// one racing this one), and this call finished removing the session.
	Finished bool    `json:"finished,omitempty"`
	Removed  Removed `json:"removed"`
}

// Removed counts what a deletion removed, store by store.
type Removed struct {
	// EventMessages and SnapshotMessages: messages of the event stream
	// (the session's events and requests) and of its snapshot stream.
	EventMessages    uint64 `json:"event_messages"`
	SnapshotMessages uint64 `json:"snapshot_messages"`
	// Payloads stored by reference (cs_payloads), and their bytes.
	Payloads     int   `json:"payloads"`
	PayloadBytes int64 `json:"payload_bytes"`
	// Objects of cs_outputs: kept full outputs, large images and file
	// pre-images, and their bytes.
	Objects     int   `json:"objects"`
	ObjectBytes int64 `json:"object_bytes"`
	// SearchKeys: the summary and markers of the search index (cs_search).
	SearchKeys uint64 `json:"search_keys"`
	// Index, Owners and Checkpoint: the session's entries in cs_sessions,
	// cs_owners and cs_checkpoints.
	Index      bool `json:"index"`
	Owners     bool `json:"owners"`
	Checkpoint bool `json:"checkpoint"`
	// Workspace says what became of the workspace directory: "removed",
	// "absent", or why it was kept.
	Workspace string `json:"workspace"`
}

// deleteRetry is how long DeleteSession waits between tries to close a
// session whose turn it cancelled.
const deleteRetry = 50 * time.Millisecond

// DeleteSession deletes tenant's session on behalf of by (the principal,
// or events.RetentionPrincipal) for reason (events.DeletedOnRequest or
// DeletedByRetention). It fails with a *NotOwnerError when another node
// owns the session (the API forwards the call there), with ErrNotFound when
// there is no such session (saying when it was deleted, if it was), and
// otherwise only when a store fails; running it again then finishes the
// deletion.
func (n *Node) DeleteSession(ctx context.Context, tenant, session, by, reason string) (_ Deletion, err error) {
	defer code(&err)
	// The index, not the cache or the tombstones: a deletion this node
	// began and could not finish is finished by the next.
	if _, err := n.indexRecord(ctx, tenant, session); err != nil {
		if errors.Is(err, natslog.ErrInvalidID) {
			return Deletion{}, fmt.Errorf("%w: session %q of tenant %q", ErrNotFound, session, tenant)
		}
		if !errors.Is(err, events.ErrNotFound) {
			return Deletion{}, err
		}
		if st, ok, _ := n.deletions.Get(ctx, tenant, session); ok {
			// Deleted: make sure nothing of it is left (a deletion cut
			// short after its index entry went), then say when it was.
			n.forget(tenant, session)
			if _, err := n.purgeSession(ctx, tenant, session); err != nil {
				return Deletion{}, err
			}
			return Deletion{}, fmt.Errorf("%w: session %q of tenant %q was deleted %s (GET /v1/deletions)", ErrNotFound, session, tenant, describeReceipt(st.Data))
		}
		return Deletion{}, fmt.Errorf("%w: session %q of tenant %q", ErrNotFound, session, tenant)
	}
	if st, ok, err := n.deletions.Get(ctx, tenant, session); err != nil {
		return Deletion{}, err
	} else if ok {
		// Recorded before: finish what was cut short.
		n.forget(tenant, session)
		del := Deletion{Receipt: st.Data, Finished: true}
		del.Removed, err = n.purgeSession(ctx, tenant, session)
		return del, err
	}
	if !n.gone.has(tenant, session) {
		if err := n.closeForDeletion(ctx, tenant, session, by); err != nil {
			return Deletion{}, err
		}
		// From here on nothing of the session is served here, and
		// nothing derived from its log is written.
		n.forget(tenant, session)
	}
	rec, err := n.receipt(ctx, tenant, session, by, reason)
	if err != nil {
		return Deletion{}, err
	}
	st, existed, err := n.deletions.Append(ctx, tenant, session, func(prev string, num uint64) ([]byte, error) {
		d := rec
		d.N, d.Prev = num, prev
		return d.Sign(n.signer).Encode(), nil
	})
	if err != nil {
		return Deletion{}, err
	}
	del := Deletion{Receipt: st.Data, Finished: existed}
	del.Removed, err = n.purgeSession(ctx, tenant, session)
	return del, err
}

// closeForDeletion closes the session, cancelling its running turn first
// (and again, until the close lands: a turn can be waiting for its calls
// to settle). Closing a closed session decides nothing.
func (n *Node) closeForDeletion(ctx context.Context, tenant, session, by string) error {
	if last, ok, err := n.store.log.Last(ctx, tenant, session); err != nil {
		return err
	} else if ok && closedBy(last) {
		// Closed: no turn can run. Its actor, wherever it lives, is
		// stopped by forget.
		if owner, _, local := n.Locate(tenant, session); !local {
			return n.fleet.notOwner(session, owner)
		}
		return nil
	}
	for {
		err := n.CloseSession(ctx, tenant, session, "deleted by "+by)
		if err == nil || !errors.Is(err, ErrConflict) {
			return err
		}
		if turn, terr := n.activeTurn(ctx, tenant, session); terr == nil && turn != "" {
			if cerr := n.CancelTurn(ctx, tenant, session, turn, "", "the session is being deleted"); cerr != nil && !errors.Is(cerr, ErrNotFound) {
				return cerr
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(deleteRetry):
		}
	}
}

// activeTurn returns the id of the session's running turn, from its log,
// or "".
func (n *Node) activeTurn(ctx context.Context, tenant, session string) (string, error) {
	evs, err := n.store.log.Read(ctx, tenant, session, 0)
	if err != nil {
		return "", err
	}
	st := core.NewSession(tenant, session)
	for _, ev := range evs {
		if err := st.Apply(ev); err != nil {
			return "", err
		}
	}
	if t := st.Active(); t != nil {
		return t.ID, nil
	}
	return "", nil
}

// receipt is the receipt of a deletion, before its place in the log (N,
// Prev) and its signature: who, when, why, and the log's last event.
func (n *Node) receipt(ctx context.Context, tenant, session, by, reason string) (events.Deletion, error) {
	d := events.Deletion{Kind: events.DeletionKind, Tenant: tenant, Session: session, Deleted: time.Now().UTC(), By: by, Reason: reason, Node: n.opts.Name}
	first, ok, err := n.store.log.First(ctx, tenant, session)
	if err != nil {
		return d, err
	}
	if !ok {
		return d, nil // a session whose log never began (or is gone already)
	}
	last, _, err := n.store.log.Last(ctx, tenant, session)
	if err != nil {
		return d, err
	}
	d.Chain = events.ChainOf(tenant, session, first)
	if d.LastHash, err = d.Chain.Hash(last); err != nil {
		return d, err
	}
	d.LastSeq, d.Opened = last.Seq, first.Time
	if closedBy(last) {
		d.Closed = last.Time
	}
	return d, nil
}

// purgeSession removes the session from every store and its workspace
// (unless another session works in it), and counts what it removed.
func (n *Node) purgeSession(ctx context.Context, tenant, session string) (Removed, error) {
	var r Removed
	rec, recErr := n.indexRecord(ctx, tenant, session)
	p, err := n.store.log.PurgeSession(ctx, tenant, session)
	r.EventMessages, r.SnapshotMessages, r.Payloads, r.PayloadBytes = p.Messages, p.SnapshotMessages, p.Payloads, p.PayloadBytes
	if err != nil {
		return r, err
	}
	objs, err := n.store.objects.DeletePrefix(ctx, tenant+"/"+session+"/")
	for _, o := range objs {
		r.Objects++
		r.ObjectBytes += o.Size
		n.quotas.outputRemoved(o.Name, o.Size)
	}
	if err != nil {
		return r, err
	}
	if n.checkpoints != nil {
		if err := n.checkpoints.store.Delete(ctx, tenant, session); err != nil {
			return r, err
		}
		r.Checkpoint = true
	}
	if n.fleet != nil && n.fleet.owners != nil {
		if err := n.fleet.owners.Delete(ctx, tenant, session); err != nil {
			return r, err
		}
		r.Owners = true
	}
	r.Workspace = "absent"
	if recErr == nil {
		if r.Workspace, err = n.removeWorkspace(ctx, tenant, session, rec.Workspace); err != nil {
			return r, err
		}
	}
	if err := n.store.index.Delete(ctx, tenant, session); err != nil {
		return r, err
	}
	r.Index = recErr == nil
	// The search index last: while the session's summary is there, a
	// deletion cut short is found by the retention sweep and finished
	// (DELETE again finishes it too).
	if r.SearchKeys, err = n.store.search.Forget(ctx, tenant, session); err != nil {
		return r, err
	}
	return r, nil
}

// indexRecord reads the session's index record from the index itself
// (the cache forgets a deleted session).
func (n *Node) indexRecord(ctx context.Context, tenant, session string) (sessionRecord, error) {
	b, err := n.store.index.Get(ctx, tenant, session)
	if err != nil {
		return sessionRecord{}, err
	}
	var rec sessionRecord
	return rec, json.Unmarshal(b, &rec)
}

// removeWorkspace removes the session's workspace directory, through the
// tenant's root (os.Root: nothing outside it is touched, and a link is
// removed, not followed), unless another session of the tenant works in
// it, in a directory inside it, or in one that holds it. It says what
// became of it.
func (n *Node) removeWorkspace(ctx context.Context, tenant, session, name string) (string, error) {
	if name == "" {
		return "absent", nil
	}
	others, err := n.store.index.ListTenant(ctx, tenant)
	if err != nil {
		return "", err
	}
	for _, e := range others {
		if e.Session == session || n.gone.has(tenant, e.Session) {
			continue
		}
		var rec sessionRecord
		if json.Unmarshal(e.Info, &rec) != nil {
			continue
		}
		if overlaps(rec.Workspace, name) {
			return fmt.Sprintf("kept: session %s works in %q", e.Session, rec.Workspace), nil
		}
	}
	root, err := os.OpenRoot(n.ws.tenantRoot(tenant))
	if errors.Is(err, fs.ErrNotExist) {
		return "absent", nil
	}
	if err != nil {
		return "", fmt.Errorf("node: removing workspace %q: %w", name, err)
	}
	defer root.Close()
	if _, err := root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return "absent", nil
	}
	if err := root.RemoveAll(name); err != nil {
		return "", fmt.Errorf("node: removing workspace %q: %w", name, err)
	}
	return "removed", nil
}

// overlaps reports whether workspace names a and b are one directory or
// one holds the other.
func overlaps(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// forget makes this node treat the session as deleted: the tombstone
// (record answers ErrNotFound, nothing derived from its log is written
// again; in-flight writes are waited for), its actor stopped, its cached
// record and workspace handle dropped.
func (n *Node) forget(tenant, session string) {
	n.gone.mark(tenant, session)
	if pid := n.reg.drop(tenant, session); pid != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		<-n.engine.PoisonCtx(ctx, pid).Done()
		cancel()
	}
	n.ws.drop(key(tenant, session))
}

// drop forgets a deleted session's cached record and actor, and returns
// the actor (nil if none lived here) for the caller to stop.
func (r *registry) drop(tenant, session string) *actor.PID {
	k := sessionKey(tenant, session)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.records, k)
	pid := r.pids[k]
	delete(r.pids, k)
	return pid
}

// startDeletions opens the deletions log and subscribes to its receipts,
// so that a session deleted by another node is forgotten here at once.
func (n *Node) startDeletions(ctx context.Context) error {
	if err := n.store.await(ctx, "the deletions log "+natslog.DefaultDeletionsStream, func(ctx context.Context) (err error) {
		n.deletions, err = n.store.log.Deletions(ctx)
		return err
	}); err != nil {
		return err
	}
	n.reg.deletions = n.deletions
	sub, err := n.store.nc.Subscribe(natslog.DeletionsSubject("*", "*"), func(m *nats.Msg) {
		_, rest, _ := strings.Cut(m.Subject, ".del.")
		tenant, session, ok := strings.Cut(rest, ".")
		if !ok || n.gone.has(tenant, session) {
			return
		}
		// Not on the connection's goroutine: mark waits for writes in
		// flight. The node's supervisor owns it.
		n.sup.Go(func(context.Context) { n.forget(tenant, session) })
	})
	if err != nil {
		return fmt.Errorf("node: deletions: %w", err)
	}
	n.deletionsSub = sub
	return n.finishDeletions(ctx)
}

// finishDeletions finds the sessions the index still holds although the
// deletions log receipts them (a deletion cut short by a crash), makes this
// node treat them as deleted at once, and removes what is left of them in
// a goroutine the node owns (watchers).
func (n *Node) finishDeletions(ctx context.Context) error {
	// A new stream's first reads may time out while its leader is elected.
	var receipted map[string]bool
	if err := n.store.await(ctx, "the deletions log's receipts", func(ctx context.Context) (err error) {
		receipted, err = n.deletions.Receipted(ctx)
		return err
	}); err != nil || len(receipted) == 0 {
		return err
	}
	entries, err := n.store.index.List(ctx)
	if err != nil {
		return fmt.Errorf("node: listing sessions: %w", err)
	}
	var left []deletedSession
	for _, e := range entries {
		if receipted[key(e.Tenant, e.Session)] {
			n.gone.mark(e.Tenant, e.Session)
			left = append(left, deletedSession{e.Tenant, e.Session})
		}
	}
	if len(left) == 0 {
		return nil
	}
	n.logger.Warn("deleted sessions not wholly removed (a deletion cut short): removing what is left", "component", "deletions", "sessions", len(left))
	n.sup.Go(func(ctx context.Context) {
		for _, k := range left {
			if ctx.Err() != nil {
				return
			}
			if _, err := n.purgeSession(ctx, k.tenant, k.session); err != nil {
				n.logger.Warn("removing what is left of a deleted session failed; the next DELETE or retention sweep finishes it", "component", "deletions", "tenant", k.tenant, "session", k.session, "err", err)
			}
		}
	})
	return nil
}

// deletedSession names a session finishDeletions removes.
type deletedSession struct{ tenant, session string }

// Deletions returns tenant's receipts, in the deletions log's order,
// skipping the first after, at most limit.
func (n *Node) Deletions(ctx context.Context, tenant string, after uint64, limit int) (_ []natslog.StoredDeletion, err error) {
	defer code(&err)
	return n.deletions.List(ctx, tenant, after, limit)
}

// describeReceipt says when, by whom and why a receipt's session was
// deleted.
func describeReceipt(b []byte) string {
	d, err := events.ParseDeletion(b)
	if err != nil {
		return "its receipt does not parse: " + err.Error()
	}
	return fmt.Sprintf("at %s by %s (%s), receipt %d", d.Deleted.Format(time.RFC3339), d.By, d.Reason, d.N)
}

// tombstones are the sessions this node knows to be deleted. Whatever
// writes a store derived from a session's log (the search index, the
// checkpoints, the snapshots) holds it shared while it writes (hold), so
// that mark, which takes it whole, returns only once no write of a marked
// session is in flight, and none starts after. Safe for concurrent use.
type tombstones struct {
	mu  sync.RWMutex
	set map[cluster.SessionKey]time.Time
	// release is mu.RUnlock, hold's release made once (a method value made
	// per hold would allocate).
	release func()
	// done are those the sweep purged once more (settled); swept guards it.
	swept sync.Mutex
	done  map[cluster.SessionKey]bool
	// watching ends the followed streams of a session when it is marked
	// (until); watchMu guards it.
	watchMu  sync.Mutex
	watching map[cluster.SessionKey]map[*int]context.CancelFunc
}

// tombstoneKeep is how long a tombstone is kept: well past any write in
// flight when it was set, and past a forwarded call's wait.
const tombstoneKeep = time.Hour

func newTombstones() *tombstones {
	g := &tombstones{set: map[cluster.SessionKey]time.Time{}}
	g.release = g.mu.RUnlock
	return g
}

// mark records the session as deleted, once every write in flight has
// ended, and drops tombstones older than tombstoneKeep.
func (g *tombstones) mark(tenant, session string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	for k, at := range g.set {
		if now.Sub(at) > tombstoneKeep {
			delete(g.set, k)
		}
	}
	k := sessionKey(tenant, session)
	g.set[k] = now
	g.watchMu.Lock()
	for _, cancel := range g.watching[k] {
		cancel()
	}
	delete(g.watching, k)
	g.watchMu.Unlock()
}

// until returns ctx, ended as well when the session is marked deleted.
func (g *tombstones) until(ctx context.Context, tenant, session string) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	k, id := sessionKey(tenant, session), new(int)
	g.watchMu.Lock()
	if g.watching == nil {
		g.watching = map[cluster.SessionKey]map[*int]context.CancelFunc{}
	}
	if g.watching[k] == nil {
		g.watching[k] = map[*int]context.CancelFunc{}
	}
	g.watching[k][id] = cancel
	g.watchMu.Unlock()
	context.AfterFunc(ctx, func() {
		g.watchMu.Lock()
		delete(g.watching[k], id)
		if len(g.watching[k]) == 0 {
			delete(g.watching, k)
		}
		g.watchMu.Unlock()
	})
	if g.has(tenant, session) {
		cancel() // marked meanwhile
	}
	return ctx
}

// has reports whether the session is marked deleted. A nil set holds
// nothing.
func (g *tombstones) has(tenant, session string) bool {
	if g == nil {
		return false
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	_, ok := g.set[sessionKey(tenant, session)]
	return ok
}

// hold lets a write of a store derived from the session's log proceed
// (ok), until release; ok is false for a deleted session, which is not to
// be written.
func (g *tombstones) hold(tenant, session string) (release func(), ok bool) {
	if g == nil {
		return func() {}, true
	}
	g.mu.RLock()
	if _, gone := g.set[sessionKey(tenant, session)]; gone {
		g.mu.RUnlock()
		return nil, false
	}
	return g.release, true
}

// outputRemoved uncounts a deleted object (names start with the tenant;
// file pre-images are not outputs).
func (q *quotas) outputRemoved(name string, size int64) {
	tenant, rest, ok := strings.Cut(name, "/")
	if !ok || isCheckpoint(rest) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.kept[tenant] = max(0, q.kept[tenant]-size)
}
