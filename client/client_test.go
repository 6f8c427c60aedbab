package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/callsheet/callsheet/client"
	"github.com/callsheet/callsheet/internal/clienttest"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, testnode.Cleanup) }

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.WithToken(clienttest.Token), client.WithBackoff(50*time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func open(t *testing.T, c *client.Client) *client.Session {
	t.Helper()
	s, err := c.OpenSession(context.Background(), client.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// count returns how many events of type typ the session's log holds.
func count(t *testing.T, s *client.Session, typ string) int {
	t.Helper()
	n := 0
	for ev, err := range s.Events(context.Background(), 0, false) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// attempts returns when the proxy saw each request for turn id, in ms
// after the first.
func attempts(t *testing.T, env *clienttest.Env, id string) []int64 {
	t.Helper()
	resp, err := http.Get(env.Flaky + "/clienttest/attempts/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct{ Attempts []int64 }
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a.Attempts
}

// checkAttempts checks that the requests for id were sent again no sooner
// than Retry-After (1 s; 1–2 s as a date) said, and reached past the hold.
func checkAttempts(t *testing.T, env *clienttest.Env, id string) {
	t.Helper()
	at := attempts(t, env, id)
	if len(at) < 2 {
		t.Errorf("%s: requests at %v ms, want a retry", id, at)
		return
	}
	for i := 1; i < len(at); i++ {
		if at[i]-at[i-1] < 900 && at[i-1] < clienttest.Hold.Milliseconds() {
			t.Errorf("%s: requests at %v ms: sent again %d ms after a Retry-After of 1 s", id, at, at[i]-at[i-1])
		}
	}
	if strings.HasPrefix(id, "moving-") && at[len(at)-1] < clienttest.Hold.Milliseconds() {
		t.Errorf("%s: requests at %v ms: none after the hold", id, at)
	}
}

func TestClient(t *testing.T) {
	env := clienttest.Start(t)
	ctx := context.Background()

	t.Run("readme example", func(t *testing.T) {
		b, err := os.ReadFile("README.md")
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile("(?s)## A first turn.*?```go\n(.*?)```.*?prints\n\n```(?:text)?\n(.*?)```").FindSubmatch(b)
		if m == nil {
			t.Fatal("README.md has no first-turn example and its output")
		}
		dir := t.TempDir()
		main := filepath.Join(dir, "main.go")
		if err := os.WriteFile(main, m[1], 0o644); err != nil {
			t.Fatal(err)
		}
		wd, _ := os.Getwd()
		ov, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(wd, "internal", "readme", "main.go"): main}})
		if err := os.WriteFile(filepath.Join(dir, "overlay.json"), ov, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", "run", "-overlay", filepath.Join(dir, "overlay.json"), "./internal/readme")
		cmd.Env = append(os.Environ(), env.Environ()...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the README's example: %v\n%s", err, out)
		}
		if string(out) != string(m[2]) {
			t.Errorf("the README's example printed:\n%s\nthe README says:\n%s", out, m[2])
		}
		t.Logf("the README's example printed:\n%s", out)
	})

	t.Run("retries the same turn id after a drop, a 503 and a 502", func(t *testing.T) {
		s := open(t, newClient(t, env.Flaky))
		for _, id := range []string{"drop-1", "busy-1", "gateway-1"} {
			a, err := s.Turn(ctx, []client.Call{{ID: "w", Name: "write", Arguments: map[string]any{"path": id + ".txt", "content": "x"}}}, client.WithTurnID(id))
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if a.Turn != id || a.Results[0].Outcome != "ok" {
				t.Errorf("%s: answer %+v, want ok", id, a)
			}
		}
		if n := count(t, s, "ToolCallStarted"); n != 3 {
			t.Errorf("%d calls started for three turns each posted twice, want 3", n)
		}
	})

	t.Run("rides out a takeover, honouring Retry-After", func(t *testing.T) {
		// The proxy answers each "moving-" turn 503 with Retry-After for
		// clienttest.Hold, as a fleet node answers a call that meets a
		// takeover: a client with the default budget waits it out.
		c, err := client.New(env.Flaky, client.WithToken(clienttest.Token))
		if err != nil {
			t.Fatal(err)
		}
		write := func(id string) []client.Call {
			return []client.Call{{ID: "w", Name: "write", Arguments: map[string]any{"path": id + ".txt", "content": "x"}}}
		}
		posted, streamed, read, limited := open(t, c), open(t, c), open(t, c), open(t, c)
		// The turn read back is posted to the node itself first.
		if _, err := newClient(t, env.URL).Session(read.ID).Turn(ctx, write("moving-date-go"), client.WithTurnID("moving-date-go")); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 4)
		go func() {
			_, err := posted.Turn(ctx, write("moving-go"), client.WithTurnID("moving-go"))
			errs <- err
		}()
		go func() {
			st, err := streamed.OpenTurn(ctx, write("moving-stream-go"), client.WithTurnID("moving-stream-go"))
			if err == nil {
				_, err = st.End(ctx)
			}
			errs <- err
		}()
		go func() {
			a, err := read.GetTurn(ctx, "moving-date-go")
			if err == nil && a.Status != "complete" {
				err = errors.New("the turn read back is " + a.Status)
			}
			errs <- err
		}()
		go func() {
			_, err := limited.Turn(ctx, write("limited-go"), client.WithTurnID("limited-go"))
			errs <- err
		}()
		for range 4 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		for _, s := range []*client.Session{posted, streamed, read, limited} {
			if n := count(t, s, "ToolCallStarted"); n != 1 {
				t.Errorf("session %s: %d calls started, want 1", s.ID, n)
			}
		}
		for _, id := range []string{"moving-go", "moving-stream-go", "moving-date-go", "limited-go"} {
			checkAttempts(t, env, id)
		}

		// A budget shorter than the takeover gives the node's answer.
		short, err := client.New(env.Flaky, client.WithToken(clienttest.Token), client.WithRetryFor(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_, err = short.Session(posted.ID).Turn(ctx, write("moving-short-go"), client.WithTurnID("moving-short-go"))
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 503 || e.Code != "unavailable" || !strings.Contains(e.Message, "moving to another node") {
			t.Fatalf("a turn past its retry budget: %v, want the node's 503", err)
		}
		if n := len(attempts(t, env, "moving-short-go")); n < 2 || n > 3 {
			t.Errorf("%d attempts within 2 s of Retry-After: 1, want 2 or 3", n)
		}
		// Opening a session has no id: a 503 is not sent again (the
		// proxy's second answer would be a session).
		_, err = c.OpenSession(ctx, client.SessionOptions{Workspace: "busy-open-go"})
		if !errors.As(err, &e) || e.Status != 503 {
			t.Fatalf("an open answered 503: %v, want the 503 (not retried)", err)
		}
	})

	t.Run("native turn", func(t *testing.T) {
		s := open(t, newClient(t, env.Flaky))
		completion := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_a","type":"function","function":{"name":"write","arguments":"{\"path\":\"a.txt\",\"content\":\"a\"}"}},
			{"id":"call_b","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.txt\""}}]}}]}`)
		var c openai.ChatCompletion
		if err := json.Unmarshal(completion, &c); err != nil {
			t.Fatal(err)
		}
		a, err := s.TurnNative(ctx, client.OpenAIChat, c)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []openai.ChatCompletionMessageParamUnion
		if err := a.Decode(&msgs); err != nil {
			t.Fatal(err)
		}
		if a.Turn != "chatcmpl-1" || len(msgs) != 2 || msgs[0].OfTool == nil || msgs[0].OfTool.ToolCallID != "call_a" ||
			!strings.HasPrefix(msgs[1].OfTool.Content.OfString.Value, "[blocked: invalid_arguments") {
			t.Fatalf("answer %+v / %s, want a tool message per call, the second blocked", a, a.Messages)
		}
		// The message alone has no id: the client mints one, and a drop
		// is retried with it.
		part, _ := json.Marshal(c.Choices[0].Message.ToParam())
		a, err = s.TurnNative(ctx, client.OpenAIChat, json.RawMessage(part), client.WithTurnID("drop-native"))
		if err != nil || a.Turn != "drop-native" {
			t.Fatalf("part: %+v, %v", a, err)
		}
		if n := count(t, s, "TurnReceived"); n != 2 {
			t.Errorf("%d turns, want 2", n)
		}
		_, err = s.TurnNative(ctx, client.Anthropic, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "Done."}}})
		var e *client.Error
		if !errors.As(err, &e) || e.Code != "no_tool_calls" || e.Status != 400 {
			t.Errorf("err=%v, want no_tool_calls", err)
		}
	})

	t.Run("streamed turn", func(t *testing.T) {
		// Each batch's answer, and the end's, is lost once on the way
		// back (a "drop-" turn id) or answered 503 once ("busy-"): the
		// client sends it again, the node answers from its record, and
		// nothing runs twice.
		read := func(id string) client.Call {
			return client.Call{ID: id, Name: "read", Arguments: map[string]any{"path": "nothing-" + id}}
		}
		var s *client.Session
		var st *client.StreamedTurn
		for _, id := range []string{"busy-stream", "drop-stream"} {
			s = open(t, newClient(t, env.Flaky))
			var err error
			st, err = s.OpenTurn(ctx, []client.Call{read("a")}, client.WithTurnID(id), client.WithCap(2))
			if err != nil || st.ID != id || st.Cap != 2 || !st.ParallelToolCalls {
				t.Fatalf("open %s: %+v %v", id, st, err)
			}
			if err := st.Add(ctx, []client.Call{read("b"), read("c")}); err != nil {
				t.Fatal(err)
			}
			a, err := st.End(ctx)
			if err != nil || a.Status != "complete" || len(a.Results) != 3 || a.Results[2].ID != "c" {
				t.Fatalf("end %s: %+v %v, want a, b, c complete", id, a, err)
			}
			// A read's claim is in its outcome (docs/events.md,
			// ToolCallStarted): here a ToolCallFailed, the files being
			// absent.
			if n, b := count(t, s, "ToolCallFailed"), count(t, s, "CallsAdded"); n != 3 || b != 2 {
				t.Fatalf("%s: %d calls started in %d batches, want 3 in 2", id, n, b)
			}
		}
		// A harness that restarted streams the same response again: each
		// batch is answered from the record, in place, and so is the end.
		again, err := s.OpenTurn(ctx, []client.Call{read("a")}, client.WithTurnID("drop-stream"))
		if err != nil {
			t.Fatal(err)
		}
		if err := again.Add(ctx, []client.Call{read("b"), read("c")}); err != nil {
			t.Fatalf("the second batch streamed again: %v", err)
		}
		if a, err := again.End(ctx); err != nil || len(a.Results) != 3 {
			t.Fatalf("the end streamed again: %+v %v", a, err)
		}
		if n := count(t, s, "ToolCallFailed"); n != 3 {
			t.Fatalf("%d calls started after the turn was streamed again, want 3", n)
		}
		_, err = s.OpenTurn(ctx, []client.Call{read("x")}, client.WithTurnID("drop-stream"))
		var e *client.Error
		if !errors.As(err, &e) || e.Code != "conflict" || !strings.Contains(e.Message, "ended") {
			t.Fatalf("a new call under the ended turn's id: %v, want a conflict saying it ended", err)
		}
		if _, err := s.Turn(ctx, []client.Call{read("p")}, client.WithTurnID("posted")); err != nil {
			t.Fatal(err)
		}
		_, err = s.OpenTurn(ctx, []client.Call{read("p")}, client.WithTurnID("posted"))
		if !errors.As(err, &e) || e.Code != "turn_id_reused" || e.Status != 409 {
			t.Fatalf("a posted turn's id streamed: %v, want turn_id_reused", err)
		}
		if err := st.AddNative(ctx, []byte(`{}`)); err == nil {
			t.Fatal("AddNative on a turn of callsheet's own calls: no error")
		}
	})

	t.Run("streamed native turns from the SDKs' accumulators", func(t *testing.T) {
		s := open(t, newClient(t, env.Flaky))
		// openai-go's ChatCompletionAccumulator over a recorded stream:
		// each tool call is posted as soon as the accumulator says it is
		// whole, the turn opened by the first.
		chunks := []string{
			`{"id":"chatcmpl-st","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"write","arguments":""}}]},"finish_reason":null}]}`,
			`{"id":"chatcmpl-st","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"s.txt\","}}]},"finish_reason":null}]}`,
			`{"id":"chatcmpl-st","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"content\":\"s\"}"}}]},"finish_reason":null}]}`,
			`{"id":"chatcmpl-st","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"read","arguments":"{\"path\":\"s.txt\"}"}}]},"finish_reason":null}]}`,
			`{"id":"chatcmpl-st","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		}
		var acc openai.ChatCompletionAccumulator
		var st *client.StreamedTurn
		for _, c := range chunks {
			var ch openai.ChatCompletionChunk
			if err := json.Unmarshal([]byte(c), &ch); err != nil {
				t.Fatal(err)
			}
			acc.AddChunk(ch)
			tc, ok := acc.JustFinishedToolCall()
			if !ok {
				continue
			}
			piece := acc.Choices[0].Message.ToolCalls[tc.Index]
			var err error
			if st == nil {
				st, err = s.OpenTurnNative(ctx, client.OpenAIChat, ch.ID, piece)
			} else {
				err = st.AddNative(ctx, piece)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		a, err := st.EndNative(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []openai.ChatCompletionMessageParamUnion
		if err := a.Decode(&msgs); err != nil {
			t.Fatal(err)
		}
		if a.Turn != "chatcmpl-st" || len(msgs) != 2 || msgs[0].OfTool.ToolCallID != "call_a" || msgs[1].OfTool.ToolCallID != "call_b" ||
			!strings.Contains(msgs[1].OfTool.Content.OfString.Value, "1\ts") {
			t.Fatalf("answer %s, want call_a then call_b answered, b reading what a wrote", a.Messages)
		}
		// anthropic-sdk-go's Message.Accumulate: a tool_use block is
		// posted once its content_block_stop has come.
		evs := []string{
			`{"type":"message_start","message":{"id":"msg_st","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Reading it."}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_st","name":"read","input":{}}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\":"}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"s.txt\"}"}}`,
			`{"type":"content_block_stop","index":1}`,
			`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":30}}`,
			`{"type":"message_stop"}`,
		}
		var m anthropic.Message
		var at *client.StreamedTurn
		for _, e := range evs {
			var ev anthropic.MessageStreamEventUnion
			if err := json.Unmarshal([]byte(e), &ev); err != nil {
				t.Fatal(err)
			}
			if err := m.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type != "content_block_stop" || m.Content[ev.Index].Type != "tool_use" {
				continue
			}
			var err error
			if at == nil {
				at, err = s.OpenTurnNative(ctx, client.Anthropic, m.ID, m.Content[ev.Index])
			} else {
				err = at.AddNative(ctx, m.Content[ev.Index])
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		na, err := at.EndNative(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mp anthropic.MessageParam
		if err := na.Decode(&mp); err != nil {
			t.Fatal(err)
		}
		if mp.OfUser == nil || len(mp.OfUser.Content) != 1 || mp.OfUser.Content[0].OfToolResult == nil || mp.OfUser.Content[0].OfToolResult.ToolUseID != "toolu_st" {
			t.Fatalf("answer %s, want the tool_result of toolu_st", na.Message)
		}
	})

	t.Run("events resume after a drop", func(t *testing.T) {
		s := open(t, newClient(t, env.Flaky))
		if _, err := s.Turn(ctx, []client.Call{{ID: "r", Name: "read", Arguments: map[string]any{"path": "nothing"}}}); err != nil {
			t.Fatal(err)
		}
		want := 0
		for range s.Events(ctx, 0, false) {
			want++
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var seqs []uint64
		for ev, err := range s.Events(cctx, 0, true) {
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, ev.Seq)
			if len(seqs) == want {
				break
			}
		}
		for i, seq := range seqs {
			if seq != uint64(i+1) {
				t.Fatalf("seqs %v: want 1..%d, each once, across the cut after 3", seqs, want)
			}
		}
		if len(seqs) <= 3 {
			t.Fatalf("only %d events: the test needs more than the 3 before the cut", len(seqs))
		}
	})

	t.Run("approvals, answers and errors", func(t *testing.T) {
		s := open(t, newClient(t, env.URL))
		a, err := s.Turn(ctx, []client.Call{
			{ID: "q", Name: "question", Arguments: map[string]any{"question": "Go on?"}},
			{ID: "w", Name: "write", Arguments: map[string]any{"path": "charges/1.txt", "content": "1"}},
		}, client.WithTurnID("t1"), client.NoWait())
		if err != nil || a.Status != "running" {
			t.Fatalf("%+v %v, want running", a, err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for s.Answer(ctx, "q", "yes") != nil {
			if time.Now().After(deadline) {
				t.Fatal("the question never waited for an answer")
			}
			time.Sleep(20 * time.Millisecond)
		}
		for {
			list, err := s.Approvals(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no approval asked")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := s.Approve(ctx, "w", true, "fine"); err != nil {
			t.Fatal(err)
		}
		for a.Status != "complete" && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			if a, err = s.GetTurn(ctx, "t1"); err != nil {
				t.Fatal(err)
			}
		}
		if a.Status != "complete" || a.Results[0].Outcome != "ok" || string(a.Results[0].Content[0].JSON) != `{"answer":"yes"}` || a.Results[1].Outcome != "ok" {
			t.Fatalf("turn %+v: want the answer and the approved write", a)
		}
		_, err = s.Turn(ctx, []client.Call{{ID: "other", Name: "read", Arguments: map[string]any{"path": "x"}}}, client.WithTurnID("t1"))
		var e *client.Error
		if !errors.As(err, &e) || e.Code != "turn_id_reused" || e.Status != 409 {
			t.Errorf("err=%v, want turn_id_reused", err)
		}
	})
}
