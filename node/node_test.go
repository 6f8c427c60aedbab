package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/tool"
)

type sleepArgs struct {
	MS  int    `json:"ms" jsonschema:"milliseconds to sleep"`
	Tag string `json:"tag,omitempty" jsonschema:"a label"`
}

// testTools are Go tools that count their runs.
type testTools struct {
	runs atomic.Int64
}

func (tt *testTools) tools(t *testing.T) []*tool.Tool {
	t.Helper()
	sleep := func(ctx context.Context, a sleepArgs) (tool.Result, error) {
		tt.runs.Add(1)
		if strings.HasPrefix(a.Tag, "fail") {
			return tool.Result{}, fmt.Errorf("failing as asked (%s)", a.Tag)
		}
		select {
		case <-time.After(time.Duration(a.MS) * time.Millisecond):
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
		return tool.Text("slept " + a.Tag), nil
	}
	par, err := tool.New("nap", "sleeps, parallel-safe", sleep, tool.WithGuidelines("test"),
		tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}))
	if err != nil {
		t.Fatal(err)
	}
	excl, err := tool.New("mutate", "sleeps, exclusive and side-effecting", sleep, tool.WithGuidelines("test"))
	if err != nil {
		t.Fatal(err)
	}
	big, err := tool.New("big", "prints 100 kB", func(ctx context.Context, a sleepArgs) (tool.Result, error) {
		tt.runs.Add(1)
		var b strings.Builder
		for i := 0; b.Len() < 100_000; i++ {
			fmt.Fprintf(&b, "line %05d %s\n", i, strings.Repeat("x", 40))
		}
		return tool.Text(b.String()), nil
	}, tool.WithGuidelines("test"), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Concurrency: tool.ConcurrencyParallelSafe}))
	if err != nil {
		t.Fatal(err)
	}
	return []*tool.Tool{par, excl, big}
}

