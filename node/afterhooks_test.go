package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/hooks"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/tool"
)

// heard is what an after-tool hook was told about one attempt.
type heard struct {
	outcome events.Outcome
	text    string
}

// afterHookNode starts a node with tools and an after-tool hook that keeps
// what it is told, by "call/attempt".
func afterHookNode(t *testing.T, cfg *config.Config, tools ...*tool.Tool) (*node.Node, func() map[string]heard) {
	t.Helper()
	var mu sync.Mutex
	told := map[string]heard{}
	set := hooks.Set{After: []hooks.After{{Name: "audit", Run: func(ctx context.Context, c hooks.Call, r events.Result) error {
		mu.Lock()
		defer mu.Unlock()
		text := ""
		if len(r.Content) > 0 {
			text = r.Content[0].Text
		}
		told[fmt.Sprintf("%s/%d", c.Call, r.Attempts)] = heard{r.Outcome, text}
		return nil
	}}}}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: cfg, Tools: tools, Hooks: set})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, func() map[string]heard {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]heard{}
		for k, v := range told {
			out[k] = v
		}
		return out
	}
}

// logged is what the log records about each settled attempt, by
// "call/attempt": its outcome, and the error or reason it records.
func logged(t *testing.T, n *node.Node, s string) map[string]heard {
	t.Helper()
	out := map[string]heard{}
	for _, ev := range recorded(t, n, s) {
		p, err := events.Decode(ev)
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *events.ToolCallCompleted:
			out[fmt.Sprintf("%s/%d", p.Call, p.Attempt)] = heard{events.OutcomeOK, ""}
		case *events.ToolCallFailed:
			out[fmt.Sprintf("%s/%d", p.Call, p.Attempt)] = heard{events.OutcomeError, p.Error}
		case *events.ToolCallIndeterminate:
			out[fmt.Sprintf("%s/%d", p.Call, p.Attempt)] = heard{events.OutcomeIndeterminate, p.Reason}
		}
	}
	return out
}

// sameAsLog checks that the hook heard of every attempt the log settled,
// with the log's outcome and (for a failure) its words.
func sameAsLog(t *testing.T, n *node.Node, s string, told func() map[string]heard) {
	t.Helper()
	want := logged(t, n, s)
	if len(want) == 0 {
		t.Fatal("the log settled no attempt")
	}
	waitFor(t, func() bool { return len(told()) >= len(want) })
	got := told()
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("attempt %s: the hook was not told; the log records %s", k, w.outcome)
		case g.outcome != w.outcome:
			t.Errorf("attempt %s: the hook was told %s (%q); the log records %s (%q)", k, g.outcome, g.text, w.outcome, w.text)
		case w.outcome != events.OutcomeOK && !strings.Contains(g.text, w.text):
			t.Errorf("attempt %s: the hook was told %q; the log records %q", k, g.text, w.text)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("attempt %s: the hook was told %s, which the log does not record", k, g.outcome)
		}
	}
}

// TestAfterHookOfSafeTimeoutIsTheLoggedError: a replay-safe call that times
// out is recorded as a failed attempt (ToolCallFailed, timed out), and the
// after-tool hook is told that error, not that the outcome is unknown.
func TestAfterHookOfSafeTimeoutIsTheLoggedError(t *testing.T) {
	slow, err := tool.New("slow", "waits for its context", func(ctx context.Context, _ struct{}) (tool.Result, error) {
		<-ctx.Done()
		return tool.Result{}, ctx.Err()
	}, tool.WithGuidelines("test"), tool.WithTimeout(50*time.Millisecond),
		tool.WithDeclarations(tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplaySafe}))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultConfig()
	cfg.Retry.MaxAttempts = 2
	n, told := afterHookNode(t, &cfg, slow)
	s := openSession(t, n)
	tv := submit(t, n, s, "t1", events.CallSpec{ID: "c", Name: "slow", Arguments: json.RawMessage(`{}`)})
	if r := tv.Results[0]; r.Outcome != events.OutcomeError || r.Attempts != 2 {
		t.Fatalf("result %+v, want an error after 2 attempts", r)
	}
	sameAsLog(t, n, s, told)
}

// TestAfterHookOfCancelledNeverCallIsIndeterminate: a never-replay call
// cancelled while it runs may have had its effect, so the log records it
// indeterminate, and so is the after-tool hook told.
func TestAfterHookOfCancelledNeverCallIsIndeterminate(t *testing.T) {
	var started atomic.Bool
	hold, err := tool.New("hold", "runs until cancelled", func(ctx context.Context, _ struct{}) (tool.Result, error) {
		started.Store(true)
		<-ctx.Done()
		return tool.Result{}, ctx.Err()
	}, tool.WithGuidelines("test"), tool.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	n, told := afterHookNode(t, nil, hold)
	s := openSession(t, n)
	ctx := context.Background()
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{{ID: "c", Name: "hold", Arguments: json.RawMessage(`{}`)}}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, started.Load)
	if err := n.CancelTurn(ctx, "default", s, "t1", "c", "stop"); err != nil {
		t.Fatal(err)
	}
	tv, err := n.SubmitTurn(ctx, "default", s, "t1", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if r := tv.Results[0]; r.Outcome != events.OutcomeIndeterminate {
		t.Fatalf("result %+v, want indeterminate", r)
	}
	sameAsLog(t, n, s, told)
}

// TestAfterHookOfLostUserMediatedCallIsTheLoggedRetry: a user-mediated call
// whose answer was lost is asked again (ToolCallFailed, then a retry), and
// the after-tool hook hears of the failed attempt as the log records it,
// then of the attempt that answered.
func TestAfterHookOfLostUserMediatedCallIsTheLoggedRetry(t *testing.T) {
	var tries atomic.Int64
	ask, err := tool.New("ask", "asks a person, whose answer is lost once", func(ctx context.Context, _ struct{}) (tool.Result, error) {
		if tries.Add(1) == 1 {
			return tool.Result{}, tool.Lost(errors.New("the person's client went away"))
		}
		return tool.Text("yes"), nil
	}, tool.WithGuidelines("test"), tool.WithTimeout(time.Minute),
		tool.WithDeclarations(tool.Declarations{Effect: tool.EffectUserMediated}))
	if err != nil {
		t.Fatal(err)
	}
	n, told := afterHookNode(t, nil, ask)
	s := openSession(t, n)
	tv := submit(t, n, s, "t1", events.CallSpec{ID: "c", Name: "ask", Arguments: json.RawMessage(`{}`)})
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK || r.Attempts != 2 {
		t.Fatalf("result %+v, want ok at attempt 2", r)
	}
	sameAsLog(t, n, s, told)
}
