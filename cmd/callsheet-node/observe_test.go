package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/otlptest"
	"github.com/callsheet/callsheet/internal/testnode"
)

// The harness's span of the turn request, as its traceparent names it.
const (
	harnessTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	harnessSpan  = "00f067aa0ba902b7"
)

// observedConfig has a replay-safe tool that fails once (so it is
// retried), and a tool a rule asks a person to approve.
func observedConfig(marker string) map[string]any {
	tool := func(name, effect, replay, script string) map[string]any {
		return map[string]any{"name": name, "description": name + " for the observability tests", "guidelines": []string{"for tests"},
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{}}, "effect": effect, "replay": replay,
			"sandbox": false, "command": []string{"sh", "-c", script}}
	}
	return map[string]any{
		"retry":      map[string]any{"initial_delay": "50ms"},
		"permission": map[string]any{"rules": []map[string]any{{"id": "ask-deploy", "tool": "deploy", "action": "ask"}}},
		"command_tools": []map[string]any{
			tool("flaky", "read_only", "safe", fmt.Sprintf("if [ -e %[1]s ]; then echo ok; else touch %[1]s; echo 'temporarily unavailable' >&2; exit 3; fi", marker)),
			tool("deploy", "side_effecting", "never", "echo deployed"),
		},
	}
}

// observedTurn runs, on p, a turn with a call that is retried once and a
// call that waits for an approval, posted with the harness's traceparent;
// it returns the session once the turn is complete.
func observedTurn(t *testing.T, p *testnode.Proc) string {
	t.Helper()
	var s struct{ Session string }
	if code, err := p.Do("POST", "/v1/sessions", map[string]any{}, &s); err != nil || code != http.StatusCreated {
		t.Fatalf("open session: %d %v", code, err)
	}
	body := `{"id":"t1","calls":[{"id":"c1","name":"flaky","arguments":{}},{"id":"c2","name":"deploy","arguments":{}}]}`
	req, _ := http.NewRequest("POST", p.Base+"/v1/sessions/"+s.Session+"/turns?wait=0", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+harnessTrace+"-"+harnessSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("turn: %d %s", resp.StatusCode, b)
	}
	eventually(t, "the approval is asked", func() error {
		var a struct{ Approvals []struct{ Call string } }
		if code, err := p.Do("GET", "/v1/sessions/"+s.Session+"/approvals", nil, &a); err != nil || code != 200 || len(a.Approvals) != 1 {
			return fmt.Errorf("%d %v %+v", code, err, a)
		}
		return nil
	})
	if code, err := p.Do("POST", "/v1/sessions/"+s.Session+"/approvals/c2", map[string]any{"decision": "allow"}, nil); err != nil || code != 200 {
		t.Fatalf("approve: %d %v", code, err)
	}
	eventually(t, "the turn completes", func() error {
		var turn struct {
			Status  string
			Results []struct{ Outcome string }
		}
		if code, err := p.Do("GET", "/v1/sessions/"+s.Session+"/turns/t1", nil, &turn); err != nil || code != 200 || turn.Status != "complete" {
			return fmt.Errorf("%d %v %+v", code, err, turn)
		}
		return nil
	})
	return s.Session
}