func startNode(t *testing.T, dir string, cfg *config.Config, tt *testTools) *node.Node {
	t.Helper()
	n, err := node.New(context.Background(), node.Options{DataDir: dir, Config: cfg, Tools: tt.tools(t)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// jsOf is a JetStream client of n's own server, on a connection of its own
// that the test's end closes.
func jsOf(t *testing.T, n *node.Node) jetstream.JetStream {
	t.Helper()
	return testnode.JetStream(t, n.ClientURL(), n.NATSCredentials())
}

func openSession(t *testing.T, n *node.Node) string {
	t.Helper()
	info, err := n.OpenSession(context.Background(), "default", "", "")
	if err != nil {
		t.Fatal(err)
	}
	return info.Session
}

func nap(id string, ms int) events.CallSpec {
	return events.CallSpec{ID: id, Name: "nap", Arguments: json.RawMessage(fmt.Sprintf(`{"ms":%d,"tag":%q}`, ms, id))}
}

func mutate(id string, ms int) events.CallSpec {
	return events.CallSpec{ID: id, Name: "mutate", Arguments: json.RawMessage(fmt.Sprintf(`{"ms":%d,"tag":%q}`, ms, id))}
}

func submit(t *testing.T, n *node.Node, s, turn string, calls ...events.CallSpec) projections.Turn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tv, err := n.SubmitTurn(ctx, "default", s, turn, calls, true)
	if err != nil {
		t.Fatal(err)
	}
	if tv.Status != projections.StatusComplete {
		t.Fatalf("turn status=%s, want complete", tv.Status)
	}
	return tv
}

func recorded(t *testing.T, n *node.Node, s string) []events.Event {
	t.Helper()
	ch, err := n.Events(context.Background(), "default", s, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for ev := range ch {
		out = append(out, ev)
	}
	return out
}

// callOf returns the call id a call event names, or "".
func callOf(ev events.Event) string {
	var p struct {
		Call string `json:"call"`
	}
	_ = json.Unmarshal(ev.Data, &p)
	return p.Call
}

// sequence returns "Type:call" for each call event of the given types.
func sequence(evs []events.Event, types ...events.Type) []string {
	var out []string
	for _, ev := range evs {
		if slices.Contains(types, ev.Type) {
			out = append(out, string(ev.Type)+":"+callOf(ev))
		}
	}
	return out
}

func resultIDs(tv projections.Turn) []string {
	var ids []string
	for _, r := range tv.Results {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestParallelCallsOverlapAndCommitInCallOrder(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	start := time.Now()
	tv := submit(t, n, s, "t1", nap("c1", 600), nap("c2", 200), nap("c3", 400))
	t.Logf("turn of 0.6 s, 0.2 s and 0.4 s calls took %s", time.Since(start))
	if got := resultIDs(tv); !slices.Equal(got, []string{"c1", "c2", "c3"}) {
		t.Fatalf("results in order %v, want call order [c1 c2 c3]", got)
	}
	evs := recorded(t, n, s)
	completed := sequence(evs, events.TypeToolCallCompleted)
	if want := []string{"ToolCallCompleted:c2", "ToolCallCompleted:c3", "ToolCallCompleted:c1"}; !slices.Equal(completed, want) {
		t.Fatalf("completion order %v, want %v", completed, want)
	}
	// All three were handed to the tool actors before any completed: they
	// overlapped. (Read-only, safe calls run without a durable claim, so
	// their ToolCallStarted is recorded with their completion.)
	seq := sequence(evs, events.TypeToolCallRequested, events.TypeToolCallCompleted)
	for i := range 3 {
		if !strings.HasPrefix(seq[i], "ToolCallRequested") {
			t.Fatalf("events %v: a call completed before all three were requested", seq)
		}
	}
	committed := sequence(evs, events.TypeResultCommitted)
	if want := []string{"ResultCommitted:c1", "ResultCommitted:c2", "ResultCommitted:c3"}; !slices.Equal(committed, want) {
		t.Fatalf("commit order %v, want %v", committed, want)
	}
}

func TestExclusiveCallIsATwoWayBarrier(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	submit(t, n, s, "t1", nap("p1", 50), mutate("e", 50), nap("p2", 50))
	// A read-only call is handed to its tool actor when it is requested
	// and records its claim in its outcome (docs/events.md,
	// ToolCallStarted), so its request is where it may start.
	got := sequence(recorded(t, n, s), events.TypeToolCallRequested, events.TypeToolCallStarted, events.TypeToolCallCompleted)
	want := []string{
		"ToolCallRequested:p1", "ToolCallCompleted:p1",
		"ToolCallRequested:e", "ToolCallStarted:e", "ToolCallCompleted:e",
		"ToolCallRequested:p2", "ToolCallCompleted:p2",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestCapRunsSixParallelCallsInThreeWaves(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Concurrency.ToolCalls = 2
	tt := &testTools{}
	n := startNode(t, t.TempDir(), &cfg, tt)
	defer n.Close()
	s := openSession(t, n)
	var calls []events.CallSpec
	for i := range 6 {
		calls = append(calls, nap(fmt.Sprintf("c%d", i), 100))
	}
	submit(t, n, s, "t1", calls...)
	// Requests are issued as slots free up: never more than 2 requested and
	// unsettled at once, and 6 in all.
	running, peak, total := 0, 0, 0
	for _, ev := range recorded(t, n, s) {
		switch ev.Type {
		case events.TypeToolCallRequested:
			running++
			total++
			peak = max(peak, running)
		case events.TypeToolCallCompleted:
			running--
		}
	}
	if peak != 2 || total != 6 {
		t.Fatalf("peak in flight=%d over %d calls, want 2 over 6 (three waves)", peak, total)
	}
}

func TestBlockedCallsRunNothing(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	tv := submit(t, n, s, "t1",
		events.CallSpec{ID: "a", Name: "no_such_tool", Arguments: json.RawMessage(`{}`)},
		events.CallSpec{ID: "b", Name: "nap", Arguments: json.RawMessage(`{}`)},
		events.CallSpec{ID: "c", Name: "nap", Arguments: json.RawMessage(`{"ms":1,"extra":true}`)},
		events.CallSpec{ID: "d", Name: "nap", Arguments: json.RawMessage(`{"ms":"1"}`)},
		events.CallSpec{ID: "e", Name: "nap", Arguments: json.RawMessage(`"{\"ms\": 1, \"ta"`)},
	)
	want := []events.Block{events.BlockUnavailable, events.BlockInvalidArguments, events.BlockInvalidArguments, events.BlockInvalidArguments, events.BlockInvalidArguments}
	for i, r := range tv.Results {
		if r.Outcome != events.OutcomeBlocked || r.Block != want[i] {
			t.Errorf("call %s: %s/%s, want blocked/%s", r.ID, r.Outcome, r.Block, want[i])
		}
		if len(r.Content) == 0 || r.Content[0].Text == "" {
			t.Errorf("call %s: blocked without a reason for the model", r.ID)
		}
	}
	evs := recorded(t, n, s)
	if got := sequence(evs, events.TypeToolCallRequested, events.TypeToolCallStarted); len(got) != 0 {
		t.Fatalf("blocked calls were dispatched: %v", got)
	}
	if tt.runs.Load() != 0 {
		t.Fatalf("a tool ran %d times, want 0", tt.runs.Load())
	}
	blocked := map[string]uint64{}
	for _, ev := range evs {
		switch ev.Type {
		case events.TypeDispatchBlocked:
			blocked[callOf(ev)] = ev.Seq
		case events.TypeResultCommitted:
			if b, ok := blocked[callOf(ev)]; !ok || b > ev.Seq {
				t.Errorf("call %s committed at seq %d without an earlier DispatchBlocked", callOf(ev), ev.Seq)
			}
		}
	}
}

func TestOutputCapKeepsTheFullOutput(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	tv := submit(t, n, s, "t1", events.CallSpec{ID: "a", Name: "big", Arguments: json.RawMessage(`{"ms":0}`)})
	r := tv.Results[0]
	if !r.Truncated || r.FullOutput == nil {
		t.Fatalf("result truncated=%v full_output=%v, want a cut result naming its full output", r.Truncated, r.FullOutput)
	}
	text := r.Content[0].Text
	if len(text) > 51200 || strings.Count(text, "\n") > 2000 {
		t.Fatalf("cut result is %d bytes, %d lines; want ≤ 51200 bytes and ≤ 2000 lines", len(text), strings.Count(text, "\n"))
	}
	if r.FullOutput.Store != "cs_outputs" {
		t.Fatalf("full_output.store=%q, want cs_outputs", r.FullOutput.Store)
	}
	if !strings.Contains(text, r.FullOutput.Object) {
		t.Fatalf("cut result does not say where the full output is")
	}
	full, err := n.Output(context.Background(), "default", r.FullOutput.Object)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) < 100_000 || !strings.HasPrefix(string(full), text[:1000]) || int64(len(full)) != r.FullOutput.Bytes {
		t.Fatalf("full output is %d bytes (ref says %d), want the whole ≥ 100 kB output", len(full), r.FullOutput.Bytes)
	}
	if _, err := n.Output(context.Background(), "other", r.FullOutput.Object); err == nil {
		t.Fatalf("another tenant read the output")
	}
}

func TestSameTurnIDTwiceRunsNothingTwice(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	first := submit(t, n, s, "t1", mutate("a", 10))
	second := submit(t, n, s, "t1", mutate("a", 10))
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(second)
	if string(a) != string(b) {
		t.Fatalf("second answer %s, want the first %s", b, a)
	}
	// The same id with other calls is refused: the record cannot answer
	// for calls it does not hold (docs/spec.md §8).
	_, err := n.SubmitTurn(context.Background(), "default", s, "t1", []events.CallSpec{mutate("a", 10), mutate("b", 10)}, true)
	if !errors.Is(err, node.ErrConflict) || !errors.Is(err, core.ErrTurnMismatch) {
		t.Fatalf("same id, other calls: err=%v, want ErrConflict and core.ErrTurnMismatch", err)
	}
	if tt.runs.Load() != 1 {
		t.Fatalf("tool ran %d times, want 1", tt.runs.Load())
	}
}

func TestRestartKeepsEveryTranscript(t *testing.T) {
	dir := t.TempDir()
	tt := &testTools{}
	n := startNode(t, dir, nil, tt)
	s1, s2 := openSession(t, n), openSession(t, n)
	submit(t, n, s1, "t1", nap("a", 10), mutate("b", 10))
	submit(t, n, s2, "t1", nap("a", 10))
	submit(t, n, s1, "t2", nap("c", 10))
	before := map[string][]byte{}
	for _, s := range []string{s1, s2} {
		tr, err := n.Transcript(context.Background(), "default", s)
		if err != nil {
			t.Fatal(err)
		}
		before[s], _ = projections.Marshal(tr)
	}
	n.Close()

	n = startNode(t, dir, nil, tt)
	defer n.Close()
	for _, s := range []string{s1, s2} {
		tr, err := n.Transcript(context.Background(), "default", s)
		if err != nil {
			t.Fatal(err)
		}
		after, _ := projections.Marshal(tr)
		if string(after) != string(before[s]) {
			t.Fatalf("session %s transcript changed across a restart:\n%s\nwant\n%s", s, after, before[s])
		}
	}
	// The session still takes turns after the restart.
	submit(t, n, s1, "t3", nap("d", 1))
}

func TestCancelTurnReachesRunningToolsAndStopsWaitingOnes(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	ctx := context.Background()
	// A long exclusive call, then a parallel one that waits behind it.
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{mutate("long", 30_000), nap("after", 1)}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return slices.Contains(sequence(recorded(t, n, s), events.TypeToolCallStarted), "ToolCallStarted:long")
	})
	start := time.Now()
	if err := n.CancelTurn(ctx, "default", s, "t1", "", "user pressed stop"); err != nil {
		t.Fatal(err)
	}
	tv := submit(t, n, s, "t1")
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("cancelled turn took %s to finish: the tool never saw the cancellation", took)
	}
	if r := tv.Results[0]; r.Outcome != events.OutcomeIndeterminate {
		t.Fatalf("cancelled running never call: %s, want indeterminate", r.Outcome)
	}
	if r := tv.Results[1]; r.Outcome != events.OutcomeError || !strings.Contains(r.Content[0].Text, "cancelled before it ran") {
		t.Fatalf("cancelled waiting call: %+v, want an error saying it never ran", r)
	}
	if tt.runs.Load() != 1 {
		t.Fatalf("tools ran %d times, want 1 (the waiting call must not run)", tt.runs.Load())
	}
}

func TestNoCollateralCancellation(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	tv := submit(t, n, s, "t1", nap("ok1", 100), mutate("fail-now", 1), nap("ok2", 100), nap("fail-too", 1), nap("ok3", 100))
	want := []events.Outcome{events.OutcomeOK, events.OutcomeError, events.OutcomeOK, events.OutcomeError, events.OutcomeOK}
	for i, r := range tv.Results {
		if r.Outcome != want[i] {
			t.Errorf("call %s: %s, want %s", r.ID, r.Outcome, want[i])
		}
	}
	// The safe nap that failed was retried up to max_attempts; its siblings
	// ran once each.
	if r := tv.Results[3]; r.Attempts != config.DefaultMaxAttempts {
		t.Errorf("failing safe call ran %d attempts, want %d", r.Attempts, config.DefaultMaxAttempts)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestIdleSessionsArePassivatedAndComeBack(t *testing.T) {
	tt := &testTools{}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Tools: tt.tools(t), IdleTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := openSession(t, n)
	// With a 1 ms idle timeout the actor is retired between (and sometimes
	// during the hand-over of) turns: every turn must still complete, once.
	for i := range 30 {
		tv := submit(t, n, s, fmt.Sprintf("t%d", i), nap("a", 0))
		if tv.Results[0].Outcome != events.OutcomeOK {
			t.Fatalf("turn %d: %+v", i, tv.Results[0])
		}
	}
	if tt.runs.Load() != 30 {
		t.Fatalf("%d runs for 30 turns", tt.runs.Load())
	}
	waitFor(t, func() bool { return n.LiveSessions() == 0 })
	tr, err := n.Transcript(context.Background(), "default", s)
	if err != nil || len(tr.Turns) != 30 {
		t.Fatalf("transcript after passivation: %d turns, %v", len(tr.Turns), err)
	}
}

func TestClosedSessionRefusesTurns(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	s := openSession(t, n)
	submit(t, n, s, "t1", nap("a", 0))
	ctx := context.Background()
	if err := n.CloseSession(ctx, "default", s, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.SubmitTurn(ctx, "default", s, "t2", []events.CallSpec{nap("b", 0)}, true); !errors.Is(err, node.ErrConflict) {
		t.Fatalf("turn on a closed session: %v, want ErrConflict", err)
	}
	// The log ends with the close and its head's signature (docs/audit.md).
	evs := recorded(t, n, s)
	if evs[len(evs)-2].Type != events.TypeSessionClosed {
		t.Fatalf("last event but the signature %s, want SessionClosed", evs[len(evs)-2].Type)
	}
	if last := evs[len(evs)-1]; last.Type != events.TypeHeadSigned || !strings.Contains(string(last.Data), fmt.Sprintf(`"seq":%d,`, evs[len(evs)-2].Seq)) || !strings.Contains(string(last.Data), `"reason":"closed"`) {
		t.Fatalf("last event %s %s, want HeadSigned of the SessionClosed", last.Type, last.Data)
	}
	if tr, err := n.Transcript(ctx, "default", s); err != nil || len(tr.Turns) != 1 {
		t.Fatalf("transcript of a closed session: %v %v", tr, err)
	}
}

// TestExclusiveIsPerSession: an exclusive call is a barrier inside its
// session only; exclusive calls of two sessions overlap.
func TestExclusiveIsPerSession(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	ctx := context.Background()
	s1, s2 := openSession(t, n), openSession(t, n)
	for _, s := range []string{s1, s2} {
		if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{mutate("m", 500)}, false); err != nil {
			t.Fatal(err)
		}
	}
	span := func(s string) (start, end time.Time) {
		submit(t, n, s, "t1") // waits for completion
		for _, ev := range recorded(t, n, s) {
			switch ev.Type {
			case events.TypeToolCallStarted:
				start = ev.Time
			case events.TypeToolCallCompleted:
				end = ev.Time
			}
		}
		return start, end
	}
	a0, a1 := span(s1)
	b0, b1 := span(s2)
	if !(a0.Before(b1) && b0.Before(a1)) {
		t.Fatalf("exclusive calls of two sessions ran one after the other ([%v, %v] and [%v, %v]); exclusive must be per session", a0, a1, b0, b1)
	}
}

// TestWorkspaceBelongsToTheSandbox: a root node gives a new workspace to the
// uid sandboxed commands run as, and a sandboxed shell can write it.
func TestWorkspaceBelongsToTheSandbox(t *testing.T) {
	n := startNode(t, t.TempDir(), nil, &testTools{})
	defer n.Close()
	info, err := n.OpenSession(context.Background(), "default", "", "")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(info.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := n.Sandbox().Owner("default")
	if got := int(fi.Sys().(*syscall.Stat_t).Uid); got != uid {
		t.Errorf("workspace owned by uid %d, want the sandbox's %d", got, uid)
	}
	tv := submit(t, n, info.Session, "t1", events.CallSpec{ID: "s", Name: "shell", Arguments: json.RawMessage(`{"command":"echo hi > made.txt && cat made.txt"}`)})
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK || !strings.Contains(r.Content[0].Text, "hi\nexit code 0") {
		t.Errorf("sandboxed write in the workspace: %+v", r)
	}
}

// TestPassivatedSessionIsSnapshotted: when a session's actor passivates,
// the node writes the session's snapshot (natslog.Log.Compact), so its next
// read does not walk the log, and drops its cached tip; the transcript read
// after it is the same.
func TestPassivatedSessionIsSnapshotted(t *testing.T) {
	tt := &testTools{}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Tools: tt.tools(t), IdleTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := openSession(t, n)
	// Two turns: fewer log messages than a read needs to write the
	// snapshot itself, so what writes it here is the passivation.
	for i := range 2 {
		submit(t, n, s, fmt.Sprintf("t%d", i), nap("a", 0))
	}
	want := recorded(t, n, s)
	snapshotHas := snapshotOf(t, n, s)
	waitFor(t, func() bool { return snapshotHas(want[len(want)-1].ID) })
	// An idle session holds no snapshot tip once compacted: the tip is
	// memory only a session still writing needs.
	waitFor(t, func() bool { return n.SnapshotTips() == 0 })
	tr, err := n.Transcript(context.Background(), "default", s)
	if err != nil || len(tr.Turns) != 2 {
		t.Fatalf("transcript after the snapshot: %d turns, %v", len(tr.Turns), err)
	}
}

// TestBusySessionSnapshotKeptCurrent: a session whose actor never
// passivates (busy, or its node about to crash) still has a current
// snapshot: the node brings it up to date after its durable batches (once
// they stop for CompactQuiet, or CompactMaxDelay after the first), so the
// first read after a restart or a takeover does not walk the log.
func TestBusySessionSnapshotKeptCurrent(t *testing.T) {
	tt := &testTools{}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Tools: tt.tools(t), IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := openSession(t, n)
	snapshotHas := snapshotOf(t, n, s)
	for i := range 3 {
		submit(t, n, s, fmt.Sprintf("t%d", i), nap("a", 0))
		want := recorded(t, n, s)
		last := want[len(want)-1]
		if last.Type != events.TypeTurnCompleted {
			t.Fatalf("turn %d: the log ends with %s, want %s", i, last.Type, events.TypeTurnCompleted)
		}
		waitFor(t, func() bool { return snapshotHas(last.ID) })
	}
	tr, err := n.Transcript(context.Background(), "default", s)
	if err != nil || len(tr.Turns) != 3 {
		t.Fatalf("transcript from the snapshot: %d turns, %v", len(tr.Turns), err)
	}
}

// snapshotOf returns whether the first chunk of session s's snapshot, as
// stored in n's snapshot stream, holds an event id.
func snapshotOf(t *testing.T, n *node.Node, s string) func(id string) bool {
	t.Helper()
	js := jsOf(t, n)
	snaps, err := js.Stream(context.Background(), natslog.DefaultSnapshotStream)
	if err != nil {
		t.Fatal(err)
	}
	subj := fmt.Sprintf("%s_snap.default.%s.0", natslog.DefaultSubjectPrefix, s)
	return func(id string) bool {
		m, err := snaps.GetLastMsgForSubject(context.Background(), subj)
		return err == nil && strings.Contains(string(m.Data), id)
	}
}

// TestSignedHeadDropsItsEvent: once a session's head is signed into a
// checkpoint, the checkpointer no longer holds its last event (its data and
// encoding): an idle session keeps only the checkpoint's revision.
func TestSignedHeadDropsItsEvent(t *testing.T) {
	tt := &testTools{}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Tools: tt.tools(t), CheckpointInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := openSession(t, n)
	submit(t, n, s, "t1", nap("a", 0))
	want := recorded(t, n, s)
	last := want[len(want)-1].Seq
	waitFor(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ch, err := n.Checkpoints(ctx, "default", s, false)
		if err != nil {
			t.Fatal(err)
		}
		signed := false
		for cp := range ch {
			signed = signed || cp.Seq == last
		}
		return signed
	})
	waitFor(t, func() bool { return n.CheckpointEventsHeld() == 0 })
}
