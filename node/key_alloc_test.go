package node

import (
	"context"
	"testing"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/israce"
	"github.com/callsheet/callsheet/projections"
)

// TestFindingASessionsEntriesAllocatesNothing: every call routes to its
// session's actor and notes its durable events for the checkpointer and the
// search index, each finding the session's entry in a map; a session named
// at length (ids longer than a concatenation's stack buffer) is found
// without building a key string.
func TestFindingASessionsEntriesAllocatesNothing(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	tenant, session := "tenant-with-a-long-name", "01JDZ8Q6W4M5Y7K0V3N2B1C9XA"
	pid := actor.NewPID("local", "session/1")
	r := &registry{pids: map[cluster.SessionKey]*actor.PID{sessionKey(tenant, session): pid}}
	if got := testing.AllocsPerRun(100, func() { _, _ = r.Route(tenant, session) }); got != 0 {
		t.Errorf("Route of a live session allocates %v times, want 0", got)
	}
	c := &checkpointer{every: 1 << 30, wake: make(chan struct{}, 1),
		heads: map[cluster.SessionKey]*ckptHead{sessionKey(tenant, session): {tenant: tenant, session: session, chain: "c"}}}
	evs := []events.Event{{Seq: 2}}
	if got := testing.AllocsPerRun(100, func() { c.durable(tenant, session, evs) }); got != 0 {
		t.Errorf("durable for a known session allocates %v times, want 0", got)
	}
	x := &indexer{wake: make(chan struct{}, 1),
		cache: map[cluster.SessionKey]*indexEntry{sessionKey(tenant, session): {sum: projections.NewSummary(tenant, session), resolved: true}}}
	if got := testing.AllocsPerRun(100, func() { x.apply(indexBatch{tenant: tenant, session: session}) }); got != 0 {
		t.Errorf("indexing a known session allocates %v times, want 0", got)
	}
}

// TestAskingWhetherASessionIsDeletedAllocatesNothing: every call's
// session record is looked up past the tombstones (registry.record), and
// writes derived from its log hold them; asking allocates nothing.
func TestAskingWhetherASessionIsDeletedAllocatesNothing(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	g := newTombstones()
	g.mark("tenant-with-a-long-name", "01JDZ8Q6W4M5Y7K0V3N2B1C9XB")
	tenant, session := "tenant-with-a-long-name", "01JDZ8Q6W4M5Y7K0V3N2B1C9XA"
	if got := testing.AllocsPerRun(100, func() {
		if g.has(tenant, session) {
			t.Fatal("has = true for a session not deleted, want false")
		}
		release, ok := g.hold(tenant, session)
		if !ok {
			t.Fatal("hold ok = false for a session not deleted, want true")
		}
		release()
	}); got != 0 {
		t.Fatalf("asking the tombstones allocates %v times, want 0", got)
	}
}

// TestReadingACachedSessionRecordAllocatesNothing: every call reads its
// session's index record (its workspace); one cached allocates nothing.
func TestReadingACachedSessionRecordAllocatesNothing(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	tenant, session := "tenant-with-a-long-name", "01JDZ8Q6W4M5Y7K0V3N2B1C9XA"
	r := &registry{gone: newTombstones(), records: map[cluster.SessionKey]sessionRecord{sessionKey(tenant, session): {Workspace: "w"}}}
	ctx := context.Background()
	if got := testing.AllocsPerRun(100, func() {
		if rec, err := r.record(ctx, tenant, session); err != nil || rec.Workspace != "w" {
			t.Fatalf("record = %+v, %v, want workspace w", rec, err)
		}
	}); got != 0 {
		t.Fatalf("reading a cached session record allocates %v times, want 0", got)
	}
}

// TestCountingATurnInFlightAllocatesNothing: every turn is counted in
// flight when admitted and given back when done; once the counts know the
// tenant, neither allocates.
func TestCountingATurnInFlightAllocatesNothing(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	q := newQuotas(config.Limits{CallsInFlightPerTenant: 100})
	tenant, session, turn := "tenant-with-a-long-name", "01JDZ8Q6W4M5Y7K0V3N2B1C9XA", "01JDZ8Q6W4M5Y7K0V3N2B1C9XB"
	q.turnDone(tenant, session, turn) // the tenant's flight count exists
	if got := testing.AllocsPerRun(100, func() {
		if counted, err := q.admitTurn(tenant, session, turn, 1); !counted || err != nil {
			t.Fatalf("admitTurn = %v, %v, want counted", counted, err)
		}
		q.turnDone(tenant, session, turn)
	}); got != 0 {
		t.Fatalf("counting a turn in flight allocates %v times, want 0", got)
	}
}
