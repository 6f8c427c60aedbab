package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/tool"
)

func spec(id, name, args string) events.CallSpec {
	return events.CallSpec{ID: id, Name: name, Arguments: json.RawMessage(args)}
}

func started(t *testing.T, n *node.Node, s, call string) bool {
	return slices.Contains(sequence(recorded(t, n, s), events.TypeToolCallStarted), "ToolCallStarted:"+call)
}

func TestQuestionWaitsForTheAnswerAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	tt := &testTools{}
	n := startNode(t, dir, nil, tt)
	s := openSession(t, n)
	ctx := context.Background()
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{spec("q", "question", `{"question":"staging or production?","options":["staging","production"]}`)}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return started(t, n, s, "q") })
	// Answering a call that asks nothing is refused.
	if err := n.Answer(ctx, "default", s, "nope", json.RawMessage(`1`), ""); err == nil {
		t.Fatal("answer to an unknown call was accepted")
	}
	n.Close() // the node goes away while the question waits

	n = startNode(t, dir, nil, tt)
	defer n.Close()
	tv, err := n.Turn(ctx, "default", s, "t1")
	if err != nil || tv.Status != projections.StatusRunning {
		t.Fatalf("turn after restart: %+v %v, want still running", tv, err)
	}
	if err := n.Answer(ctx, "default", s, "q", json.RawMessage(`"staging"`), "alice"); err != nil {
		t.Fatal(err)
	}
	tv = submit(t, n, s, "t1")
	r := tv.Results[0]
	if r.Outcome != events.OutcomeOK || !strings.Contains(string(r.Content[0].JSON), `"staging"`) {
		t.Fatalf("question result %+v, want ok with the answer", r)
	}
}

func TestWorkStateIsDurable(t *testing.T) {
	dir := t.TempDir()
	tt := &testTools{}
	n := startNode(t, dir, nil, tt)
	s := openSession(t, n)
	submit(t, n, s, "t1", spec("p", "plan_update", `{"steps":[{"step":"read","status":"completed"},{"step":"fix","status":"in_progress"}]}`))
	n.Close()
	n = startNode(t, dir, nil, tt)
	defer n.Close()
	tv := submit(t, n, s, "t2", spec("g", "plan_get", `{}`), spec("t", "todo_get", `{}`))
	if got := string(tv.Results[0].Content[0].JSON); !strings.Contains(got, `"fix"`) {
		t.Fatalf("plan_get after restart = %s, want the plan", got)
	}
	if got := tv.Results[1].Content[0].Text; !strings.Contains(got, "no todo") {
		t.Fatalf("todo_get = %q, want none set", got)
	}
}

func TestRewindRestoresFilesByteForByte(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	ctx := context.Background()
	info, err := n.OpenSession(ctx, "default", "rw", "")
	if err != nil {
		t.Fatal(err)
	}
	s := info.Session
	orig := []byte("line one\nline two\x00binary\n")
	if err := os.WriteFile(filepath.Join(info.Workspace, "a.txt"), orig, 0o640); err != nil {
		t.Fatal(err)
	}
	submit(t, n, s, "t1", spec("w1", "write", `{"path":"a.txt","content":"changed\n"}`), spec("w2", "write", `{"path":"sub/new.txt","content":"new\n"}`))
	submit(t, n, s, "t2", spec("w3", "write", `{"path":"a.txt","content":"changed again\n"}`))
	res, err := n.Rewind(ctx, "default", s, "t1", "w1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(info.Workspace, "a.txt"))
	if err != nil || string(got) != string(orig) {
		t.Fatalf("a.txt after rewind = %q (%v), want the original bytes", got, err)
	}
	if st, _ := os.Stat(filepath.Join(info.Workspace, "a.txt")); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode after rewind %v, want 0640", st.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(info.Workspace, "sub/new.txt")); !os.IsNotExist(err) {
		t.Fatalf("a file created after the rewind point still exists (err %v)", err)
	}
	if len(res.Removed) != 1 || len(res.Restored) != 1 {
		t.Fatalf("rewind result %+v, want one restored and one removed", res)
	}
	evs := recorded(t, n, s)
	if got := sequence(evs, events.TypeFileCheckpointed); len(got) != 3 {
		t.Fatalf("checkpoints %v, want one per write", got)
	}
	if evs[len(evs)-1].Type != events.TypeWorkspaceRewound {
		t.Fatalf("last event %s, want WorkspaceRewound", evs[len(evs)-1].Type)
	}
	// Each committed write lists the file it touched.
	tr, _ := n.Transcript(ctx, "default", s)
	if tch := tr.Turns[0].Results[0].Touched; len(tch) != 1 || tch[0] != "a.txt" {
		t.Fatalf("touched=%v, want [a.txt]", tch)
	}
}

