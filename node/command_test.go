package node_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
)

// commandTool is a command tool for these tests: a shell script, with the
// given schema.
func commandTool(name, schema, script string) config.CommandTool {
	return config.CommandTool{
		Name: name, Description: "test tool " + name, Guidelines: []string{"Use in tests."},
		InputSchema: json.RawMessage(schema), Command: []string{"sh", "-c", script},
	}
}

// TestCommandToolContract: a command tool declares, in config alone, what a
// Go tool can (docs/spec.md §1, §6), and the runtime honours each
// declaration: mutated paths are checkpointed and rewound, touched paths
// recorded, a deferred tool is found by tool_search only, calls of a
// self-concurrent tool overlap, and an escalated call asks first.
func TestCommandToolContract(t *testing.T) {
	stamp := commandTool("stamp",
		`{"type": "object", "properties": {"path": {"type": "string"}, "sources": {"type": "array", "items": {"type": "string"}}}, "required": ["path"]}`,
		// The argument "path" names the file the program writes.
		`read a; p=$(printf %s "$a" | sed 's/.*"path":"\([^"]*\)".*/\1/'); echo stamped > "$p"; echo "stamped $p"`)
	stamp.MutatedPaths = []string{"path"}
	stamp.TouchedPaths = []string{"/sources"}

	hidden := commandTool("ledger_lookup", `{"type": "object", "properties": {}}`, `echo "ledger entry 42"`)
	hidden.Description = "Look up an entry of the accounting ledger."
	hidden.Deferred = true
	hidden.Effect, hidden.Replay, hidden.Concurrency = "read_only", "safe", "parallel_safe"

	// Each call leaves a marker and waits (up to 30 s) for a second one:
	// only calls that overlap both finish "met".
	meet := commandTool("meet", `{"type": "object", "properties": {}}`,
		`touch "m.$CALLSHEET_CALL_ID"; i=0; while [ "$(ls m.* | wc -l)" -lt 2 ]; do i=$((i+1)); if [ $i -gt 600 ]; then echo "ran alone" >&2; exit 7; fi; sleep 0.05; done; echo met`)
	meet.SelfConcurrency = 2

	deploy := commandTool("deploy", `{"type": "object", "properties": {"target": {"type": "string"}, "escalate": {"type": "boolean"}}}`, `cat`)
	deploy.Escalation = true

	cfg := config.DefaultConfig()
	cfg.CommandTools = []config.CommandTool{stamp, hidden, meet, deploy}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	info, err := n.OpenSession(ctx, "default", "", "")
	if err != nil {
		t.Fatal(err)
	}
	s := info.Session

	// Mutated and touched paths.
	if err := os.WriteFile(filepath.Join(info.Workspace, "a.txt"), []byte("orig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := submit(t, n, s, "t1", spec("w", "stamp", `{"path": "a.txt", "sources": ["src/one.txt", "src/two.txt"]}`)).Results[0]
	if r.Outcome != events.OutcomeOK {
		t.Fatalf("stamp: %+v", r)
	}
	if got, want := r.Touched, []string{"a.txt", "src/one.txt", "src/two.txt"}; !slices.Equal(got, want) {
		t.Errorf("touched=%q, want %q", got, want)
	}
	var checkpointed []string
	for _, ev := range recorded(t, n, s) {
		if ev.Type == events.TypeFileCheckpointed {
			p, _ := events.Decode(ev)
			checkpointed = append(checkpointed, p.(*events.FileCheckpointed).Path)
		}
	}
	if !slices.Equal(checkpointed, []string{"a.txt"}) {
		t.Fatalf("checkpointed %q, want [a.txt]", checkpointed)
	}
	if _, err := n.Rewind(ctx, "default", s, "t1", "w"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(info.Workspace, "a.txt")); string(b) != "orig\n" {
		t.Errorf("a.txt after the rewind = %q, want the pre-image", b)
	}

	// Deferred: out of the model's list, found by tool_search, callable.
	defs, err := n.ToolsFor("default", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Name == "ledger_lookup" {
			t.Fatal("a deferred command tool is in the model's tool list")
		}
	}
	found := submit(t, n, s, "t2", spec("q", "tool_search", `{"query": "accounting ledger"}`)).Results[0]
	if found.Outcome != events.OutcomeOK || !strings.Contains(string(found.Content[0].JSON), `"ledger_lookup"`) {
		t.Fatalf("tool_search = %+v, want ledger_lookup", found)
	}
	if r := submit(t, n, s, "t3", spec("l", "ledger_lookup", `{}`)).Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != "ledger entry 42\n" {
		t.Fatalf("calling the found tool: %+v", r)
	}

	// Self-concurrency: two calls of the exclusive tool overlap.
	for _, r := range submit(t, n, s, "t4", spec("m1", "meet", `{}`), spec("m2", "meet", `{}`)).Results {
		if r.Outcome != events.OutcomeOK || r.Content[0].Text != "met\n" {
			t.Fatalf("meet %s = %+v, want both calls to overlap", r.ID, r)
		}
	}

	// Escalation: never allowed silently, even without strict mode.
	if _, err := n.SubmitTurn(ctx, "default", s, "t5", []events.CallSpec{spec("d", "deploy", `{"target": "prod", "escalate": true}`)}, false); err != nil {
		t.Fatal(err)
	}
	if req := waitApproval(t, n, s, "d"); !req.Escalate || req.Rule != "escalation" {
		t.Fatalf("approval request %+v, want an escalation asked by the escalation rule", req)
	}
	if err := n.Approve(ctx, "default", s, "d", true, "ops", "", events.ScopeCall); err != nil {
		t.Fatal(err)
	}
	if r := submit(t, n, s, "t5").Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != `{"target":"prod","escalate":true}`+"\n" {
		t.Fatalf("approved escalation: %+v, want the program to see escalate on stdin", r)
	}
}

// TestCommandToolContractRefusedAtStart: a declaration that cannot work
// stops the node at start-up, naming the config path and the reason.
func TestCommandToolContractRefusedAtStart(t *testing.T) {
	for _, c := range []struct {
		edit func(*config.CommandTool)
		want string
	}{
		{func(ct *config.CommandTool) { ct.MutatedPaths = []string{"pth"} }, `command_tools[0] (stamp)`},
		{func(ct *config.CommandTool) { ct.MutatedPaths = []string{"pth"} }, `mutated_paths[0] "pth": the input schema has no property "pth"`},
		{func(ct *config.CommandTool) { ct.Escalation = true }, `no "escalate" property`},
		{func(ct *config.CommandTool) { ct.Effect = "read_only"; ct.MutatedPaths = []string{"path"} }, "command_tools[0].mutated_paths: a read_only tool may not declare mutated paths"},
	} {
		ct := commandTool("stamp", `{"type": "object", "properties": {"path": {"type": "string"}}}`, "cat")
		c.edit(&ct)
		cfg := config.DefaultConfig()
		cfg.CommandTools = []config.CommandTool{ct}
		n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: &cfg})
		if err == nil {
			n.Close()
			t.Fatalf("node started with %+v", ct)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("err=%v, want it to say %q", err, c.want)
		}
	}
}

