package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
)

// summaryOf waits until the index holds the session with want turns and
// returns its summary.
func summaryOf(t *testing.T, n *node.Node, s string, turns int) *projections.Summary {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, err := n.ListSessions(context.Background(), "default", node.SessionQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		// Filed once it has caught up with the log: a summary filed
		// mid-turn (the indexer files new markers at once, other changes
		// at most once a second) already counts the turn but not yet its
		// outcomes.
		for _, sum := range p.Sessions {
			if sum.Session == s && sum.Turns == turns && sum.Seq == lastSeq(t, n, s) {
				return sum
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the index never showed session %s with %d turns: %+v", s, turns, p.Sessions)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIndexFollowsASessionAcrossNodes: a session carried on by another
// node (here: the same data dir after a restart, so the indexer knows
// nothing of it) is looked up and folded on, not counted from zero; a
// summary removed behind the node's back, or one left behind, is folded
// again from the log at the next append.
func TestIndexFollowsASessionAcrossNodes(t *testing.T) {
	dir := t.TempDir()
	tt := &testTools{}
	n := startNode(t, dir, nil, tt)
	s := openSession(t, n)
	submit(t, n, s, "t1", nap("a", 0), nap("b", 0))
	if sum := summaryOf(t, n, s, 1); sum.Calls != 2 || sum.Outcomes[events.OutcomeOK] != 2 {
		t.Fatalf("after t1: %+v", sum)
	}
	n.Close()

	n = startNode(t, dir, nil, tt)
	defer n.Close()
	submit(t, n, s, "t2", nap("c", 0))
	if sum := summaryOf(t, n, s, 2); sum.Calls != 3 || sum.Outcomes[events.OutcomeOK] != 3 || sum.Seq != lastSeq(t, n, s) {
		t.Fatalf("after t2 on a fresh node: %+v (last seq %d)", sum, lastSeq(t, n, s))
	}

	// Someone deletes the summary: the next append does not follow
	// anything on file, and the session is folded again from its log.
	kv := searchKV(t, n)
	keys, err := kv.ListKeysFiltered(context.Background(), "default.s.*."+s)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if err := kv.Delete(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	submit(t, n, s, "t3", mutate("d", 0))
	if sum := summaryOf(t, n, s, 3); sum.Calls != 4 || sum.Outcomes[events.OutcomeOK] != 4 || len(sum.Tools) != 2 {
		t.Fatalf("after the summary was deleted: %+v", sum)
	}
}

func lastSeq(t *testing.T, n *node.Node, s string) uint64 {
	t.Helper()
	evs := recorded(t, n, s)
	return evs[len(evs)-1].Seq
}

func searchKV(t *testing.T, n *node.Node) jetstream.KeyValue {
	t.Helper()
	js := jsOf(t, n)
	kv, err := js.KeyValue(context.Background(), natslog.DefaultSearchBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
