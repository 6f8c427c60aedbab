package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/procs"
	"github.com/callsheet/callsheet/tool"
)

// echoSchema takes one required string, "name", and nothing else.
const echoSchema = `{"type": "object", "properties": {"name": {"type": "string"}, "count": {"type": "integer"}}, "required": ["name"]}`

func commandSpec(command ...string) CommandSpec {
	return CommandSpec{
		Name:        "echo_args",
		Description: "Echo the arguments back.",
		Guidelines:  []string{"Use it in tests."},
		InputSchema: json.RawMessage(echoSchema),
		Command:     command,
	}
}

func mustCommand(t *testing.T, spec CommandSpec) *tool.Tool {
	t.Helper()
	tl, err := Command(spec)
	if err != nil {
		t.Fatalf("Command(%+v): %v", spec, err)
	}
	return tl
}

func TestCommandArgumentsOnStdin(t *testing.T) {
	e := newEnv(t)
	tl := mustCommand(t, commandSpec("cat"))
	// Shell metacharacters in an argument reach the program as data.
	r, err := call(t, e.ctx, tl, `{"name": "x; touch pwned $(id)", "count": 2}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), `{"name":"x; touch pwned $(id)","count":2}`+"\n"; got != want {
		t.Errorf("stdin=%q, want %q", got, want)
	}
	// Arguments sent as a string holding the object arrive normalized.
	r, err = call(t, e.ctx, tl, `"{\"name\": \"s\"}"`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), `{"name":"s"}`+"\n"; got != want {
		t.Errorf("stdin=%q, want %q", got, want)
	}
	if m, _ := filepath.Glob(filepath.Join(e.root, "pwned*")); len(m) != 0 {
		t.Errorf("an argument was executed: %q exists", m)
	}
}

func TestCommandWorkspaceAndEnv(t *testing.T) {
	e := newEnv(t)
	spec := commandSpec("sh", "-c", `pwd -P; echo "$CALLSHEET_CALL_ID $CALLSHEET_IDEMPOTENCY_KEY $CALLSHEET_SESSION $CALLSHEET_TURN $CALLSHEET_ATTEMPT $REGION $HOME"`)
	spec.Env = map[string]string{"REGION": "eu-west"}
	r, err := call(t, e.ctx, mustCommand(t, spec), `{"name": "a"}`)
	if err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(e.root)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), real+"\ncall-1 idem-1 sess-1 turn-1 2 eu-west "+e.root+"\n"; got != want {
		t.Errorf("text=%q, want %q", got, want)
	}
}

func TestCommandFailure(t *testing.T) {
	e := newEnv(t)
	tl := mustCommand(t, commandSpec("sh", "-c", "echo partial; echo 'no such widget' >&2; exit 4"))
	r, err := call(t, e.ctx, tl, `{"name": "a"}`)
	if err == nil {
		t.Fatalf("result=%+v, want an error for a non-zero exit", r)
	}
	mustContain(t, err.Error(), "exited with code 4", "no such widget")

	// Without stderr, the message quotes stdout.
	tl = mustCommand(t, commandSpec("sh", "-c", "echo only-stdout; exit 1"))
	_, err = call(t, e.ctx, tl, `{"name": "a"}`)
	if err == nil {
		t.Fatal("want an error for exit 1")
	}
	mustContain(t, err.Error(), "exited with code 1", "only-stdout")
}

func TestCommandTimeout(t *testing.T) {
	e := newEnv(t)
	m := sleepMarker()
	spec := commandSpec("sh", "-c", "sleep "+m)
	spec.Timeout = 300 * time.Millisecond
	_, err := call(t, e.ctx, mustCommand(t, spec), `{"name": "a"}`)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err=%v, want ErrTimeout", err)
	}
	if !goneMarked(t, m) {
		t.Errorf("processes %v still run after the timeout", procs.Marked(m))
	}

	// Unsandboxed, the process has a host pid: its group is killed.
	spec = commandSpec("sh", "-c", "echo $$ > cmd.pid; sleep 30")
	spec.Timeout, spec.Unsandboxed = 300*time.Millisecond, true
	if _, err := call(t, e.ctx, mustCommand(t, spec), `{"name": "a"}`); !errors.Is(err, ErrTimeout) {
		t.Fatalf("unsandboxed: err=%v, want ErrTimeout", err)
	}
	if pid := readPid(t, filepath.Join(e.root, "cmd.pid")); !gone(t, pid) {
		t.Errorf("process %d still runs after the timeout", pid)
	}
}

// TestCommandSandbox: a command tool runs in the sandbox unless it opts
// out: inside, the directory beside the workspace is absent and the node's
// processes invisible; with Unsandboxed it sees both.
func TestCommandSandbox(t *testing.T) {
	e := newEnv(t)
	secret := filepath.Join(e.outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := "cat " + secret + " 2>&1; test -e /proc/" + strconv.Itoa(os.Getpid()) + " && echo node-visible; id -u"
	for _, unsandboxed := range []bool{false, true} {
		spec := commandSpec("sh", "-c", probe)
		spec.Unsandboxed = unsandboxed
		r, err := call(t, e.ctx, mustCommand(t, spec), `{"name": "a"}`)
		if err != nil {
			t.Fatalf("unsandboxed=%v: %v", unsandboxed, err)
		}
		got := text(t, r)
		if leaked := strings.Contains(got, "s3cret") || strings.Contains(got, "node-visible"); leaked != unsandboxed {
			t.Errorf("unsandboxed=%v: output %q; want the outside file and the node seen only when unsandboxed", unsandboxed, got)
		}
	}
	// An approved escalated call runs outside the sandbox.
	spec := commandSpec("sh", "-c", probe)
	spec.InputSchema = json.RawMessage(`{"type": "object", "properties": {"name": {"type": "string"}, "escalate": {"type": "boolean"}}}`)
	spec.Escalation = true
	c, _ := tool.CallFrom(e.ctx)
	c.Escalate = true
	r, err := call(t, tool.WithCall(context.Background(), c), mustCommand(t, spec), `{"name": "a", "escalate": true}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, r); !strings.Contains(got, "s3cret") || !strings.Contains(got, "node-visible") {
		t.Errorf("escalated: output %q, want it to run outside the sandbox", got)
	}
}