// TestCommandToolPathsStayInTheWorkspace: a hostile model names files
// outside the workspace in a command tool's mutated and touched paths (by
// "..", by an absolute path, through a symlink). None of them is
// checkpointed (their content never reaches the object store) and none
// climbing out with ".." is recorded as touched; the file inside is.
func TestCommandToolPathsStayInTheWorkspace(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ct := commandTool("stamp", `{"type": "object", "properties": {"files": {"type": "array", "items": {"type": "string"}}, "reads": {"type": "array", "items": {"type": "string"}}}}`, "true")
	ct.MutatedPaths = []string{"files"}
	ct.TouchedPaths = []string{"/reads/*"}
	cfg := config.DefaultConfig()
	cfg.CommandTools = []config.CommandTool{ct}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	info, err := n.OpenSession(context.Background(), "default", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(info.Workspace, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info.Workspace, "ok.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	up, err := filepath.Rel(info.Workspace, secret)
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string][]string{
		"files": {up, secret, "link/secret.txt", "ok.txt", "sub/../../" + filepath.Base(info.Workspace) + "/../" + filepath.Base(outside) + "/secret.txt"},
		"reads": {up, "../../etc/passwd", "ok.txt"},
	})
	r := submit(t, n, info.Session, "t1", spec("x", "stamp", string(args))).Results[0]
	if r.Outcome != events.OutcomeOK {
		t.Fatalf("stamp: %+v", r)
	}
	var checkpointed []string
	for _, ev := range recorded(t, n, info.Session) {
		if strings.Contains(string(ev.Data), "top secret") {
			t.Fatalf("event %s holds the secret: %s", ev.Type, ev.Data)
		}
		if ev.Type == events.TypeFileCheckpointed {
			p, _ := events.Decode(ev)
			cp := p.(*events.FileCheckpointed)
			checkpointed = append(checkpointed, cp.Path)
			if cp.Object != "" {
				if b, err := n.Output(context.Background(), "default", cp.Object); err == nil && strings.Contains(string(b), "top secret") {
					t.Fatalf("the pre-image of %s holds the secret", cp.Path)
				}
			}
		}
	}
	if !slices.Equal(checkpointed, []string{"ok.txt"}) {
		t.Errorf("checkpointed %q, want only ok.txt", checkpointed)
	}
	for _, p := range r.Touched {
		if strings.HasPrefix(p, "..") {
			t.Errorf("touched %q: a path that climbs out of the workspace was recorded", p)
		}
	}
	if !slices.Contains(r.Touched, "ok.txt") {
		t.Errorf("touched %q, want ok.txt among them", r.Touched)
	}
}
