package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/hooks"
	"github.com/callsheet/callsheet/node"
)

func TestHooksAndMiddleware(t *testing.T) {
	tt := &testTools{}
	var mu sync.Mutex
	var seen []string
	var gated, shaped atomic.Int64 // runs of the before-tool hook and of the middleware
	set := hooks.Set{
		Before: []hooks.Before{{Name: "gate", Tools: []string{"mutate"}, Run: func(ctx context.Context, c hooks.Call) error {
			gated.Add(1)
			if strings.Contains(string(c.Arguments), `"forbidden"`) {
				return errors.New("forbidden tag")
			}
			return nil
		}}},
		Middleware: []hooks.Middleware{{Name: "shape", Tools: []string{"nap"}, Run: func(ctx context.Context, c hooks.Call) (hooks.Verdict, error) {
			shaped.Add(1)
			switch {
			case strings.Contains(string(c.Arguments), `"deny-me"`):
				return hooks.Verdict{Action: "deny", Reason: "naps are over"}, nil
			case strings.Contains(string(c.Arguments), `"shorten"`):
				return hooks.Verdict{Action: "rewrite", Arguments: json.RawMessage(`{"ms":1,"tag":"shortened"}`)}, nil
			case strings.Contains(string(c.Arguments), `"break"`):
				return hooks.Verdict{Action: "rewrite", Arguments: json.RawMessage(`{"ms":"soon"}`)}, nil
			}
			return hooks.Verdict{Action: "allow"}, nil
		}}},
		After: []hooks.After{{Name: "watch", Run: func(ctx context.Context, c hooks.Call, r events.Result) error {
			mu.Lock()
			seen = append(seen, c.Call+":"+string(r.Outcome))
			mu.Unlock()
			return nil
		}}},
	}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Tools: tt.tools(t), Hooks: set})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := openSession(t, n)
	ctx := context.Background()

	// A failing before-tool hook fails the whole turn: nothing recorded, nothing run.
	_, err = n.SubmitTurn(ctx, "default", s, "t0", []events.CallSpec{nap("a", 1), mutate("forbidden", 1)}, true)
	if !errors.Is(err, node.ErrHookFailed) || !strings.Contains(err.Error(), "gate") {
		t.Fatalf("err=%v, want ErrHookFailed naming the hook", err)
	}
	if got := recorded(t, n, s); len(got) != 2 || got[0].Type != events.TypeSessionOpened || got[1].Type != events.TypeOwnershipTaken || tt.runs.Load() != 0 {
		t.Fatalf("after a failed hook: %d events, %d runs; want only SessionOpened and OwnershipTaken, and no run", len(got), tt.runs.Load())
	}

	tv := submit(t, n, s, "t1", nap("deny-me", 1), nap("shorten", 60_000), nap("break", 1), nap("plain", 1))
	if r := tv.Results[0]; r.Block != events.BlockDenied || !strings.Contains(r.Content[0].Text, "naps are over") {
		t.Fatalf("denied by middleware: %+v", r)
	}
	if r := tv.Results[1]; r.Outcome != events.OutcomeOK || r.Content[0].Text != "slept shortened" {
		t.Fatalf("rewritten call: %+v, want it to run with the rewritten arguments", r)
	}
	if r := tv.Results[2]; r.Block != events.BlockInvalidArguments || !strings.Contains(r.Content[0].Text, "middleware shape") {
		t.Fatalf("invalid rewrite: %+v, want invalid_arguments naming the middleware", r)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 2 })
	mu.Lock()
	if strings.Join(seen, ",") != "shorten:ok,plain:ok" && strings.Join(seen, ",") != "plain:ok,shorten:ok" {
		mu.Unlock()
		t.Fatalf("after hooks saw %v", seen)
	}
	mu.Unlock()

	// Hooks and middleware run once per turn id: not for a repeat with the
	// same calls, nor for one with other calls, which is refused.
	tv2 := submit(t, n, s, "t2", mutate("m", 1), nap("plain", 1))
	g, m := gated.Load(), shaped.Load()
	if again := submit(t, n, s, "t2", mutate("m", 1), nap("plain", 1)); again.Turn != tv2.Turn || len(again.Results) != 2 {
		t.Fatalf("repeat answered %+v", again)
	}
	if _, err := n.SubmitTurn(ctx, "default", s, "t2", []events.CallSpec{mutate("forbidden", 1), nap("deny-me", 1)}, true); !errors.Is(err, core.ErrTurnMismatch) {
		t.Fatalf("repeat with other calls: err=%v, want core.ErrTurnMismatch", err)
	}
	if gated.Load() != g || shaped.Load() != m {
		t.Fatalf("hooks ran again for a repeated turn id: before-tool %d→%d, middleware %d→%d", g, gated.Load(), m, shaped.Load())
	}
}