// TestTurnTraceAsTheCollectorGotIt: a node exporting to a real OTLP/HTTP
// receiver (the OpenTelemetry Collector's otlpreceiver, in its own
// process) as the standard OTEL_* variables say sends one span for the turn,
// the child of the request's traceparent, one execute_tool span per attempt
// of each call (the failed one with error.type, its retry as an event), and
// one for the approval with its decider: attributes per the GenAI
// conventions and callsheet's own, outcomes as the log records them.
func TestTurnTraceAsTheCollectorGotIt(t *testing.T) {
	col := otlptest.Start(t)
	dir := t.TempDir()
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: filepath.Join(dir, "data"), Config: observedConfig(filepath.Join(dir, "failed-once")),
		Args: []string{"--log-format", "json", "--log-level", "debug"},
		Env:  []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.Endpoint, "OTEL_SERVICE_NAME=callsheet-under-test", "OTEL_BSP_SCHEDULE_DELAY=100"}})
	session := observedTurn(t, p)

	spans := col.Await(t, 30*time.Second, func(spans []otlptest.Span) bool {
		n := 0
		for _, s := range spans {
			if s.Attrs["callsheet.session"] == session {
				n++
			}
		}
		return n >= 5 // the turn, two attempts of flaky, one of deploy, the approval
	})
	t.Logf("the trace as the Collector received it:\n%s", otlptest.Tree(spans))
	t.Logf("the Collector's OTLP JSON:\n%s", col.File())

	var turn *otlptest.Span
	byName := map[string][]otlptest.Span{}
	for i, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
		if s.Name == "callsheet.turn" && s.Attrs["callsheet.session"] == session {
			turn = &spans[i]
		}
	}
	if turn == nil {
		t.Fatalf("no callsheet.turn span of session %s", session)
	}
	if turn.TraceID != harnessTrace || turn.ParentSpanID != harnessSpan {
		t.Errorf("turn span: trace %s parent %s, want the traceparent's %s and %s", turn.TraceID, turn.ParentSpanID, harnessTrace, harnessSpan)
	}
	if got := turn.Resource["service.name"]; got != "callsheet-under-test" {
		t.Errorf("service.name=%v, want OTEL_SERVICE_NAME's callsheet-under-test", got)
	}
	for k, want := range map[string]any{"callsheet.tenant": "default", "callsheet.turn": "t1", "callsheet.calls": int64(2), "callsheet.outcomes.ok": int64(2)} {
		if turn.Attrs[k] != want {
			t.Errorf("turn span %s=%v (%T), want %v", k, turn.Attrs[k], turn.Attrs[k], want)
		}
	}
	child := func(s otlptest.Span) {
		t.Helper()
		if s.TraceID != harnessTrace || s.ParentSpanID != turn.SpanID {
			t.Errorf("span %s: trace %s parent %s, want trace %s parent %s (the turn)", s.Name, s.TraceID, s.ParentSpanID, harnessTrace, turn.SpanID)
		}
	}
	flaky := byName["execute_tool flaky"]
	if len(flaky) != 2 {
		t.Fatalf("%d execute_tool flaky spans, want 2 (one per attempt)", len(flaky))
	}
	for i, s := range flaky {
		child(s)
		for k, want := range map[string]any{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "flaky", "gen_ai.tool.call.id": "c1",
			"gen_ai.tool.type": "function", "callsheet.effect": "read_only", "callsheet.replay": "safe", "callsheet.attempt": int64(i + 1),
			"callsheet.session": session, "callsheet.turn": "t1", "callsheet.tenant": "default"} {
			if s.Attrs[k] != want {
				t.Errorf("attempt %d: %s=%v, want %v", i+1, k, s.Attrs[k], want)
			}
		}
	}
	first, second := flaky[0], flaky[1]
	if first.Attrs["callsheet.outcome"] != "error" || first.Attrs["error.type"] != "tool_error" || first.StatusCode != 2 || !strings.Contains(first.StatusMsg, "exited with code 3") {
		t.Errorf("the failed attempt: outcome %v error.type %v status %d %q", first.Attrs["callsheet.outcome"], first.Attrs["error.type"], first.StatusCode, first.StatusMsg)
	}
	if len(first.Events) != 1 || first.Events[0].Name != "callsheet.retry_scheduled" || first.Events[0].Attrs["callsheet.retry.attempt"] != int64(2) {
		t.Errorf("the failed attempt's events: %+v, want callsheet.retry_scheduled of attempt 2", first.Events)
	}
	if second.Attrs["callsheet.outcome"] != "ok" || second.Attrs["error.type"] != nil || second.StatusCode == 2 {
		t.Errorf("the retry: outcome %v error.type %v status %d", second.Attrs["callsheet.outcome"], second.Attrs["error.type"], second.StatusCode)
	}
	approval := byName["callsheet.approval deploy"]
	if len(approval) != 1 {
		t.Fatalf("%d approval spans, want 1", len(approval))
	}
	child(approval[0])
	for k, want := range map[string]any{"callsheet.approval.decision": "granted", "callsheet.approval.decider": "local", "callsheet.rule": "ask-deploy", "gen_ai.tool.call.id": "c2"} {
		if approval[0].Attrs[k] != want {
			t.Errorf("approval span %s=%v, want %v", k, approval[0].Attrs[k], want)
		}
	}
	deploy := byName["execute_tool deploy"]
	if len(deploy) != 1 || deploy[0].Attrs["callsheet.outcome"] != "ok" || deploy[0].Attrs["callsheet.effect"] != "side_effecting" {
		t.Fatalf("execute_tool deploy spans: %+v", deploy)
	}
	child(deploy[0])
	if deploy[0].Start.Before(approval[0].End) {
		t.Errorf("deploy ran at %s, before its approval ended at %s", deploy[0].Start, approval[0].End)
	}
	if turn.End.Before(deploy[0].End) || turn.Start.After(first.Start) {
		t.Errorf("the turn span [%s, %s] does not hold its calls", turn.Start, turn.End)
	}
}