func TestCommandValidate(t *testing.T) {
	tl := mustCommand(t, commandSpec("cat"))
	for _, args := range []string{
		`{"name": "a", "extra": true}`, // unknown argument
		`{"count": 1}`,                 // missing required
		`{"name": 5}`,                  // wrong type
		`{"name": "a", "count": "2"}`,  // no coercion
		`{"name": "a"`,                 // truncated
	} {
		if err := tl.Validate(json.RawMessage(args)); !errors.Is(err, tool.ErrInvalidArguments) {
			t.Errorf("Validate(%s) err=%v, want ErrInvalidArguments", args, err)
		}
	}
	// Run re-checks: invalid arguments never reach the program.
	e := newEnv(t)
	if _, err := tl.Run(e.ctx, json.RawMessage(`{"name": "a", "extra": true}`)); !errors.Is(err, tool.ErrInvalidArguments) {
		t.Errorf("Run with an unknown argument err=%v, want ErrInvalidArguments", err)
	}
}

func TestCommandDeclarations(t *testing.T) {
	tl := mustCommand(t, commandSpec("cat"))
	if tl.Declarations != (tool.Declarations{}) {
		t.Errorf("declarations=%+v, want them left empty", tl.Declarations)
	}
	reg, err := tool.NewRegistry(tl)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := reg.Get("echo_args")
	if got.Declarations != tool.Strictest {
		t.Errorf("registered declarations=%+v, want the strictest", got.Declarations)
	}
	if got.EffectiveTimeout() != tool.DefaultTimeout {
		t.Errorf("timeout=%v, want %v", got.EffectiveTimeout(), tool.DefaultTimeout)
	}

	spec := commandSpec("cat")
	spec.Effect, spec.Replay, spec.Concurrency = "read_only", "safe", "parallel_safe"
	spec.Labels = []string{"external"}
	tl = mustCommand(t, spec)
	want := tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}
	if tl.Declarations != want || len(tl.Labels) != 1 || tl.Labels[0] != tool.LabelExternal {
		t.Errorf("declarations=%+v labels=%v, want %+v [external]", tl.Declarations, tl.Labels, want)
	}

	// No schema: a tool without arguments, which reads {}.
	spec = commandSpec("cat")
	spec.InputSchema = nil
	tl = mustCommand(t, spec)
	e := newEnv(t)
	r, err := call(t, e.ctx, tl, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, r); got != "{}\n" {
		t.Errorf("stdin=%q, want {}", got)
	}
	if err := tl.Validate(json.RawMessage(`{"x": 1}`)); !errors.Is(err, tool.ErrInvalidArguments) {
		t.Errorf("Validate of an argument to a tool without arguments err=%v, want ErrInvalidArguments", err)
	}
}

func TestCommandInvalidSpec(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*CommandSpec)
		wantErr error
	}{
		{"no command", func(s *CommandSpec) { s.Command = nil }, ErrInvalidCommand},
		{"unknown program", func(s *CommandSpec) { s.Command = []string{"no-such-program-callsheet"} }, ErrInvalidCommand},
		{"runtime variable", func(s *CommandSpec) { s.Env = map[string]string{"CALLSHEET_CALL_ID": "x"} }, ErrInvalidCommand},
		{"bad variable name", func(s *CommandSpec) { s.Env = map[string]string{"A=B": "x"} }, ErrInvalidCommand},
		{"bad name", func(s *CommandSpec) { s.Name = "has space" }, tool.ErrInvalidTool},
		{"no description", func(s *CommandSpec) { s.Description = "" }, tool.ErrInvalidTool},
		{"no guideline", func(s *CommandSpec) { s.Guidelines = []string{" "} }, tool.ErrInvalidTool},
		{"bad effect", func(s *CommandSpec) { s.Effect = "mostly_harmless" }, tool.ErrInvalidTool},
		{"bad label", func(s *CommandSpec) { s.Labels = []string{"spicy"} }, tool.ErrInvalidTool},
		{"negative timeout", func(s *CommandSpec) { s.Timeout = -time.Second }, tool.ErrInvalidTool},
		{"schema not an object", func(s *CommandSpec) { s.InputSchema = json.RawMessage(`{"type": "string"}`) }, tool.ErrInvalidTool},
		{"schema not JSON", func(s *CommandSpec) { s.InputSchema = json.RawMessage(`{`) }, tool.ErrInvalidTool},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := commandSpec("cat")
			tt.edit(&spec)
			tl, err := Command(spec)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Command: tool=%v err=%v, want %v", tl, err, tt.wantErr)
			}
			if strings.TrimSpace(err.Error()) == "" {
				t.Error("empty error message")
			}
		})
	}
}

func TestBuiltins(t *testing.T) {
	all, err := Builtins()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range all {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "read,write,shell" {
		t.Errorf("names=%v, want read, write, shell", names)
	}
	if _, err := tool.NewRegistry(all...); err != nil {
		t.Errorf("the registry refuses a built-in: %v", err)
	}
}