func TestBackgroundCallAnswersWithAJobHandle(t *testing.T) {
	tt := &testTools{}
	bgTool, err := tool.New("slow_bg", "runs in the background", func(ctx context.Context, a sleepArgs) (tool.Result, error) {
		time.Sleep(time.Duration(a.MS) * time.Millisecond)
		return tool.Text("background done"), nil
	}, tool.WithGuidelines("test"), tool.WithDeclarations(tool.Declarations{
		Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyIsolatedBackground}))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Tools: append(tt.tools(t), bgTool)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := openSession(t, n)
	tv := submit(t, n, s, "t1", spec("b", "slow_bg", `{"ms":400}`), nap("after", 1))
	var handle struct{ Job, Status string }
	if err := json.Unmarshal(tv.Results[0].Content[0].JSON, &handle); err != nil || handle.Status != "running" {
		t.Fatalf("background result %s, want a running job handle", tv.Results[0].Content[0].JSON)
	}
	tv = submit(t, n, s, "t2", spec("w", "bg", `{"action":"wait","job":"`+handle.Job+`"}`))
	out, _ := json.Marshal(tv.Results[0].Content)
	if !strings.Contains(string(out), `"status":"ok"`) || !strings.Contains(string(out), "background done") {
		t.Fatalf("bg wait = %s, want the finished job's output", out)
	}
	tv = submit(t, n, s, "t3", spec("l", "bg", `{"action":"list"}`), spec("j", "job", `{"job":"`+handle.Job+`"}`))
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK || !strings.Contains(string(r.Content[0].JSON), handle.Job) {
		t.Fatalf("bg list = %+v", r)
	}
}

func TestTaskDelegatesToTheHarnessEndpoint(t *testing.T) {
	var got map[string]any
	delegate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Write([]byte(`{"result":"found 3 callers"}`))
	}))
	defer delegate.Close()
	cfg := config.DefaultConfig()
	cfg.Delegate.Endpoint = delegate.URL
	tt := &testTools{}
	n := startNode(t, t.TempDir(), &cfg, tt)
	defer n.Close()
	s := openSession(t, n)
	tv := submit(t, n, s, "t1", spec("d", "task", `{"goal":"find callers of Parse"}`))
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != "found 3 callers" {
		t.Fatalf("task result %+v", r)
	}
	if got["goal"] != "find callers of Parse" || got["idempotency_key"] == "" || got["session"] != s {
		t.Fatalf("delegate got %v, want the goal, session and idempotency key", got)
	}
	// Without a delegate configured, task is unavailable.
	n2 := startNode(t, t.TempDir(), nil, tt)
	defer n2.Close()
	s2 := openSession(t, n2)
	if r := submit(t, n2, s2, "t1", spec("d", "task", `{"goal":"x"}`)).Results[0]; r.Block != events.BlockUnavailable {
		t.Fatalf("task without a delegate: %s/%s, want blocked/unavailable", r.Outcome, r.Block)
	}
}

