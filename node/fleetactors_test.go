package node_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
)

// blipWhileClaimedCallRuns starts a turn of one claimed call of ms (the
// mutate tool: side-effecting, never replayed) on a fresh node and, once
// the call runs, stops the session's actor as the node does when it loses
// its lease for a moment (a nodes-bucket election).
func blipWhileClaimedCallRuns(t *testing.T, ms int) (*node.Node, *testTools, string) {
	t.Helper()
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	t.Cleanup(func() { n.Close() })
	s := openSession(t, n)
	if _, err := n.SubmitTurn(context.Background(), "default", s, "t1", []events.CallSpec{mutate("m", ms)}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return started(t, n, s, "m") })
	n.LoseLeaseForTest()
	return n, tt, s
}

// ranOnceOK fails t unless the turn's one call ended ok and ran once.
func ranOnceOK(t *testing.T, tt *testTools, tv projections.Turn) {
	t.Helper()
	if len(tv.Results) != 1 || tv.Results[0].Outcome != events.OutcomeOK {
		t.Fatalf("results %+v, want the call ok: it ran here and reported", tv.Results)
	}
	if runs := tt.runs.Load(); runs != 1 {
		t.Fatalf("the call ran %d times, want once", runs)
	}
}

// TestOutcomeReachesTheActorThatReplacedTheClaimant: the turn, asked for
// again after the blip while its call still runs, is served by a new actor,
// which leaves the call to this node (it still runs here); the call's
// outcome must reach that actor, not the stopped one that claimed it, or
// the turn never completes (as in the fleet suite's SIGSTOP trials).
func TestOutcomeReachesTheActorThatReplacedTheClaimant(t *testing.T) {
	n, tt, s := blipWhileClaimedCallRuns(t, 1500)
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tv projections.Turn
	var err error
	for {
		tv, err = n.SubmitTurn(wctx, "default", s, "t1", nil, true)
		if err == nil || wctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // the stopped actor refused: ask the next one
	}
	if err != nil {
		t.Fatalf("the turn whose call ran while its actor was replaced never completed: %v", err)
	}
	if tv.Status != projections.StatusComplete {
		t.Fatalf("turn %+v, want complete", tv)
	}
	ranOnceOK(t, tt, tv)
}

// TestARequestRacingTheActorsStopIsAnswered asks for a session's turn
// while the node stops the session's actor (as when it loses its lease for
// a moment), again and again: every request is answered, by the old actor
// or its successor, within its deadline. hollywood leaves unanswered a
// message that reaches an actor after it took its poison pill
// (docs/facts.md), so an actor must not be poisoned while requests may
// still reach it.
func TestARequestRacingTheActorsStopIsAnswered(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	submit(t, n, s, "t1", nap("a", 1))
	for i := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		done := make(chan error, 1)
		go func() {
			_, err := n.SubmitTurn(ctx, "default", s, "t1", nil, true)
			done <- err
		}()
		n.LoseLeaseForTest()
		err := <-done
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: a request sent as the actor stopped was never answered: %v", i, err)
		}
	}
}

// TestOutcomeOfACallThatEndsWhileNoActorServes asks nothing after the
// blip until the call has ended: its outcome then spawns the session's next
// actor, which loads the log while the outcome waits in its inbox. The
// call ran here and reported, so the turn completes with its result, not
// as lost (a never call: indeterminate).
func TestOutcomeOfACallThatEndsWhileNoActorServes(t *testing.T) {
	n, tt, s := blipWhileClaimedCallRuns(t, 300)
	waitFor(t, func() bool {
		return slices.Contains(sequence(recorded(t, n, s), events.TypeTurnCompleted), "TurnCompleted:")
	})
	ranOnceOK(t, tt, submit(t, n, s, "t1"))
}