// logLine is one JSON log line.
type logLine map[string]any

// jsonLines parses every line of a JSON log, failing on one that is not
// a JSON object with time, level and msg.
func jsonLines(t *testing.T, log string) []logLine {
	t.Helper()
	var out []logLine
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var l logLine
		d := json.NewDecoder(bytes.NewReader([]byte(line)))
		d.UseNumber()
		if err := d.Decode(&l); err != nil {
			t.Fatalf("a log line is not JSON: %v: %s", err, line)
		}
		if l["time"] == nil || l["level"] == nil || l["msg"] == nil {
			t.Fatalf("a log line lacks time, level or msg: %s", line)
		}
		out = append(out, l)
	}
	return out
}

// TestTurnJSONLog: with --log-format json, a turn with a retried call and
// an approval logs, as JSON objects, the turn received, the approval asked,
// the retry, the approval decided and who decided, each attempt settled (at
// debug), and the turn completed with its outcomes and duration; shutdown
// logs its start and end.
func TestTurnJSONLog(t *testing.T) {
	dir := t.TempDir()
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: filepath.Join(dir, "data"), Config: observedConfig(filepath.Join(dir, "failed-once")),
		Args: []string{"--log-format", "json", "--log-level", "debug"}})
	session := observedTurn(t, p)
	p.Stop(t)

	var turn []logLine
	var msgs []string
	for _, l := range jsonLines(t, p.Stderr()) {
		if l["session"] == session && l["component"] == "turns" {
			turn = append(turn, l)
			msgs = append(msgs, l["msg"].(string))
		}
	}
	var show strings.Builder
	for _, l := range turn {
		b, _ := json.Marshal(l)
		show.Write(append(b, '\n'))
	}
	t.Logf("the turn's JSON log lines:\n%s", show.String())
	find := func(msg string, fields map[string]any) logLine {
		t.Helper()
		for _, l := range turn {
			if l["msg"] != msg {
				continue
			}
			ok := true
			for k, want := range fields {
				if fmt.Sprint(l[k]) != fmt.Sprint(want) {
					ok = false
				}
			}
			if ok {
				return l
			}
		}
		t.Errorf("no %q line with %v among:\n%s", msg, fields, show.String())
		return nil
	}
	if len(msgs) == 0 || msgs[0] != "turn received" || msgs[len(msgs)-1] != "turn completed" {
		t.Errorf("the turn's lines run %q; want turn received first and turn completed last", msgs)
	}
	find("turn received", map[string]any{"tenant": "default", "turn": "t1", "calls": 2, "level": "INFO"})
	find("approval asked", map[string]any{"call": "c2", "tool": "deploy", "rule": "ask-deploy", "level": "INFO"})
	if l := find("retry scheduled", map[string]any{"call": "c1", "tool": "flaky", "attempt": 2, "level": "INFO"}); l != nil && !strings.Contains(fmt.Sprint(l["err"]), "exited with code 3") {
		t.Errorf("the retry's err %q does not say why the attempt failed", l["err"])
	}
	find("approval decided", map[string]any{"call": "c2", "tool": "deploy", "decision": "granted", "decider": "local", "scope": "call"})
	find("call attempt settled", map[string]any{"call": "c1", "attempt": 1, "outcome": "error", "level": "DEBUG"})
	find("call attempt settled", map[string]any{"call": "c1", "attempt": 2, "outcome": "ok", "level": "DEBUG"})
	find("call attempt settled", map[string]any{"call": "c2", "attempt": 1, "outcome": "ok", "level": "DEBUG"})
	if l := find("turn completed", map[string]any{"turn": "t1", "calls": 2, "level": "INFO"}); l != nil {
		if fmt.Sprint(l["outcomes"]) != "map[ok:2]" {
			t.Errorf("turn completed outcomes=%v, want {ok: 2}", l["outcomes"])
		}
		if d, err := l["duration_ms"].(json.Number).Float64(); err != nil || d <= 0 {
			t.Errorf("turn completed duration_ms=%v", l["duration_ms"])
		}
	}
	log := p.Stderr()
	for _, want := range []string{`"msg":"shutting down`, `"msg":"shut down"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not have %s", want)
		}
	}
}

// eventually retries f every 50 ms for up to 20 s.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
