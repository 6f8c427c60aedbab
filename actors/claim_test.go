package actors

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/memlog"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/tool"
)

// newJetStream starts an embedded JetStream and connects to it.
func newJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// newLog starts an embedded JetStream and opens the event log on it.
func newLog(t *testing.T) *natslog.Log {
	t.Helper()
	log, err := natslog.New(context.Background(), newJetStream(t), natslog.WithSequentialAppends(true))
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// forLogs runs f on each events.Log the actors run on: in memory
// (events/memlog) and on a real embedded JetStream (events/natslog).
func forLogs(t *testing.T, f func(t *testing.T, log events.Log)) {
	t.Run("memlog", func(t *testing.T) {
		l, err := memlog.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		f(t, l)
	})
	t.Run("natslog", func(t *testing.T) { f(t, newLog(t)) })
}

type noArgs struct{}

// mutateTool is a side-effecting tool that does nothing.
func mutateTool(t *testing.T) *tool.Tool {
	t.Helper()
	mutate, err := tool.New("mutate", "a side effect", func(context.Context, noArgs) (tool.Result, error) {
		return tool.Text("done"), nil
	}, tool.WithGuidelines("test"))
	if err != nil {
		t.Fatal(err)
	}
	return mutate
}

// TestOnlyOneClaimOfAnAttemptWins races many workers, through two session
// actors on two engines that both believe they own the session (as two
// nodes would), to claim the same attempt of one call. Exactly one claim is
// granted: the actor refuses a second claim it knows of, and the log's guard
// refuses the append of an actor whose view is stale.
func TestOnlyOneClaimOfAnAttemptWins(t *testing.T) {
	forLogs(t, func(t *testing.T, base events.Log) { testOnlyOneClaimOfAnAttemptWins(t, base) })
}

func testOnlyOneClaimOfAnAttemptWins(t *testing.T, base events.Log) {
	log := base
	// Two nodes, each its own engine, that both believe they own the
	// session (the same node name and incarnation).
	n1, n2 := newTestNode(t, log, mutateTool(t)), newTestNode(t, log, mutateTool(t))
	e1, e2, deps := n1.engine, n2.engine, n1.deps
	a1 := e1.Spawn(NewSession(deps, "default", "s1", nil), "session", actor.WithID("s1"))

	open := make(chan error, 1)
	e1.Send(a1, OpenSession{Workspace: "w", Reply: open})
	if err := <-open; err != nil {
		t.Fatal(err)
	}
	turn := make(chan TurnReply, 1)
	e1.Send(a1, SubmitTurn{ID: "t1", Calls: []events.CallSpec{{ID: "c", Name: "mutate", Arguments: json.RawMessage(`{}`)}}, Reply: turn})
	if r := <-turn; r.Err != nil {
		t.Fatal(r.Err)
	}
	// The second "node" loads the same session from the log.
	a2 := e2.Spawn(NewSession(n2.deps, "default", "s1", nil), "session", actor.WithID("s1"))
	var req events.ToolCallRequested
	deadline := time.Now().Add(10 * time.Second)
	for req.Call == "" && time.Now().Before(deadline) {
		evs, _ := log.Read(context.Background(), "default", "s1", 0)
		for _, ev := range evs {
			if ev.Type == events.TypeToolCallRequested {
				_ = json.Unmarshal(ev.Data, &req)
			}
		}
	}
	if req.Call == "" {
		t.Fatal("the call was never requested")
	}

	const workers = 16
	var wg sync.WaitGroup
	results := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply := make(chan error, 1)
			e, pid := e1, a1
			if i%2 == 1 {
				e, pid = e2, a2
			}
			e.Send(pid, claim{req: req, worker: "w", reply: reply})
			select {
			case err := <-reply:
				results <- err
			case <-time.After(20 * time.Second):
				results <- errors.New("no reply")
			}
		}()
	}
	wg.Wait()
	close(results)
	granted := 0
	for err := range results {
		if err == nil {
			granted++
		} else if !errors.Is(err, core.ErrStaleClaim) && !errors.Is(err, ErrSessionUnavailable) {
			t.Errorf("claim refused with %v, want ErrStaleClaim or a stale-view refusal", err)
		}
	}
	if granted != 1 {
		t.Fatalf("%d claims granted, want exactly 1", granted)
	}
	evs, _ := log.Read(context.Background(), "default", "s1", 0)
	started := 0
	for _, ev := range evs {
		if ev.Type == events.TypeToolCallStarted {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("%d ToolCallStarted in the log, want 1", started)
	}
}
