package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/internal/logging/logtest"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
	"github.com/nats-io/nats.go/jetstream"
)

// env is a node behind the API on a test HTTP server.
type env struct {
	t    *testing.T
	node *node.Node
	api  *Server
	srv  *httptest.Server
	// token is sent as the bearer token when set.
	token string
	// js is a client of the node's own server, made by the first
	// consumers.
	js jetstream.JetStream
}

func newEnv(t *testing.T, cfg *config.Config, opts ...Option) *env {
	t.Helper()
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: cfg, Logger: logtest.New(t)})
	if err != nil {
		t.Fatalf("node.New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	s, err := New(n, append([]Option{WithLogger(logtest.New(t))}, opts...)...)
	if err != nil {
		t.Fatalf("api.New: %v", err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(s.CloseStreams) // runs first: followed streams end, Close can finish
	return &env{t: t, node: n, api: s, srv: srv}
}

func (e *env) request(method, path, body string, header ...string) *http.Request {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// do sends a request and returns the status and body.
func (e *env) do(method, path, body string, header ...string) (int, []byte) {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(e.request(method, path, body, header...))
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// must sends a request, checks its status and decodes the JSON answer.
func (e *env) must(method, path, body string, wantStatus int, out any) []byte {
	e.t.Helper()
	status, b := e.do(method, path, body)
	if status != wantStatus {
		e.t.Fatalf("%s %s: status=%d, want %d; body %s", method, path, status, wantStatus, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: answer %s: %v", method, path, b, err)
		}
	}
	return b
}

type sessionAnswer struct {
	Session   string `json:"session"`
	Workspace string `json:"workspace"`
}

func (e *env) open() sessionAnswer {
	e.t.Helper()
	var s sessionAnswer
	e.must("POST", "/v1/sessions", "", http.StatusCreated, &s)
	if s.Session == "" || s.Workspace == "" {
		e.t.Fatalf("session answer %+v: want session and workspace", s)
	}
	return s
}

// wantError checks an error answer's status, code and that its message
// holds each of msgs.
func wantError(t *testing.T, status int, body []byte, wantStatus int, wantCode string, msgs ...string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status=%d, want %d; body %s", status, wantStatus, body)
	}
	var eb errorBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&eb); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	if eb.Error.Code != wantCode {
		t.Fatalf("code=%q, want %q; message %q", eb.Error.Code, wantCode, eb.Error.Message)
	}
	for _, m := range msgs {
		if !strings.Contains(eb.Error.Message, m) {
			t.Errorf("message %q does not mention %q", eb.Error.Message, m)
		}
	}
}

func TestSessionAndTurn(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	body := `{"id": "turn-1", "calls": [
		{"id": "c1", "name": "read", "arguments": {"path": "missing.txt"}},
		{"id": "c2", "name": "write", "arguments": "{\"path\": \"out.txt\", \"content\": \"hello\\n\"}"}
	]}`
	var turn projections.Turn
	raw := e.must("POST", "/v1/sessions/"+s.Session+"/turns", body, http.StatusOK, &turn)
	var shape map[string]json.RawMessage
	_ = json.Unmarshal(raw, &shape)
	for _, k := range []string{"turn", "status", "results", "notices"} {
		if _, ok := shape[k]; !ok {
			t.Errorf("answer %s has no %q", raw, k)
		}
	}
	if turn.Turn != "turn-1" || turn.Status != projections.StatusComplete {
		t.Fatalf("turn=%q status=%q, want turn-1 complete", turn.Turn, turn.Status)
	}
	if len(turn.Results) != 2 {
		t.Fatalf("results=%d, want 2: %s", len(turn.Results), raw)
	}
	if r := turn.Results[0]; r.ID != "c1" || r.Name != "read" || r.Outcome != "error" {
		t.Errorf("results[0]=%+v, want c1 read error", r)
	}
	if r := turn.Results[1]; r.ID != "c2" || r.Name != "write" || r.Outcome != "ok" || r.Attempts != 1 {
		t.Errorf("results[1]=%+v, want c2 write ok after 1 attempt", r)
	}
	if b, err := os.ReadFile(filepath.Join(s.Workspace, "out.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("out.txt=%q, %v; want hello", b, err)
	}
	var got projections.Turn
	e.must("GET", "/v1/sessions/"+s.Session+"/turns/turn-1", "", http.StatusOK, &got)
	if got.Status != projections.StatusComplete || len(got.Results) != 2 {
		t.Errorf("GET turn: %+v, want the complete turn", got)
	}
}

func TestInvalidArgumentsAreResults(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	body := `{"calls": [
		{"id": "c1", "name": "read", "arguments": "{\"path\": \"a"},
		{"id": "c2", "name": "read", "arguments": {"path": 3}},
		{"id": "c3", "name": "no_such_tool", "arguments": {}}
	]}`
	var turn projections.Turn
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", body, http.StatusOK, &turn)
	want := []struct{ outcome, block string }{{"blocked", "invalid_arguments"}, {"blocked", "invalid_arguments"}, {"blocked", "unavailable"}}
	for i, w := range want {
		if r := turn.Results[i]; string(r.Outcome) != w.outcome || string(r.Block) != w.block {
			t.Errorf("results[%d]: %s/%s, want %s/%s", i, r.Outcome, r.Block, w.outcome, w.block)
		}
	}
	if turn.Turn == "" {
		t.Errorf("a turn without id got no minted id")
	}
}

// TestIntegersByValue: JSON Schema counts 2.0 as the integer 2, so the
// built-in read tool (whose limit is a Go int) runs with limit 2; 2.5 and
// "2" stay invalid_arguments (docs/spec.md §1).
func TestIntegersByValue(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	if err := os.WriteFile(filepath.Join(s.Workspace, "f.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var turn projections.Turn
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"calls": [
		{"id": "a", "name": "read", "arguments": {"path": "f.txt", "limit": 2.0}},
		{"id": "b", "name": "read", "arguments": {"path": "f.txt", "limit": 2e0, "offset": 20e-1}},
		{"id": "c", "name": "read", "arguments": {"path": "f.txt", "limit": 2.5}},
		{"id": "d", "name": "read", "arguments": {"path": "f.txt", "limit": "2"}}
	]}`, http.StatusOK, &turn)
	for i, want := range []string{"     1\tone\n     2\ttwo\n(more lines follow", "     2\ttwo\n     3\tthree\n"} {
		r := turn.Results[i]
		if r.Outcome != "ok" || len(r.Content) == 0 || !strings.HasPrefix(r.Content[0].Text, want) {
			t.Errorf("results[%d] = %+v, want ok with %q", i, r, want)
		}
	}
	for i, want := range []string{"want integer, got number 2.5", `want integer, got string "2"`} {
		r := turn.Results[2+i]
		if r.Block != "invalid_arguments" || !strings.Contains(r.Content[0].Text, want) {
			t.Errorf("results[%d] = %+v, want invalid_arguments saying %q", 2+i, r, want)
		}
	}
}

func TestBadBodies(t *testing.T) {
	e := newEnv(t, nil, WithMaxBody(1024))
	s := e.open()
	path := "/v1/sessions/" + s.Session + "/turns"
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
		msg        string
	}{
		{"empty", "", 400, CodeInvalidBody, "empty"},
		{"not json", "calls", 400, CodeInvalidBody, "not valid JSON"},
		{"cut off", `{"calls": [`, 400, CodeInvalidBody, "ends in the middle"},
		{"array", `[]`, 400, CodeInvalidBody, "send a JSON object"},
		{"unknown field", `{"calls": [{"id":"a","name":"read","arguments":{}}], "extra": 1}`, 400, CodeInvalidBody, `"extra"`},
		{"unknown call field", `{"calls": [{"id":"a","name":"read","args":{}}]}`, 400, CodeInvalidBody, `"args"`},
		{"wrong type", `{"calls": {"id": "a"}}`, 400, CodeInvalidBody, "calls"},
		{"trailing data", `{"calls": [{"id":"a","name":"read","arguments":{}}]} {}`, 400, CodeInvalidBody, "after its JSON object"},
		{"no calls", `{"id": "t"}`, 400, CodeInvalidBody, `"calls"`},
		{"empty calls", `{"calls": []}`, 400, CodeInvalidBody, `"calls"`},
		{"call without id", `{"calls": [{"name":"read","arguments":{}}]}`, 400, CodeInvalidBody, "calls[0]"},
		{"call without name", `{"calls": [{"id":"a","name":"read"},{"id":"b","arguments":{}}]}`, 400, CodeInvalidBody, "calls[1]"},
		{"duplicate call ids", `{"calls": [{"id":"a","name":"read"},{"id":"a","name":"read"}]}`, 400, CodeInvalidRequest, "a"},
		{"too large", `{"calls": [{"id":"a","name":"write","arguments":{"path":"x","content":"` + strings.Repeat("x", 2000) + `"}}]}`, 413, CodeBodyTooLarge, "1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := e.do("POST", path, tc.body)
			wantError(t, status, b, tc.status, tc.code, tc.msg)
		})
	}
	t.Run("bad wait", func(t *testing.T) {
		status, b := e.do("POST", path+"?wait=maybe", `{"calls": [{"id":"a","name":"read","arguments":{}}]}`)
		wantError(t, status, b, 400, CodeInvalidRequest, "wait")
	})
	t.Run("session body", func(t *testing.T) {
		status, b := e.do("POST", "/v1/sessions", `{"workspace": 7}`)
		wantError(t, status, b, 400, CodeInvalidBody, "workspace")
		status, b = e.do("POST", "/v1/sessions", `{"workspace": "../escape"}`)
		wantError(t, status, b, 400, CodeInvalidRequest, "workspace")
		status, b = e.do("POST", "/v1/sessions", `{"agent": "nobody"}`)
		wantError(t, status, b, 400, CodeInvalidRequest, "nobody")
	})
}

// TestBodyLimitFromConfig: the config's limits.body_bytes sets the body
// limit, and the refusal names it; a duplicate key is a 400 naming it.
func TestBodyLimitFromConfig(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Limits.BodyBytes = 2048
	e := newEnv(t, &cfg)
	s := e.open()
	path := "/v1/sessions/" + s.Session + "/turns"
	status, b := e.do("POST", path, `{"calls": [{"id":"a","name":"write","arguments":{"path":"x","content":"`+strings.Repeat("x", 3000)+`"}}]}`)
	wantError(t, status, b, 413, CodeBodyTooLarge, "2048", "limits.body_bytes")
	status, b = e.do("POST", path, `{"calls": [{"id":"a","name":"read","arguments":{"path":"x","path":"y"}}]}`)
	wantError(t, status, b, 400, CodeInvalidBody, `calls[0].arguments has the key "path" twice`)
	status, b = e.do("POST", "/v1/sessions/"+s.Session+"/answers/c1", `{"answer": {"a": 1, "a": 2}}`)
	wantError(t, status, b, 400, CodeInvalidBody, `answer has the key "a" twice`)
}

func TestNotFound(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/sessions/01NOSUCHSESSION/turns", `{"calls": [{"id":"a","name":"read","arguments":{}}]}`},
		{"GET", "/v1/sessions/01NOSUCHSESSION/turns/t", ""},
		{"GET", "/v1/sessions/01NOSUCHSESSION/transcript", ""},
		{"GET", "/v1/sessions/01NOSUCHSESSION/events?follow=false", ""},
		{"GET", "/v1/sessions/" + s.Session + "/turns/no-such-turn", ""},
		{"GET", "/v1/outputs/default/no/such/object", ""},
		{"GET", "/v1/nowhere", ""},
	} {
		status, b := e.do(tc.method, tc.path, tc.body)
		t.Run(tc.method+" "+tc.path, func(t *testing.T) { wantError(t, status, b, 404, CodeNotFound) })
	}
	status, b := e.do("DELETE", "/v1/sessions", "")
	wantError(t, status, b, 405, CodeMethod, "POST")
	// Decisions about calls that wait for nothing conflict with the state.
	status, b = e.do("POST", "/v1/sessions/"+s.Session+"/approvals/c1", `{"decision":"allow"}`)
	wantError(t, status, b, 409, CodeConflict, "not waiting for an approval")
	status, b = e.do("POST", "/v1/sessions/"+s.Session+"/approvals/c1", `{"decision":"maybe"}`)
	wantError(t, status, b, 400, CodeInvalidBody, "allow")
	status, b = e.do("POST", "/v1/sessions/"+s.Session+"/rewind", `{"call":"c1"}`)
	wantError(t, status, b, 404, CodeNotFound, "nothing to rewind")
	status, b = e.do("POST", "/v1/sessions/"+s.Session+"/answers/c1", `{"answer":1}`)
	wantError(t, status, b, 409, CodeConflict, "not waiting for an answer")
}

func TestIdempotentTurn(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	path := "/v1/sessions/" + s.Session + "/turns"
	body := `{"id": "again", "calls": [{"id": "w", "name": "write", "arguments": {"path": "f.txt", "content": "one"}}]}`
	first := e.must("POST", path, body, http.StatusOK, nil)
	// Change the file: a second run of the write would restore "one".
	if err := os.WriteFile(filepath.Join(s.Workspace, "f.txt"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := len(e.events(s.Session, ""))
	second := e.must("POST", path, body, http.StatusOK, nil)
	if !bytes.Equal(first, second) {
		t.Fatalf("second answer differs:\n%s\n%s", first, second)
	}
	if b, _ := os.ReadFile(filepath.Join(s.Workspace, "f.txt")); string(b) != "changed" {
		t.Errorf("f.txt=%q: the repeated turn ran its write again", b)
	}
	if after := len(e.events(s.Session, "")); after != before {
		t.Errorf("events: %d after the repeat, %d before; want no new event", after, before)
	}
}

// TestTurnIDReusedForOtherCalls: a turn id is an idempotency key
// (docs/spec.md §8). Sent again with the same calls, however the JSON is
// spelled, it answers the record; with other calls it is a 409 that says the
// id was used for other calls, and nothing runs or is recorded.
func TestTurnIDReusedForOtherCalls(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	path := "/v1/sessions/" + s.Session + "/turns"
	first := e.must("POST", path, `{"id": "k", "calls": [{"id": "w", "name": "write", "arguments": {"path": "f.txt", "content": "one"}}, {"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5}}]}`, http.StatusOK, nil)
	before := len(e.events(s.Session, ""))

	same := map[string]string{
		"keys reordered, spaced": `{"id": "k", "calls": [{"id": "w", "name": "write", "arguments": {"content":"one",   "path":"f.txt"}}, {"id": "r", "name": "read", "arguments": {"limit": 5, "path": "f.txt"}}]}`,
		"arguments as a string":  `{"id": "k", "calls": [{"id": "w", "name": "write", "arguments": "{\"path\": \"f.txt\", \"content\": \"one\"}"}, {"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5}}]}`,
		"5.0 for 5":              `{"id": "k", "calls": [{"id": "w", "name": "write", "arguments": {"path": "f.txt", "content": "one"}}, {"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5.0}}]}`,
		"escaped string":         `{"id": "k", "calls": [{"id": "w", "name": "write", "arguments": {"path": "f\u002etxt", "content": "one"}}, {"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5}}]}`,
	}
	for name, body := range same {
		if got := e.must("POST", path, body, http.StatusOK, nil); !bytes.Equal(got, first) {
			t.Errorf("%s: answer %s, want the recorded %s", name, got, first)
		}
	}
	other := map[string]struct{ body, says string }{
		"other argument value": {`{"id": "k", "calls": [{"id": "w", "name": "write", "arguments": {"path": "f.txt", "content": "two"}}, {"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5}}]}`, `calls[0] (id "w") has other arguments`},
		"5.5 for 5":            {`{"id": "k", "calls": [{"id": "w", "name": "write", "arguments": {"path": "f.txt", "content": "one"}}, {"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5.5}}]}`, `calls[1] (id "r") has other arguments`},
		"an extra argument":    {`{"id": "k", "calls": [{"id": "w", "name": "write", "arguments": {"path": "f.txt", "content": "one"}}, {"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5, "offset": 1}}]}`, `calls[1] (id "r") has other arguments`},
		"other tool":           {`{"id": "k", "calls": [{"id": "w", "name": "edit", "arguments": {"path": "f.txt", "content": "one"}}, {"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5}}]}`, `calls[0] (id "w") names tool "edit"`},
		"other call id":        {`{"id": "k", "calls": [{"id": "w2", "name": "write", "arguments": {"path": "f.txt", "content": "one"}}, {"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5}}]}`, `calls[0] has id "w2"`},
		"fewer calls":          {`{"id": "k", "calls": [{"id": "w", "name": "write", "arguments": {"path": "f.txt", "content": "one"}}]}`, "1 call"},
		"reordered calls":      {`{"id": "k", "calls": [{"id": "r", "name": "read", "arguments": {"path": "f.txt", "limit": 5}}, {"id": "w", "name": "write", "arguments": {"path": "f.txt", "content": "one"}}]}`, `calls[0] has id "r"`},
	}
	for name, c := range other {
		status, b := e.do("POST", path, c.body)
		wantError(t, status, b, http.StatusConflict, CodeTurnIDReused, `turn id "k"`, "already used for other calls", c.says, "new turn id")
		if t.Failed() {
			t.Fatalf("case %s", name)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(s.Workspace, "f.txt")); string(got) != "one" {
		t.Errorf("f.txt=%q: a refused repeat ran its write", got)
	}
	if after := len(e.events(s.Session, "")); after != before {
		t.Errorf("events: %d after the repeats, %d before; want none recorded", after, before)
	}
	// The refusal answers for a turn still running, too (?wait=0).
	e.must("POST", path+"?wait=0", `{"id": "k2", "calls": [{"id": "a", "name": "read", "arguments": {"path": "."}}]}`, http.StatusAccepted, nil)
	status, b := e.do("POST", path+"?wait=0", `{"id": "k2", "calls": [{"id": "a", "name": "read", "arguments": {"path": ".."}}]}`)
	wantError(t, status, b, http.StatusConflict, CodeTurnIDReused, `turn id "k2"`)
}

func TestWaitZero(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	var ans map[string]any
	e.must("POST", "/v1/sessions/"+s.Session+"/turns?wait=0", `{"id": "bg", "calls": [{"id":"a","name":"write","arguments":{"path":"x","content":"y"}}]}`, http.StatusAccepted, &ans)
	if ans["turn"] != "bg" || ans["status"] != "running" || len(ans) != 2 {
		t.Fatalf("answer %v, want {turn: bg, status: running}", ans)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var turn projections.Turn
		e.must("GET", "/v1/sessions/"+s.Session+"/turns/bg", "", http.StatusOK, &turn)
		if turn.Status == projections.StatusComplete {
			if len(turn.Results) != 1 || turn.Results[0].Outcome != "ok" {
				t.Fatalf("turn %+v, want one ok result", turn)
			}
			return
		}
		if turn.Status != projections.StatusRunning || time.Now().After(deadline) {
			t.Fatalf("turn %+v: want running, then complete", turn)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// events reads a session's recorded events as NDJSON.
func (e *env) events(session, query string) []EventItem {
	e.t.Helper()
	status, b := e.do("GET", "/v1/sessions/"+session+"/events?follow=false"+query, "")
	if status != http.StatusOK {
		e.t.Fatalf("events: status %d: %s", status, b)
	}
	var out []EventItem
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	for dec.More() {
		var it EventItem
		if err := dec.Decode(&it); err != nil {
			e.t.Fatalf("events: %v in %s", err, b)
		}
		out = append(out, it)
	}
	return out
}

func TestEventsNDJSON(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"id":"t1","calls":[{"id":"c1","name":"write","arguments":{"path":"a","content":"b"}}]}`, http.StatusOK, nil)
	resp, err := http.DefaultClient.Do(e.request("GET", "/v1/sessions/"+s.Session+"/events?follow=false", ""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("content type %q, want application/x-ndjson", ct)
	}
	items := e.events(s.Session, "")
	if len(items) < 5 {
		t.Fatalf("%d events, want at least SessionOpened, TurnReceived, requested, started, completed, committed, turn completed", len(items))
	}
	for i, it := range items {
		if it.Seq != uint64(i+1) {
			t.Fatalf("events[%d].seq=%d, want %d", i, it.Seq, i+1)
		}
		if it.ID == "" || it.Type == "" || it.Time.IsZero() || len(it.Data) == 0 {
			t.Errorf("events[%d]=%+v: want id, type, time and data", i, it)
		}
	}
	if items[0].Type != "SessionOpened" || items[len(items)-1].Type != "TurnCompleted" {
		t.Errorf("first %s, last %s; want SessionOpened … TurnCompleted", items[0].Type, items[len(items)-1].Type)
	}
	sawStarted := false
	for _, it := range items {
		if it.Type != "ToolCallStarted" {
			continue
		}
		sawStarted = true
		var d struct {
			Call    string `json:"call"`
			Attempt int    `json:"attempt"`
		}
		_ = json.Unmarshal(it.Data, &d)
		if d.Call != "c1" || d.Attempt != 1 {
			t.Errorf("ToolCallStarted data %s: want call c1, attempt 1", it.Data)
		}
	}
	if !sawStarted {
		t.Errorf("no ToolCallStarted event")
	}
	// after skips what the client has seen.
	rest := e.events(s.Session, "&after=2")
	if len(rest) != len(items)-2 || rest[0].Seq != 3 {
		t.Errorf("after=2: %d events from seq %d, want %d from 3", len(rest), rest[0].Seq, len(items)-2)
	}
	status, b := e.do("GET", "/v1/sessions/"+s.Session+"/events?after=-1", "")
	wantError(t, status, b, 400, CodeInvalidRequest, "after")
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct{ id, event, data string }

// readSSE reads SSE events from r until stop says to, or the stream ends.
func readSSE(t *testing.T, r io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur != (sseEvent{}) {
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				t.Fatalf("event %q has two data lines", cur.id)
			}
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

func checkSSE(t *testing.T, evs []sseEvent) {
	t.Helper()
	for i, ev := range evs {
		var it EventItem
		if err := json.Unmarshal([]byte(ev.data), &it); err != nil {
			t.Fatalf("event %d data %q: %v", i, ev.data, err)
		}
		if want := uint64(i + 1); it.Seq != want || ev.id != itoa(want) || ev.event != string(it.Type) {
			t.Fatalf("event %d: id %q event %q data seq %d type %s; want id and seq %d, event = type", i, ev.id, ev.event, it.Seq, it.Type, want)
		}
	}
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestEventsSSE(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"id":"t1","calls":[{"id":"c1","name":"read","arguments":{"path":"."}}]}`, http.StatusOK, nil)
	resp, err := http.DefaultClient.Do(e.request("GET", "/v1/sessions/"+s.Session+"/events?follow=false", "", "Accept", "text/event-stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q, want text/event-stream", ct)
	}
	evs := readSSE(t, resp.Body, nil)
	if len(evs) == 0 || evs[len(evs)-1].event != "TurnCompleted" {
		t.Fatalf("events %v: want the whole log, ending with TurnCompleted", evs)
	}
	checkSSE(t, evs)
}

func TestEventsFollow(t *testing.T) {
	e := newEnv(t, nil, WithKeepAlive(20*time.Millisecond))
	s := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := e.request("GET", "/v1/sessions/"+s.Session+"/events", "", "Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The stream is live: a turn posted now shows up in it.
	done := make(chan []sseEvent, 1)
	go func() { done <- readSSE(t, resp.Body, func(ev sseEvent) bool { return ev.event == "TurnCompleted" }) }()
	time.Sleep(50 * time.Millisecond) // keep-alives flow meanwhile
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"id":"t1","calls":[{"id":"c1","name":"write","arguments":{"path":"a","content":"b"}}]}`, http.StatusOK, nil)
	select {
	case evs := <-done:
		checkSSE(t, evs)
	case <-ctx.Done():
		t.Fatal("the followed stream never showed TurnCompleted")
	}
	// CloseStreams ends a followed stream, as http.Server.Shutdown needs.
	e.api.CloseStreams()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("stream ended with %v, want a clean end", err)
	}
}

func TestTranscriptBytes(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"id":"t1","calls":[{"id":"c1","name":"write","arguments":{"path":"a","content":"b"}},{"id":"c2","name":"read","arguments":{"path":"a"}}]}`, http.StatusOK, nil)
	got := e.must("GET", "/v1/sessions/"+s.Session+"/transcript", "", http.StatusOK, nil)
	tr, err := e.node.Transcript(context.Background(), config.DefaultTenant, s.Session)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := projections.Marshal(tr)
	if !bytes.Equal(got, want) {
		t.Fatalf("transcript:\n%s\nwant projections.Marshal:\n%s", got, want)
	}
	var shape struct {
		Session string            `json:"session"`
		Turns   []json.RawMessage `json:"turns"`
	}
	if err := json.Unmarshal(got, &shape); err != nil || shape.Session != s.Session || len(shape.Turns) != 1 {
		t.Fatalf("transcript %s: want session and one turn (%v)", got, err)
	}
}

func TestTruncatedOutput(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.ToolOutput.MaxBytes = 64
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "tok-acme"}, "other": {Token: "tok-other"}}
	e := newEnv(t, &cfg)
	e.token = "tok-acme"
	s := e.open()
	content := strings.Repeat("0123456789\n", 50)
	cj, _ := json.Marshal(content)
	var turn projections.Turn
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"calls":[{"id":"w","name":"write","arguments":{"path":"big.txt","content":`+string(cj)+`}},{"id":"r","name":"read","arguments":{"path":"big.txt"}}]}`, http.StatusOK, &turn)
	r := turn.Results[1]
	if r.Outcome != "ok" || !r.Truncated || r.FullOutput == nil {
		t.Fatalf("read result %+v: want an ok, truncated result with full_output", r)
	}
	status, b := e.do("GET", "/v1/outputs/"+r.FullOutput.Object, "")
	if status != http.StatusOK || !strings.Contains(string(b), "50\t0123456789\n") || int64(len(b)) != r.FullOutput.Bytes {
		t.Fatalf("output: status %d, %d bytes (want %d) %q", status, len(b), r.FullOutput.Bytes, b)
	}
	e.token = "tok-other"
	status, b = e.do("GET", "/v1/outputs/"+r.FullOutput.Object, "")
	wantError(t, status, b, 404, CodeNotFound)
}

func TestTools(t *testing.T) {
	e := newEnv(t, nil)
	var openai struct {
		Format string `json:"format"`
		Tools  []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		System string `json:"system"`
	}
	e.must("GET", "/v1/tools", "", http.StatusOK, &openai)
	if openai.Format != "openai" || len(openai.Tools) == 0 || openai.System == "" {
		t.Fatalf("default answer: format %q, %d tools, system %d bytes; want openai, tools and a system text", openai.Format, len(openai.Tools), len(openai.System))
	}
	names := map[string]bool{}
	for _, tl := range openai.Tools {
		names[tl.Function.Name] = true
		if tl.Type != "function" || tl.Function.Description == "" || !json.Valid(tl.Function.Parameters) {
			t.Errorf("tool %+v: want a function with description and parameters", tl)
		}
		if !strings.Contains(openai.System, "## "+tl.Function.Name) {
			t.Errorf("system text has no section for %s", tl.Function.Name)
		}
	}
	for _, n := range []string{"read", "write"} {
		if !names[n] {
			t.Errorf("tool %s missing from %v", n, names)
		}
	}
	var anthropic struct {
		Format string `json:"format"`
		Tools  []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	e.must("GET", "/v1/tools?format=anthropic", "", http.StatusOK, &anthropic)
	if anthropic.Format != "anthropic" || len(anthropic.Tools) != len(openai.Tools) || anthropic.Tools[0].InputSchema == nil {
		t.Fatalf("anthropic answer %+v", anthropic)
	}
	var responses struct {
		Format string `json:"format"`
		Strict bool   `json:"strict"`
		Tools  []struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
			Strict     *bool           `json:"strict"`
		} `json:"tools"`
		NotStrict []StrictProblem `json:"not_strict"`
	}
	e.must("GET", "/v1/tools?format=openai_responses&strict=true", "", http.StatusOK, &responses)
	if responses.Format != "openai_responses" || !responses.Strict || len(responses.Tools) != len(openai.Tools) {
		t.Fatalf("responses answer: format %q strict %v, %d tools", responses.Format, responses.Strict, len(responses.Tools))
	}
	for _, tl := range responses.Tools {
		if tl.Type != "function" || tl.Name == "" || tl.Strict == nil || !*tl.Strict || !strings.Contains(string(tl.Parameters), `"additionalProperties":false`) {
			t.Errorf("responses tool %+v: want a flat, strict function with a closed schema", tl)
		}
	}
	status, b := e.do("GET", "/v1/tools?format=anthropic&strict=true", "")
	wantError(t, status, b, 400, CodeInvalidRequest, "openai")
	status, b = e.do("GET", "/v1/tools?strict=maybe", "")
	wantError(t, status, b, 400, CodeInvalidRequest, "strict")
	status, b = e.do("GET", "/v1/tools?format=xml", "")
	wantError(t, status, b, 400, CodeInvalidRequest, "xml")
	status, b = e.do("GET", "/v1/tools?agent=nobody", "")
	wantError(t, status, b, 400, CodeInvalidRequest, "nobody")
}

func TestToolsPlacementAndAgent(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Guidance = config.Guidance{Placement: config.PlacementDescription}
	cfg.Agents = map[string]config.Agent{"reader": {Tools: []string{"read"}}}
	e := newEnv(t, &cfg)
	var ans struct {
		Tools []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"tools"`
		System *string `json:"system"`
	}
	e.must("GET", "/v1/tools?agent=reader&format=anthropic", "", http.StatusOK, &ans)
	if len(ans.Tools) != 1 || ans.Tools[0].Name != "read" {
		t.Fatalf("tools %+v, want read alone", ans.Tools)
	}
	if ans.System != nil || !strings.Contains(ans.Tools[0].Description, "Guidelines:") {
		t.Fatalf("placement description: system %v, description %q; want guidelines in the description, no system", ans.System, ans.Tools[0].Description)
	}
}

func TestTenants(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "tok-acme"}, "globex": {Token: "tok-globex"}}
	e := newEnv(t, &cfg)
	for _, tc := range []struct{ name, header string }{
		{"no token", ""},
		{"wrong token", "Bearer nope"},
		{"another scheme", "Basic dG9rLWFjbWU="},
		{"empty bearer", "Bearer "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h []string
			if tc.header != "" {
				h = []string{"Authorization", tc.header}
			}
			status, b := e.do("POST", "/v1/sessions", "", h...)
			wantError(t, status, b, 401, CodeUnauthorized)
			status, b = e.do("GET", "/v1/tools", "", h...)
			wantError(t, status, b, 401, CodeUnauthorized)
		})
	}
	if status, _ := e.do("GET", "/healthz", ""); status != http.StatusOK {
		t.Errorf("healthz without a token: %d, want 200", status)
	}
	e.token = "tok-acme"
	s := e.open()
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"id":"t","calls":[{"id":"c","name":"write","arguments":{"path":"a","content":"b"}}]}`, http.StatusOK, nil)
	e.must("GET", "/v1/sessions/"+s.Session+"/transcript", "", http.StatusOK, nil)
	e.token = "tok-globex"
	for _, p := range []string{"/transcript", "/turns/t", "/events?follow=false"} {
		status, b := e.do("GET", "/v1/sessions/"+s.Session+p, "")
		wantError(t, status, b, 404, CodeNotFound)
	}
	status, b := e.do("POST", "/v1/sessions/"+s.Session+"/turns", `{"id":"t2","calls":[{"id":"c","name":"read","arguments":{"path":"a"}}]}`)
	wantError(t, status, b, 404, CodeNotFound)
}

func TestHealthAndMetrics(t *testing.T) {
	e := newEnv(t, nil)
	var h map[string]string
	e.must("GET", "/healthz", "", http.StatusOK, &h)
	if h["status"] != "ok" {
		t.Fatalf("healthz %v", h)
	}
	s := e.open()
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"calls":[{"id":"c","name":"read","arguments":{"path":"."}}]}`, http.StatusOK, nil)
	status, b := e.do("GET", "/metrics", "")
	if status != http.StatusOK || !strings.Contains(string(b), "# TYPE") {
		t.Fatalf("metrics: %d %.200s", status, b)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Option{WithLogger(nil), WithMaxBody(0), WithKeepAlive(0)} {
		s := &Server{}
		if err := o(s); err == nil {
			t.Errorf("option accepted a bad value")
		}
	}
}
