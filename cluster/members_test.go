package cluster_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
)

// TestMembersSeeALeaseLapseTheServerNeverExpires writes a node's lease as
// a key the server never expires (no TTL: as when the node that stopped
// leads the nodes bucket, the only server that would expire it): Members
// must still count it lapsed once no renewal came for the lease's TTL, and
// say that the node left; a lease that is renewed stays.
func TestMembersSeeALeaseLapseTheServerNeverExpires(t *testing.T) {
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	js := jsOf(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ttl := cluster.MinLeaseTTL
	left := make(chan cluster.Change, 4)
	m, err := cluster.WatchMembers(ctx, js, ttl, 1, func(c cluster.Change) {
		if !c.Joined {
			left <- c
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// A live lease, renewed by its holder.
	live, err := cluster.OpenLease(ctx, js, cluster.Member{Name: "alive", Incarnation: "i1"}, cluster.LeaseOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// A stopped node's lease that the server keeps for ever.
	kv, err := js.KeyValue(ctx, cluster.NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	stuck, _ := json.Marshal(cluster.Member{Name: "stuck", Incarnation: "i2", TTLMS: ttl.Milliseconds()})
	if _, err := kv.Put(ctx, "stuck", stuck); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := m.Alive("stuck"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stuck lease was never seen")
		}
		time.Sleep(20 * time.Millisecond)
	}
	seen := time.Now()
	select {
	case c := <-left:
		if c.Member.Name != "stuck" {
			t.Fatalf("node %s left, want stuck", c.Member.Name)
		}
		if waited := time.Since(seen); waited < ttl-200*time.Millisecond {
			t.Fatalf("the lease counted lapsed %s after it was written, before its TTL %s", waited, ttl)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a lease not renewed for its TTL is still counted alive")
	}
	if _, ok := m.Alive("stuck"); ok {
		t.Fatal("Alive(stuck) after it left")
	}
	if e, err := kv.Get(ctx, "stuck"); err != nil || e.Operation() != jetstream.KeyValuePut {
		t.Fatalf("the server still holds the stuck key: %v (the test relies on it)", err)
	}
	// The renewed lease outlives several TTLs.
	time.Sleep(2 * ttl)
	if _, ok := m.Alive("alive"); !ok || live.Check() != nil {
		t.Fatalf("the renewed lease lapsed: alive=%v check=%v", ok, live.Check())
	}
}
