package crash

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/faults"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
)

// errorAnswer is the API's error body.
type errorAnswer struct {
	Error struct{ Code, Message string }
}

// TestAPanicInASessionStopsOnlyThatSession: a session actor that panics
// (armed by CALLSHEET_PANIC in the faults build) fails that session's work
// in flight with an internal error naming it, logs and counts the panic,
// and leaves the node and another session's turn in flight untouched; the
// session's next turn runs from the log, which settles the call whose
// outcome was lost by its replay policy, as after a crash.
func TestAPanicInASessionStopsOnlyThatSession(t *testing.T) {
	nodeBin, _ := binaries(t)
	dir := t.TempDir()
	cfgPath := writeConfigSleep(t, dir, "0.2", "30s")
	// hold runs until the test creates the release file: session b's turn
	// is in flight, for sure, while session a's actor panics.
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["command_tools"] = append(cfg["command_tools"].([]any), map[string]any{
		"name": "hold", "description": "waits until the test releases it", "guidelines": []string{"crash suite only"},
		"input_schema": map[string]any{"type": "object"},
		"command":      []string{"sh", "-c", `touch "$D/holding"; while [ ! -e "$D/release" ]; do sleep 0.02; done; echo released`},
		"replay":       "safe", "env": map[string]string{"D": dir}, "timeout": "60s", "sandbox": false,
	})
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	p := testnode.Start(t, nodeBin, testnode.Options{
		Data: filepath.Join(dir, "data"), Config: cfgPath, Args: []string{"--metrics-listen", "127.0.0.1:0"},
		Env: []string{"CALLSHEET_PANIC=" + faults.PanicOnOutcome + ":boom," + faults.PanicOnTurn + ":bad"},
	})
	defer p.Stop(t)
	open := func() string {
		var o struct{ Session string }
		if code, err := p.Do("POST", "/v1/sessions", map[string]any{}, &o); err != nil || code != 201 {
			t.Fatalf("open: %d %v", code, err)
		}
		return o.Session
	}
	a, b := open(), open()
	turn := func(session, id, call, tool string) map[string]any {
		return map[string]any{"id": id, "calls": []map[string]any{{"id": call, "name": tool, "arguments": map[string]any{}}}}
	}

	type answer struct {
		code int
		tv   projections.Turn
		err  error
	}
	bDone := make(chan answer, 1)
	go func() {
		var r answer
		r.code, r.err = p.Do("POST", "/v1/sessions/"+b+"/turns", turn(b, "tb", "cb", "hold"), &r.tv)
		bDone <- r
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "holding")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("session b's call never started")
		}
	}

	// a's call runs and its outcome panics a's actor: the caller waiting
	// for the turn hears an internal error naming the session.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	var e errorAnswer
	code, err := p.DoCtx(ctx, "", "POST", "/v1/sessions/"+a+"/turns", turn(a, "boom", "ca", "bump_never"), &e)
	took := time.Since(start)
	if p.Exited() {
		t.Fatalf("the node died: %v\n%s", p.Err(), p.Stderr())
	}
	if err != nil || code != http.StatusInternalServerError || e.Error.Code != "internal" ||
		!strings.Contains(e.Error.Message, "session "+a) || !strings.Contains(e.Error.Message, "retry with the same turn id") {
		t.Fatalf("the turn whose outcome panicked: %d %+v %v; want 500 internal naming session %s\n%s", code, e, err, a, tail(p.Stderr()))
	}
	t.Logf("the waiting caller was answered %v after posting (the call sleeps 0.2 s): %s", took.Round(time.Millisecond), e.Error.Message)
	if runs := countRuns(t, dir, "ca"); runs != 1 {
		t.Fatalf("call ca ran %d times, want 1", runs)
	}

	// A panic on the turn's own message answers it the same way.
	e = errorAnswer{}
	if code, err := p.DoCtx(ctx, "", "POST", "/v1/sessions/"+a+"/turns", turn(a, "bad", "cx", "bump_never"), &e); err != nil ||
		code != http.StatusInternalServerError || e.Error.Code != "internal" || !strings.Contains(e.Error.Message, "session "+a) {
		t.Fatalf("the turn whose message panicked: %d %+v %v; want 500 internal naming session %s", code, e, err, a)
	}
	if countRuns(t, dir, "cx") != 0 {
		t.Fatal("the call of the turn that panicked before it was recorded ran")
	}

	// b's turn was in flight all along (its call waits for the release
	// file), and completes.
	select {
	case r := <-bDone:
		t.Fatalf("session b's turn ended while its call was held: %d %+v %v", r.code, r.tv, r.err)
	default:
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-bDone
	if r.err != nil || r.code != http.StatusOK || r.tv.Status != projections.StatusComplete || r.tv.Results[0].Outcome != events.OutcomeOK {
		t.Fatalf("session b's turn: %d %+v %v; want 200, complete and ok", r.code, r.tv, r.err)
	}

	// a's next turn runs on a fresh actor loaded from the log: the never
	// call whose outcome was lost is indeterminate, ran once, and noticed.
	var next projections.Turn
	if code, err := p.Do("POST", "/v1/sessions/"+a+"/turns", turn(a, "t2", "c2", "bump_safe"), &next); err != nil || code != http.StatusOK {
		t.Fatalf("a's next turn: %d %v", code, err)
	}
	if next.Status != projections.StatusComplete || next.Results[0].Outcome != events.OutcomeOK || countRuns(t, dir, "c2") != 1 {
		t.Fatalf("a's next turn %+v, want complete and ok after one run", next)
	}
	boom := waitTurn(t, p, a, "boom")
	if got := boom.Results[0].Outcome; got != events.OutcomeIndeterminate || countRuns(t, dir, "ca") != 1 {
		t.Fatalf("the call whose outcome was lost: %s after %d runs, want indeterminate after 1", got, countRuns(t, dir, "ca"))
	}
	if len(next.Notices) != 1 || next.Notices[0].Call != "ca" {
		t.Fatalf("a's next turn notices %+v, want one for call ca", next.Notices)
	}

	// What the operator sees: an error line per panic, with the session
	// and the stack, and the counter. The node's watch of each failed turn
	// (it counts the tenant's calls in flight) asks again each second: room
	// for it to post "bad" again, and panic again, were it to.
	time.Sleep(2500 * time.Millisecond)
	logs := p.Stderr()
	if n := strings.Count(logs, "session actor panicked"); n != 2 {
		t.Fatalf("%d panic lines in the log, want 2:\n%s", n, panicLines(logs))
	}
	for _, want := range []string{"level=ERROR msg=\"session actor panicked", "session=" + a, "faults: panic-on-outcome for boom", "actors.outcome.handle", "actors.SubmitTurn.handle"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the log does not say %q:\n%s", want, logs)
		}
	}
	resp, err := http.Get(p.OperatorURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "\ncallsheet_session_panics_total 2\n") {
		t.Fatalf("/metrics does not count 2 panics:\n%s", metrics)
	}
}

// tail is the end of a node's log, for a failure message.
func tail(s string) string {
	return s[max(0, len(s)-3000):]
}

// panicLines are the log's lines about a panic, each cut to 400 bytes.
func panicLines(logs string) string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "panicked") {
			out = append(out, l[:min(len(l), 400)])
		}
	}
	return strings.Join(out, "\n")
}
