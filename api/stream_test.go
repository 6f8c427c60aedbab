package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/projections"
)

type batchAnswer struct {
	Turn              string `json:"turn"`
	Status            string `json:"status"`
	From              int    `json:"from"`
	Size              int    `json:"size"`
	Calls             int    `json:"calls"`
	ParallelToolCalls bool   `json:"parallel_tool_calls"`
	Cap               int    `json:"cap"`
}

// TestStreamedTurn: a turn's calls posted in batches to .../calls, the
// first setting the turn's scheduling, answered 202 once recorded; a batch
// sent again answers the same; .../end answers as a posted turn does; the
// log's routes (arguments, timeline) show the streamed calls.
func TestStreamedTurn(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Permission.Rules = []config.Rule{{ID: "ask-charges", Tool: "write", Match: "charges/*", Action: config.ActionAsk}}
	e := newEnv(t, &cfg)
	s := e.open()
	base := "/v1/sessions/" + s.Session + "/turns/st1"
	first := `{"calls": [{"id": "c1", "name": "write", "arguments": {"path": "a.txt", "content": "a"}}], "parallel_tool_calls": false, "cap": 2}`
	var b batchAnswer
	raw := e.must("POST", base+"/calls", first, http.StatusAccepted, &b)
	if b != (batchAnswer{Turn: "st1", Status: "open", From: 0, Size: 1, Calls: 1, ParallelToolCalls: false, Cap: 2}) {
		t.Fatalf("first batch answered %s", raw)
	}
	second := `{"from": 1, "calls": [{"id": "c2", "name": "read", "arguments": "{\"path\": \"a.txt\"}"}, {"id": "c3", "name": "nope", "arguments": {}}]}`
	e.must("POST", base+"/calls", second, http.StatusAccepted, &b)
	if b.From != 1 || b.Size != 2 || b.Calls != 3 {
		t.Fatalf("second batch answered %+v, want 2 calls from 1, of 3", b)
	}
	var again batchAnswer
	e.must("POST", base+"/calls", first, http.StatusAccepted, &again)
	if again != (batchAnswer{Turn: "st1", Status: "open", From: 0, Size: 1, Calls: 3, ParallelToolCalls: false, Cap: 2}) {
		t.Fatalf("the first batch sent again answered %+v", again)
	}
	st, body := e.do("POST", base+"/calls", `{"calls": [{"id": "c2", "name": "read", "arguments": {"path": "b.txt"}}]}`)
	wantError(t, st, body, http.StatusConflict, CodeTurnIDReused, `calls[0] (id "c2") has other arguments`)
	st, body = e.do("POST", base+"/calls", `{"from": 7, "calls": [{"id": "c4", "name": "read", "arguments": {"path": "b.txt"}}]}`)
	wantError(t, st, body, http.StatusConflict, CodeConflict, "holds 3 calls and this batch says it starts at call 7")
	st, body = e.do("POST", base+"/calls", `{"calls": [{"id": "c4", "name": "read", "arguments": {}}], "cap": 3}`)
	wantError(t, st, body, http.StatusConflict, CodeTurnIDReused, "opened with parallel_tool_calls false and cap 2")
	st, body = e.do("POST", "/v1/sessions/"+s.Session+"/turns", `{"id": "st1", "calls": [{"id": "c1", "name": "write", "arguments": {"path": "a.txt", "content": "a"}}]}`)
	wantError(t, st, body, http.StatusConflict, CodeTurnIDReused, "names a streamed turn")

	var turn projections.Turn
	e.must("POST", base+"/end", `{"calls": 3}`, http.StatusOK, &turn)
	if turn.Status != projections.StatusComplete || len(turn.Results) != 3 || turn.Results[0].Outcome != "ok" || turn.Results[1].Outcome != "ok" || turn.Results[2].Outcome != "blocked" {
		t.Fatalf("end answered %+v, want c1 ok, c2 ok, c3 blocked", turn)
	}
	var got projections.Turn
	e.must("GET", base, "", http.StatusOK, &got)
	if got.Status != projections.StatusComplete || len(got.Results) != 3 {
		t.Fatalf("GET the turn: %+v", got)
	}
	e.must("POST", base+"/end", "", http.StatusOK, &got) // ending again answers the same
	if st, b := e.do("GET", base+"/calls/c2/arguments", ""); st != http.StatusOK || string(b) != `"{\"path\": \"a.txt\"}"` {
		t.Fatalf("a streamed call's arguments: %d %s", st, b)
	}
	if st, b := e.do("GET", "/v1/sessions/"+s.Session+"/timeline", ""); st != http.StatusOK || !strings.Contains(string(b), "streamed in 2 batches, ended") {
		t.Fatalf("the timeline page (%d) does not say the turn streamed", st)
	}

	// Without waiting: 202 once the end is recorded (the call waits for
	// an approval, so the turn is still running).
	e.must("POST", "/v1/sessions/"+s.Session+"/turns/st2/calls", `{"calls": [{"id": "x", "name": "write", "arguments": {"path": "charges/x", "content": "1"}}]}`, http.StatusAccepted, nil)
	var run running
	e.must("POST", "/v1/sessions/"+s.Session+"/turns/st2/end?wait=0", "", http.StatusAccepted, &run)
	if run.Turn != "st2" || run.Status != projections.StatusRunning {
		t.Fatalf("end?wait=0 answered %+v", run)
	}
}

