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
	live := openLease(ctx, t, js, "alive", "i1", ttl)
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

// TestLeaseTakenAwayIsLostEvenWhenRetakenAtOnce removes a node's lease key
// between two renewals, as the nodes bucket's leader does when the node was
// stopped (SIGSTOP) past its TTL: the first renewal after it runs again is
// refused, and the lease is created again at once. The node must still hear
// that it lost the lease (OnLost), because meanwhile another node may have
// taken its sessions: it rebuilds them from the log instead of acting on
// what it held (seen failing before the fix: the re-creation in the same
// renewal tick hid the loss, and the fleet suite's resumed node kept its
// session actors and appended with them, refused by the log's guard).
func TestLeaseTakenAwayIsLostEvenWhenRetakenAtOnce(t *testing.T) {
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	js := jsOf(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lost, regained := make(chan struct{}, 8), make(chan struct{}, 8)
	l, err := cluster.OpenLease(ctx, js, cluster.Member{Name: "n", Incarnation: "i"}, cluster.LeaseOptions{TTL: cluster.MinLeaseTTL,
		OnLost: func() { lost <- struct{}{} }, OnRegained: func() { regained <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	kv, err := js.KeyValue(ctx, cluster.NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	first, err := kv.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(20 * time.Second):
		t.Fatal("the lease's key was taken away and created again, and OnLost was never called")
	}
	select {
	case <-regained:
	case <-time.After(20 * time.Second):
		t.Fatal("OnRegained was never called after the lease was created again")
	}
	// It holds a new key again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if e, err := kv.Get(ctx, "n"); err == nil && e.Revision() > first.Revision() && l.Check() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease was not held again: check %v", l.Check())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMembersWatchWhoseConsumerIsLostStartsAgain deletes the consumer of a
// node's members watch, as when it lived on a server that was killed, while
// the node's own lease goes on being renewed (every TTL/5, more often than
// the watch's restart threshold): the watch must be started again and show
// a node that joins afterwards within seconds, not once nats.go's ordered
// consumer has missed its heartbeats and reset itself (seen failing before
// the fix: the restart was timed from the latest renewal, always only just
// acknowledged, so it never came; in the fleet suite a survivor saw nothing
// for 16.9 s and every call it forwarded waited for it).
func TestMembersWatchWhoseConsumerIsLostStartsAgain(t *testing.T) {
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	js := jsOf(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ttl := cluster.MinLeaseTTL
	self := openLease(ctx, t, js, "self", "i1", ttl)
	joined := make(chan string, 8)
	m, err := cluster.WatchMembers(ctx, js, ttl, 1, func(c cluster.Change) {
		if c.Joined {
			joined <- c.Member.Name
		}
	}, cluster.WithLease(self))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	stream, err := js.Stream(ctx, "KV_"+cluster.NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for name := range stream.ConsumerNames(ctx).Name() {
		if err := stream.DeleteConsumer(ctx, name); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted == 0 {
		t.Fatal("the members watch has no consumer to delete (the test relies on one)")
	}
	// A node that joins after the watch lost its consumer.
	kv, err := js.KeyValue(ctx, cluster.NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	late, _ := json.Marshal(cluster.Member{Name: "late", Incarnation: "i2", TTLMS: (time.Minute).Milliseconds()})
	if _, err := kv.Put(ctx, "late", late); err != nil {
		t.Fatal(err)
	}
	put := time.Now()
	// Generous against a loaded machine, and well under the ordered
	// consumer's own reset (two missed 5 s heartbeats).
	select {
	case name := <-joined:
		if name != "late" {
			t.Fatalf("joined %s, want late", name)
		}
		t.Logf("the watch showed the late node %s after it joined", time.Since(put).Round(time.Millisecond))
	case <-time.After(6 * time.Second):
		t.Fatal("the members watch lost its consumer and never showed a node that joined after it: it was not started again")
	}
}

// TestMembersWatchThatCannotStartAgainReadsTheBucketDirectly loses the
// members watch's consumer and keeps the watch from being started again,
// as when the JetStream meta leader that a new consumer needs was on the
// killed server: Members must still show a node that joins, and count a
// lease that is no longer renewed as lapsed, by reading the bucket with
// direct gets (seen failing without them: nothing came until nats.go's
// ordered consumer reset itself).
func TestMembersWatchThatCannotStartAgainReadsTheBucketDirectly(t *testing.T) {
	cluster.NoWatchRestart(true)
	defer cluster.NoWatchRestart(false)
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	js := jsOf(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ttl := cluster.MinLeaseTTL
	self := openLease(ctx, t, js, "self", "i1", ttl)
	other := openLease(ctx, t, js, "other", "i3", ttl)
	changes := make(chan cluster.Change, 8)
	m, err := cluster.WatchMembers(ctx, js, ttl, 1, func(c cluster.Change) { changes <- c }, cluster.WithLease(self))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	stream, err := js.Stream(ctx, "KV_"+cluster.NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	for name := range stream.ConsumerNames(ctx).Name() {
		if err := stream.DeleteConsumer(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.KeyValue(ctx, cluster.NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	late, _ := json.Marshal(cluster.Member{Name: "late", Incarnation: "i2", TTLMS: time.Minute.Milliseconds()})
	if _, err := kv.Put(ctx, "late", late); err != nil {
		t.Fatal(err)
	}
	// "other" stops renewing: its lease must lapse on the clock.
	other.Close()
	stopped := time.Now()
	joined, left := false, false
	timeout := time.After(15 * time.Second)
	for !joined || !left {
		select {
		case c := <-changes:
			switch {
			case c.Joined && c.Member.Name == "late":
				joined = true
			case !c.Joined && c.Member.Name == "other":
				left = true
				if waited := time.Since(stopped); waited < ttl-200*time.Millisecond {
					t.Fatalf("other counted lapsed %s after its last renewal, before its TTL %s", waited, ttl)
				}
			case !c.Joined:
				t.Fatalf("node %s counted lapsed while it renews", c.Member.Name)
			}
		case <-timeout:
			t.Fatalf("with its watch stuck, Members showed late joining: %v, other leaving: %v", joined, left)
		}
	}
	if _, ok := m.Alive("self"); !ok {
		t.Fatal("self is not alive")
	}
}

// openLease opens the lease of a node name (incarnation inc) with the TTL,
// failing the test if it cannot, and closes it when the test ends (Close
// may come earlier: a second one does nothing).
func openLease(ctx context.Context, t *testing.T, js jetstream.JetStream, name, inc string, ttl time.Duration) *cluster.Lease {
	t.Helper()
	l, err := cluster.OpenLease(ctx, js, cluster.Member{Name: name, Incarnation: inc}, cluster.LeaseOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}
