package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/replay"
	"github.com/callsheet/callsheet/tool"
)

// holdTool is parallel-safe and side-effecting: its claim is durable
// before it runs, so the claim's time in the log is when it started.
func holdTool(t *testing.T) *tool.Tool {
	t.Helper()
	tl, err := tool.New("hold", "sleeps, parallel-safe, claimed before it runs", func(ctx context.Context, a sleepArgs) (tool.Result, error) {
		select {
		case <-time.After(time.Duration(a.MS) * time.Millisecond):
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
		return tool.Text("held " + a.Tag), nil
	}, tool.WithGuidelines("test"), tool.WithDeclarations(tool.Declarations{
		Effect: tool.EffectSideEffecting, Replay: tool.ReplayNever, Concurrency: tool.ConcurrencyParallelSafe}))
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func hold(id string, ms int) events.CallSpec {
	return events.CallSpec{ID: id, Name: "hold", Arguments: json.RawMessage(fmt.Sprintf(`{"ms":%d,"tag":%q}`, ms, id))}
}

func streamNode(t *testing.T, dir string, cfg *config.Config) *node.Node {
	t.Helper()
	if cfg == nil {
		c := config.DefaultConfig()
		cfg = &c
	}
	n, err := node.New(context.Background(), node.Options{DataDir: dir, Config: cfg, Tools: append((&testTools{}).tools(t), holdTool(t))})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func addCalls(t *testing.T, n *node.Node, s, turn string, calls ...events.CallSpec) node.Batch {
	t.Helper()
	b, err := n.AddCalls(context.Background(), "default", s, turn, calls, node.BatchOptions{From: -1})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// first returns the first event of typ for which match holds.
func first(evs []events.Event, typ events.Type, match func(p any) bool) (events.Event, bool) {
	for _, ev := range evs {
		if ev.Type != typ {
			continue
		}
		p, err := events.Decode(ev)
		if err == nil && (match == nil || match(p)) {
			return ev, true
		}
	}
	return events.Event{}, false
}

func claimOf(call string) func(p any) bool {
	return func(p any) bool { return p.(*events.ToolCallStarted).Call == call }
}

func batchFrom(from int) func(p any) bool {
	return func(p any) bool { return p.(*events.CallsAdded).From == from }
}

// TestStreamedCallStartsBeforeTheNextIsPosted: two 0.6 s parallel-safe
// calls posted 0.4 s apart, then the end. The first call's claim (durable
// before it runs) is in the log before the second call's batch: it started
// while the model was still streaming, not once the turn was whole. The
// log's times are reported (a posted turn of the two would take 1.6 s from
// the first call to the end; streamed it takes about 1.0 s).
func TestStreamedCallStartsBeforeTheNextIsPosted(t *testing.T) {
	n := streamNode(t, t.TempDir(), nil)
	defer n.Close()
	s := openSession(t, n)
	b := addCalls(t, n, s, "t1", hold("a", 600))
	if b.Turn != "t1" || b.Status != node.StatusOpen || b.From != 0 || b.Calls != 1 || !b.ParallelToolCalls || b.Cap != 8 {
		t.Fatalf("first batch answered %+v", b)
	}
	time.Sleep(400 * time.Millisecond) // the model streams the second call
	if b = addCalls(t, n, s, "t1", hold("b", 600)); b.From != 1 || b.Calls != 2 {
		t.Fatalf("second batch answered %+v", b)
	}
	tv, err := n.EndTurn(context.Background(), "default", s, "t1", 2, true)
	if err != nil || tv.Status != projections.StatusComplete || strings.Join(resultIDs(tv), ",") != "a,b" {
		t.Fatalf("end: %+v %v, want a and b complete in order", tv, err)
	}
	evs := recorded(t, n, s)
	opened, _ := first(evs, events.TypeTurnOpened, nil)
	claimA, okA := first(evs, events.TypeToolCallStarted, claimOf("a"))
	added, okB := first(evs, events.TypeCallsAdded, batchFrom(1))
	claimB, _ := first(evs, events.TypeToolCallStarted, claimOf("b"))
	done, _ := first(evs, events.TypeTurnCompleted, nil)
	if !okA || !okB || claimA.Seq > added.Seq {
		t.Fatalf("call a claimed at seq %d, the second batch recorded at seq %d: want a started first", claimA.Seq, added.Seq)
	}
	if !claimA.Time.Before(added.Time) {
		t.Fatalf("call a claimed at %s, the second batch recorded at %s: want a started first", claimA.Time, added.Time)
	}
	t.Logf("from the log: a started +%s, b posted +%s and started +%s, turn complete +%s (posted whole after b arrived: about +%s)",
		claimA.Time.Sub(opened.Time), added.Time.Sub(opened.Time), claimB.Time.Sub(opened.Time), done.Time.Sub(opened.Time),
		added.Time.Sub(opened.Time)+1200*time.Millisecond)
	if ps := replay.Verify("default", s, evs); replay.Failed(ps) {
		t.Fatalf("verify: %v", ps)
	}
	if *update {
		writeGolden(t, n, s, "streamed")
	}
}

// writeGolden writes session s's events and transcript as the golden
// stream name under projections/testdata.
func writeGolden(t *testing.T, n *node.Node, s, name string) {
	t.Helper()
	dir := filepath.Join("..", "projections", "testdata")
	f, err := os.Create(filepath.Join(dir, name+".events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(f)
	for _, ev := range recorded(t, n, s) {
		if err := enc.Encode(ev); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	tr, err := n.Transcript(context.Background(), "default", s)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := projections.Marshal(tr)
	if err := os.WriteFile(filepath.Join(dir, name+".transcript.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestExclusiveStreamedCallWaitsForTheCallsBeforeIt: an exclusive call
// posted while a parallel-safe one runs starts only once it settled, and a
// call posted after the exclusive one only once that settled.
func TestExclusiveStreamedCallWaitsForTheCallsBeforeIt(t *testing.T) {
	n := streamNode(t, t.TempDir(), nil)
	defer n.Close()
	s := openSession(t, n)
	addCalls(t, n, s, "t1", hold("a", 300))
	addCalls(t, n, s, "t1", mutate("m", 100))
	addCalls(t, n, s, "t1", hold("b", 1))
	if _, err := n.EndTurn(context.Background(), "default", s, "t1", 0, true); err != nil {
		t.Fatal(err)
	}
	got := sequence(recorded(t, n, s), events.TypeToolCallStarted, events.TypeToolCallCompleted)
	want := "ToolCallStarted:a ToolCallCompleted:a ToolCallStarted:m ToolCallCompleted:m ToolCallStarted:b ToolCallCompleted:b"
	if strings.Join(got, " ") != want {
		t.Fatalf("runs %v, want %s", got, want)
	}
}

// TestStreamTimeoutEndsTheTurn: a streamed turn left open past
// turns.stream_timeout ends by itself with the calls it has, and
// completes; the end names its last batch as its cause, and later calls
// are refused with why.
func TestStreamTimeoutEndsTheTurn(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Turns.StreamTimeout = config.Duration(300 * time.Millisecond)
	n := streamNode(t, t.TempDir(), &cfg)
	defer n.Close()
	s := openSession(t, n)
	addCalls(t, n, s, "t1", nap("a", 1))
	addCalls(t, n, s, "t1", nap("b", 1))
	tv := waitComplete(t, n, s, "t1")
	if strings.Join(resultIDs(tv), ",") != "a,b" {
		t.Fatalf("turn %+v, want a and b", tv)
	}
	evs := recorded(t, n, s)
	ended, ok := first(evs, events.TypeTurnEnded, nil)
	last, _ := first(evs, events.TypeCallsAdded, batchFrom(1))
	p, _ := events.Decode(ended)
	if e, _ := p.(*events.TurnEnded); !ok || e.Reason != events.EndedByTimeout || e.Calls != 2 || ended.Causation != last.ID {
		t.Fatalf("TurnEnded %+v (causation %s), want timeout with 2 calls caused by the last batch %s", p, ended.Causation, last.ID)
	}
	if d := ended.Time.Sub(last.Time); d < 300*time.Millisecond {
		t.Fatalf("ended %s after the last batch, before the timeout", d)
	}
	_, err := n.AddCalls(context.Background(), "default", s, "t1", []events.CallSpec{nap("c", 1)}, node.BatchOptions{From: -1})
	if !errors.Is(err, node.ErrConflict) || !strings.Contains(err.Error(), "turns.stream_timeout") {
		t.Fatalf("a call after the timeout: %v, want a conflict saying the turn timed out", err)
	}
}

// waitComplete polls a turn until it is complete.
func waitComplete(t *testing.T, n *node.Node, s, turn string) projections.Turn {
	t.Helper()
	var tv projections.Turn
	waitFor(t, func() bool {
		var err error
		tv, err = n.Turn(context.Background(), "default", s, turn)
		return err == nil && tv.Status == projections.StatusComplete
	})
	return tv
}

// TestStreamTimeoutHoldsAcrossARestart: a node that stops with a streamed
// turn open leaves it open in the log; the next node re-arms its timer
// from the last batch's time and ends it.
func TestStreamTimeoutHoldsAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	cfg := config.DefaultConfig()
	cfg.Turns.StreamTimeout = config.Duration(time.Second)
	n := streamNode(t, dir, &cfg)
	s := openSession(t, n)
	addCalls(t, n, s, "t1", nap("a", 1))
	n.Close()
	n = streamNode(t, dir, &cfg)
	defer n.Close()
	waitComplete(t, n, s, "t1")
	ended, _ := first(recorded(t, n, s), events.TypeTurnEnded, nil)
	if p, _ := events.Decode(ended); p.(*events.TurnEnded).Reason != events.EndedByTimeout {
		t.Fatalf("ended %+v, want by the timeout", p)
	}
}

// TestBatchesAreIdempotent: a batch sent again is answered from the record
// and runs nothing; one that conflicts with the record is refused with a
// message; a posted turn's id and a streamed turn's id never stand for
// each other; a batch after a lost one is refused.
func TestBatchesAreIdempotent(t *testing.T) {
	n := streamNode(t, t.TempDir(), nil)
	defer n.Close()
	s := openSession(t, n)
	ctx := context.Background()
	b1 := addCalls(t, n, s, "t1", mutate("a", 1), mutate("b", 1))
	again := addCalls(t, n, s, "t1", mutate("a", 1), mutate("b", 1))
	if again != b1 {
		t.Fatalf("the batch sent again answered %+v, the first time %+v", again, b1)
	}
	_, err := n.AddCalls(ctx, "default", s, "t1", []events.CallSpec{mutate("a", 2)}, node.BatchOptions{From: -1})
	if node.ErrorCode(err) != node.CodeTurnIDReused || !strings.Contains(err.Error(), `calls[0] (id "a") has other arguments`) {
		t.Fatalf("a recorded call with other arguments: %v, want turn_id_reused naming it", err)
	}
	_, err = n.AddCalls(ctx, "default", s, "t1", []events.CallSpec{mutate("c", 1)}, node.BatchOptions{From: 3})
	if !errors.Is(err, node.ErrConflict) || !strings.Contains(err.Error(), "holds 2 calls and this batch says it starts at call 3") {
		t.Fatalf("a batch after a lost one: %v, want a conflict saying so", err)
	}
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{mutate("a", 1), mutate("b", 1)}, false); node.ErrorCode(err) != node.CodeTurnIDReused || !strings.Contains(err.Error(), "names a streamed turn") {
		t.Fatalf("the streamed turn's id posted whole: %v, want turn_id_reused saying so", err)
	}
	if _, err := n.EndTurn(ctx, "default", s, "t1", 3, true); !errors.Is(err, node.ErrConflict) {
		t.Fatalf("an end saying 3 calls of 2: %v, want a conflict", err)
	}
	if _, err := n.EndTurn(ctx, "default", s, "t1", 2, true); err != nil {
		t.Fatal(err)
	}
	if tv, err := n.EndTurn(ctx, "default", s, "t1", 2, true); err != nil || tv.Status != projections.StatusComplete {
		t.Fatalf("ending again: %+v %v, want the turn's answer", tv, err)
	}
	if b := addCalls(t, n, s, "t1", mutate("b", 1)); b.Status != node.StatusEnded || b.From != 1 {
		t.Fatalf("a recorded batch after the end: %+v, want it answered from the record as ended", b)
	}
	submit(t, n, s, "p1", mutate("x", 1))
	if _, err := n.AddCalls(ctx, "default", s, "p1", []events.CallSpec{mutate("x", 1)}, node.BatchOptions{From: -1}); node.ErrorCode(err) != node.CodeTurnIDReused || !strings.Contains(err.Error(), "posted whole") {
		t.Fatalf("a posted turn's id streamed: %v, want turn_id_reused saying so", err)
	}
	if _, err := n.EndTurn(ctx, "default", s, "nope", 0, true); !errors.Is(err, node.ErrNotFound) {
		t.Fatalf("ending an unknown turn: %v, want not found", err)
	}
	evs := recorded(t, n, s)
	if got := len(sequence(evs, events.TypeToolCallStarted)); got != 3 {
		t.Fatalf("%d calls started, want a, b and x once each", got)
	}
	count := 0
	for _, ev := range evs {
		if ev.Type == events.TypeCallsAdded {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("%d CallsAdded, want the one batch", count)
	}
}

// TestStreamedCallsCountInFlight: a streamed turn's calls count against
// limits.calls_in_flight_per_tenant batch by batch and limits.calls_per_turn
// across its batches, until the turn completes.
func TestStreamedCallsCountInFlight(t *testing.T) {
	lim := config.DefaultLimits()
	lim.CallsPerTurn, lim.CallsInFlightPerTenant = 3, 3
	n := streamNode(t, t.TempDir(), limited(lim))
	defer n.Close()
	ctx := context.Background()
	s1, s2 := openSession(t, n), openSession(t, n)
	addCalls(t, n, s1, "t1", hold("a", 1), hold("b", 1))
	if _, err := n.AddCalls(ctx, "default", s1, "t1", []events.CallSpec{hold("c", 1), hold("d", 1)}, node.BatchOptions{From: -1}); !errors.Is(err, node.ErrLimited) {
		t.Fatalf("4 calls in flight: %v, want ErrLimited", err)
	}
	if _, err := n.SubmitTurn(ctx, "default", s2, "p", []events.CallSpec{nap("x", 1), nap("y", 1)}, true); !errors.Is(err, node.ErrLimited) {
		t.Fatalf("another session's 2 calls beside 2 streamed: %v, want ErrLimited", err)
	}
	addCalls(t, n, s1, "t1", hold("c", 1))
	if _, err := n.AddCalls(ctx, "default", s1, "t1", []events.CallSpec{hold("d", 1)}, node.BatchOptions{From: -1}); !errors.Is(err, node.ErrLimited) && !errors.Is(err, node.ErrTooLarge) {
		t.Fatalf("a 4th call: %v, want refused", err)
	}
	if _, err := n.EndTurn(ctx, "default", s1, "t1", 3, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		_, err := n.SubmitTurn(ctx, "default", s2, "p", []events.CallSpec{nap("x", 1), nap("y", 1), nap("z", 1)}, true)
		return err == nil
	})
}