func TestStreamedTurnRefusals(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	base := "/v1/sessions/" + s.Session + "/turns/"
	cases := []struct {
		name, path, body string
		status           int
		code, msg        string
	}{
		{"no calls", "t/calls", `{"calls": []}`, 400, CodeInvalidBody, `"calls" is missing or empty`},
		{"a call without an id", "t/calls", `{"calls": [{"name": "read"}]}`, 400, CodeInvalidBody, `calls[0] has no "id"`},
		{"an unknown field", "t/calls", `{"calls": [{"id": "a", "name": "read"}], "wait": true}`, 400, CodeInvalidBody, "wait"},
		{"a negative from", "t/calls", `{"from": -2, "calls": [{"id": "a", "name": "read"}]}`, 400, CodeInvalidRequest, "from -2"},
		{"a cap of 0", "t/calls", `{"cap": 0, "calls": [{"id": "a", "name": "read"}]}`, 400, CodeInvalidRequest, "cap 0"},
		{"the first batch from 2", "t/calls", `{"from": 2, "calls": [{"id": "a", "name": "read"}]}`, 409, CodeConflict, "the first batch starts at 0"},
		{"ending an unknown turn", "t/end", ``, 404, CodeNotFound, "opened by its first batch"},
		{"an end of 0 calls", "t/end", `{"calls": 0}`, 400, CodeInvalidBody, `"calls" is 0`},
		{"a native piece without calls", "t/calls?format=anthropic", `{"type": "text", "text": "Let me look."}`, 400, CodeNoToolCalls, "no tool_use block"},
		{"a native piece cut short", "t/calls?format=openai_chat", `{"tool_calls": [{"index": 0, "function": {"arguments": "{\"pa"}}]}`, 400, CodeInvalidBody, "tool_calls[0].id is missing"},
		{"a native from that is no number", "t/calls?format=openai_responses&from=x", `{"type": "function_call", "call_id": "c", "name": "read", "arguments": "{}"}`, 400, CodeInvalidRequest, `from="x"`},
		{"a key twice", "t/calls?format=anthropic", `{"type": "tool_use", "id": "a", "id": "b", "name": "read", "input": {}}`, 400, CodeInvalidBody, `"id"`},
	}
	for _, c := range cases {
		st, body := e.do("POST", base+c.path, c.body)
		t.Run(c.name, func(t *testing.T) { wantError(t, st, body, c.status, c.code, c.msg) })
	}
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"id": "p", "calls": [{"id": "a", "name": "read", "arguments": {"path": "x"}}]}`, http.StatusOK, nil)
	st, body := e.do("POST", base+"p/calls", `{"calls": [{"id": "a", "name": "read", "arguments": {"path": "x"}}]}`)
	wantError(t, st, body, http.StatusConflict, CodeTurnIDReused, "posted whole")
	st, body = e.do("POST", base+"p/end", "")
	wantError(t, st, body, http.StatusConflict, CodeTurnIDReused, "no stream to end")
}

// TestStreamedNativeTurns: each provider's streamed pieces posted as they
// complete, then the end answered in that provider's shape, the calls in
// the order they were posted.
func TestStreamedNativeTurns(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	cases := []struct {
		format string
		pieces []string
		query  string
		check  func(t *testing.T, answer map[string]json.RawMessage)
	}{
		{"openai_chat", []string{
			`{"index":0,"id":"call_1","type":"function","function":{"name":"write","arguments":"{\"path\":\"c.txt\",\"content\":\"c\"}"}}`,
			`{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"read","arguments":"{\"path\":\"c.txt\"}"}}]}`,
		}, "&parallel_tool_calls=false", func(t *testing.T, a map[string]json.RawMessage) {
			var msgs []struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
				Content    string `json:"content"`
			}
			if err := json.Unmarshal(a["messages"], &msgs); err != nil || len(msgs) != 2 || msgs[0].ToolCallID != "call_1" || msgs[1].ToolCallID != "call_2" || !strings.Contains(msgs[1].Content, "1\tc") || msgs[0].Role != "tool" {
				t.Fatalf("messages %s, want call_1 then call_2 answered as tool messages", a["messages"])
			}
		}},
		{"openai_responses", []string{
			`{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"path\":\"r.txt\",\"content\":\"r\"}","call_id":"call_a","name":"write"}}`,
			`{"id":"fc_2","type":"function_call","status":"completed","arguments":"{\"path\":\"r.txt\"}","call_id":"call_b","name":"read"}`,
		}, "", func(t *testing.T, a map[string]json.RawMessage) {
			var items []struct {
				Type   string `json:"type"`
				CallID string `json:"call_id"`
				Output string `json:"output"`
			}
			if err := json.Unmarshal(a["input"], &items); err != nil || len(items) != 2 || items[0].CallID != "call_a" || items[1].CallID != "call_b" || !strings.Contains(items[1].Output, "1\tr") || items[0].Type != "function_call_output" {
				t.Fatalf("input %s, want call_a then call_b as function_call_output items", a["input"])
			}
		}},
		{"anthropic", []string{
			`{"type":"tool_use","id":"toolu_1","name":"write","input":{"path":"n.txt","content":"n"}}`,
			`[{"type":"text","text":"Now reading."},{"type":"tool_use","id":"toolu_2","name":"read","input":{"path":"n.txt"}}]`,
		}, "&cap=1", func(t *testing.T, a map[string]json.RawMessage) {
			var msg struct {
				Role    string `json:"role"`
				Content []struct {
					Type      string `json:"type"`
					ToolUseID string `json:"tool_use_id"`
					Content   string `json:"content"`
				} `json:"content"`
			}
			if err := json.Unmarshal(a["message"], &msg); err != nil || msg.Role != "user" || len(msg.Content) != 2 || msg.Content[0].ToolUseID != "toolu_1" || msg.Content[1].ToolUseID != "toolu_2" || !strings.Contains(msg.Content[1].Content, "1\tn") {
				t.Fatalf("message %s, want tool_result blocks for toolu_1 then toolu_2", a["message"])
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.format, func(t *testing.T) {
			base := "/v1/sessions/" + s.Session + "/turns/resp_" + c.format
			for i, p := range c.pieces {
				q := "?format=" + c.format + "&from=" + itoa(uint64(i))
				if i == 0 {
					q += c.query
				}
				var b batchAnswer
				e.must("POST", base+"/calls"+q, p, http.StatusAccepted, &b)
				if b.From != i || b.Calls != i+1 {
					t.Fatalf("piece %d answered %+v", i, b)
				}
			}
			var a map[string]json.RawMessage
			e.must("POST", base+"/end?format="+c.format, "", http.StatusOK, &a)
			c.check(t, a)
		})
	}
}

// TestStreamedTurnHostile attacks the streamed routes as a hostile tenant
// would: batches and ends aimed at another tenant's session, a turn grown
// past calls_per_turn batch by batch, a body past the body limit, an id
// twice (in one batch, across batches), a batch after the end, an end
// naming more calls than were posted, and an end sent twice. Each is
// refused with what was wrong, and the victim's log holds nothing of it.
func TestStreamedTurnHostile(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Limits.BodyBytes = 8192
	cfg.Tenants = map[string]config.Tenant{
		"acme":   {Token: "tok-acme", Limits: config.Limits{CallsPerTurn: 3}},
		"globex": {Token: "tok-globex"},
	}
	e := newEnv(t, &cfg)
	e.token = "tok-globex"
	victim := e.open().Session
	e.must("POST", "/v1/sessions/"+victim+"/turns/v/calls", `{"calls": [{"id": "a", "name": "todo_get", "arguments": {}}]}`, http.StatusAccepted, nil)
	before := len(e.events(victim, ""))

	e.token = "tok-acme"
	call := func(id string) string { return `{"id": "` + id + `", "name": "todo_get", "arguments": {}}` }
	vbase := "/v1/sessions/" + victim + "/turns/"
	for _, c := range []struct{ path, body string }{
		{"v/calls", `{"from": 1, "calls": [` + call("b") + `]}`},
		{"x/calls", `{"calls": [` + call("b") + `]}`},
		{"v/end", ``},
		{"v/calls?format=anthropic", `{"type": "tool_use", "id": "b", "name": "todo_get", "input": {}}`},
	} {
		st, body := e.do("POST", vbase+c.path, c.body)
		wantError(t, st, body, http.StatusNotFound, CodeNotFound)
	}
	e.token = "tok-globex"
	if after := len(e.events(victim, "")); after != before {
		t.Fatalf("another tenant's posts changed the victim's log: %d events, then %d", before, after)
	}

	e.token = "tok-acme"
	s := e.open().Session
	base := "/v1/sessions/" + s + "/turns/h/"
	st, body := e.do("POST", base+"calls", `{"calls": [`+call("a")+`, `+call("a")+`]}`)
	wantError(t, st, body, http.StatusBadRequest, CodeInvalidRequest, `repeats call id "a"`)
	e.must("POST", base+"calls", `{"calls": [`+call("a")+`, `+call("b")+`]}`, http.StatusAccepted, nil)
	st, body = e.do("POST", base+"calls", `{"from": 2, "calls": [`+call("a")+`]}`)
	wantError(t, st, body, http.StatusConflict, CodeConflict, "recorded from call 0")
	// Past the tenant's calls_per_turn across batches, each batch alone
	// within it.
	st, body = e.do("POST", base+"calls", `{"from": 2, "calls": [`+call("c")+`, `+call("d")+`]}`)
	wantError(t, st, body, http.StatusRequestEntityTooLarge, CodeTooLarge, "at most 3")
	st, body = e.do("POST", base+"calls", `{"from": 2, "calls": [`+call("c")+`], "pad": "`+strings.Repeat("x", 9000)+`"}`)
	wantError(t, st, body, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "larger than 8192 bytes")
	st, body = e.do("POST", base+"end", `{"calls": 5}`)
	wantError(t, st, body, http.StatusConflict, CodeConflict, "2 calls")
	var turn projections.Turn
	e.must("POST", base+"end", `{"calls": 2}`, http.StatusOK, &turn)
	if len(turn.Results) != 2 || turn.Results[0].Outcome != "ok" || turn.Results[1].Outcome != "ok" {
		t.Fatalf("the turn after the refusals: %+v, want a and b ok", turn)
	}
	var again projections.Turn
	e.must("POST", base+"end", `{"calls": 2}`, http.StatusOK, &again)
	if len(again.Results) != 2 {
		t.Fatalf("ending again: %+v", again)
	}
	st, body = e.do("POST", base+"calls", `{"from": 2, "calls": [`+call("c")+`]}`)
	wantError(t, st, body, http.StatusConflict, CodeConflict, "ended")
	// Racing batches: eight posts from 0 at once, each with other calls,
	// on a new turn: one opens it, the rest are refused, one batch is in
	// the log.
	race := "/v1/sessions/" + s + "/turns/race/calls"
	statuses := make(chan int, 8)
	for i := range 8 {
		go func() {
			st, _ := e.do("POST", race, `{"from": 0, "calls": [`+call(fmt.Sprintf("r%d", i))+`]}`)
			statuses <- st
		}()
	}
	got := map[int]int{}
	for range 8 {
		got[<-statuses]++
	}
	if got[http.StatusAccepted] != 1 || got[http.StatusConflict] != 7 {
		t.Fatalf("eight racing first batches answered %v, want one 202 and seven 409", got)
	}
	e.must("POST", "/v1/sessions/"+s+"/turns/race/end", `{"calls": 1}`, http.StatusOK, nil)
	evs := e.events(s, "")
	adds, ends := 0, 0
	for _, ev := range evs {
		switch ev.Type {
		case "CallsAdded":
			adds++
		case "TurnEnded":
			ends++
		}
	}
	if adds != 2 || ends != 2 {
		t.Fatalf("the log holds %d batches and %d ends, want 2 and 2 (turns h and race)", adds, ends)
	}
}

// TestStreamedTurnMeetsCloseAndDelete: a session with an open streamed
// turn cannot be closed under it (409, the turn named), and deleting the
// session ends the turn: the next batch and the end are 404, and nothing
// of the session is left to read.
func TestStreamedTurnMeetsCloseAndDelete(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open().Session
	base := "/v1/sessions/" + s + "/turns/open/"
	e.must("POST", base+"calls", `{"calls": [{"id": "a", "name": "todo_get", "arguments": {}}]}`, http.StatusAccepted, nil)
	st, body := e.do("POST", "/v1/sessions/"+s+"/close", "")
	wantError(t, st, body, http.StatusConflict, CodeConflict, "turn open")
	e.must("DELETE", "/v1/sessions/"+s, "", http.StatusOK, nil)
	st, body = e.do("POST", base+"calls", `{"from": 1, "calls": [{"id": "b", "name": "todo_get", "arguments": {}}]}`)
	wantError(t, st, body, http.StatusNotFound, CodeNotFound)
	st, body = e.do("POST", base+"end", "")
	wantError(t, st, body, http.StatusNotFound, CodeNotFound)
	if st, _ := e.do("GET", "/v1/sessions/"+s+"/events?follow=false", ""); st != http.StatusNotFound {
		t.Fatalf("the deleted session's events: %d, want 404", st)
	}
}
