package node_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// TestOutcomeReachesTheActorThatReplacedTheClaimant stops the session's
// actor while a claimed call runs, as the node does when it loses its
// lease for a moment (a nodes-bucket election) or reloads after a failed
// append, and rebuilds it at once: the new actor leaves the call alone (it
// still runs on this node), so the call's outcome must reach the new actor,
// not the stopped one that claimed it. Before the fix it went to the
// stopped actor and was lost, and the turn never completed (the fleet
// suite's SIGSTOP trials: turns unserved for minutes, nothing logged).
func TestOutcomeReachesTheActorThatReplacedTheClaimant(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	ctx := context.Background()
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{mutate("m", 1500)}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return started(t, n, s, "m") })
	n.LoseLeaseForTest()
	// The turn, asked for again, is served by a new actor while the call
	// still runs.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
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
	if tv.Status != projections.StatusComplete || len(tv.Results) != 1 || tv.Results[0].Outcome != events.OutcomeOK {
		t.Fatalf("turn %+v, want complete with the call ok", tv)
	}
	if runs := tt.runs.Load(); runs != 1 {
		t.Fatalf("the call ran %d times, want once", runs)
	}
}

// TestARequestRacingTheActorsStopIsAnswered asks for a session's turn
// while the node stops the session's actor (as when it loses its lease for
// a moment), again and again: every request is answered, by the old actor
// or its successor, within its deadline. A message that reached a stopping
// actor after hollywood took its poison pill from the inbox sat there
// unanswered, and its caller waited out its whole deadline.
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

// TestOutcomeOfACallThatEndsWhileNoActorServes stops the session's actor
// while a claimed call runs, as a lease blip does, and asks nothing until
// the call has ended: its outcome then spawns the session's next actor,
// which loads the log while the outcome waits in its inbox. The call ran
// here and reported, so the turn completes with its result; the new actor
// settled it as lost before (the call had left the tool actor's running
// set), and the never call ended indeterminate.
func TestOutcomeOfACallThatEndsWhileNoActorServes(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	ctx := context.Background()
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{mutate("m", 300)}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return started(t, n, s, "m") })
	n.LoseLeaseForTest()
	waitFor(t, func() bool {
		return slices.Contains(sequence(recorded(t, n, s), events.TypeTurnCompleted), "TurnCompleted:")
	})
	tv := submit(t, n, s, "t1")
	if len(tv.Results) != 1 || tv.Results[0].Outcome != events.OutcomeOK {
		t.Fatalf("results %+v, want the call ok: it ran here and reported", tv.Results)
	}
	if runs := tt.runs.Load(); runs != 1 {
		t.Fatalf("the call ran %d times, want once", runs)
	}
}