func TestToolSearchFindsDeferredTools(t *testing.T) {
	tt := &testTools{}
	hidden, err := tool.New("kube_logs", "Fetch logs of a kubernetes pod.", func(ctx context.Context, a sleepArgs) (tool.Result, error) {
		return tool.Text("logs"), nil
	}, tool.WithGuidelines("test"), tool.WithDeferred(), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Concurrency: tool.ConcurrencyParallelSafe}))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Tools: append(tt.tools(t), hidden)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	defs, _ := n.ToolsFor("default", "")
	for _, d := range defs {
		if d.Name == "kube_logs" {
			t.Fatal("a deferred tool is in the model's list")
		}
	}
	s := openSession(t, n)
	tv := submit(t, n, s, "t1", spec("q", "tool_search", `{"query":"kubernetes logs"}`))
	if r := tv.Results[0]; !strings.Contains(string(r.Content[0].JSON), `"kube_logs"`) {
		t.Fatalf("tool_search = %+v, want kube_logs", r)
	}
	if r := submit(t, n, s, "t2", spec("k", "kube_logs", `{"ms":0}`)).Results[0]; r.Outcome != events.OutcomeOK {
		t.Fatalf("calling the found tool: %+v", r)
	}
}

func TestALargeImageDoesNotBreakTheSession(t *testing.T) {
	tt := &testTools{}
	img, err := tool.New("big_image", "returns a 1 MiB image", func(ctx context.Context, a sleepArgs) (tool.Result, error) {
		return tool.Image("image/png", make([]byte, 1<<20)), nil
	}, tool.WithGuidelines("test"), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Concurrency: tool.ConcurrencyParallelSafe}))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Tools: append(tt.tools(t), img)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := openSession(t, n)
	r := submit(t, n, s, "t1", spec("i", "big_image", `{"ms":0}`)).Results[0]
	if r.Outcome != events.OutcomeOK || r.Content[0].Type != "text" || !strings.Contains(r.Content[0].Text, "kept as") {
		t.Fatalf("large image result: %s %+v", r.Outcome, r.Content[0].Text)
	}
	submit(t, n, s, "t2", nap("after", 0)) // the session goes on
}

func TestPermanentFailuresOfSafeToolsAreNotRetried(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt)
	defer n.Close()
	info, err := n.OpenSession(context.Background(), "default", "perm", "")
	if err != nil {
		t.Fatal(err)
	}
	tv := submit(t, n, info.Session, "t1", spec("o", "read", `{"path":"../outside.txt"}`), spec("m", "read", `{"path":"missing.txt"}`))
	for _, r := range tv.Results {
		if r.Outcome != events.OutcomeError || r.Attempts != 1 {
			t.Errorf("%s: %s after %d attempts, want one error", r.ID, r.Outcome, r.Attempts)
		}
		if strings.Contains(r.Content[0].Text, info.Workspace) {
			t.Errorf("%s: the error shows the node's workspace path: %q", r.ID, r.Content[0].Text)
		}
	}
}

func TestToolSearchOffersOnlyCallableTools(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Tools = map[string]bool{"webfetch": false}
	tt := &testTools{}
	hidden, _ := tool.New("deep_thing", "a deferred tool about webfetch and lsp", func(ctx context.Context, a sleepArgs) (tool.Result, error) {
		return tool.Text("x"), nil
	}, tool.WithGuidelines("test"), tool.WithDeferred())
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: &cfg, Tools: append(tt.tools(t), hidden)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := openSession(t, n)
	r := submit(t, n, s, "t1", spec("q", "tool_search", `{"query":"webfetch lsp execute edit","limit":20}`)).Results[0]
	got := string(r.Content[0].JSON)
	for _, name := range []string{`"webfetch"`, `"lsp"`, `"execute"`, `"edit"`} {
		if strings.Contains(got, `"name":`+name) {
			t.Errorf("tool_search offered %s, which this session cannot call: %s", name, got)
		}
	}
	if !strings.Contains(got, `"deep_thing"`) {
		t.Errorf("tool_search did not offer the deferred tool: %s", got)
	}
}
