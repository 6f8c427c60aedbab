package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/procs"

	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// testCall is the call every test runs as, but for its workspace.
var testCall = tool.Call{
	Tenant:         "default",
	Session:        "sess-1",
	Turn:           "turn-1",
	ID:             "call-1",
	Index:          0,
	Attempt:        2,
	IdempotencyKey: "idem-1",
}

// env is a workspace beside an outside directory, and a context carrying a
// call in that workspace.
type env struct {
	root, outside string
	ws            *workspace.Dir
	ctx           context.Context
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{root: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{e.root, e.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// As the node does (docs/tools/shell.md "The sandbox"): a workspace
	// belongs to the uid sandboxed commands run as.
	if uid, gid := DefaultSandbox().Owner(testCall.Tenant); os.Geteuid() == 0 {
		if err := os.Chown(e.root, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c := testCall
	c.Workspace = e.root
	e.ws = openWorkspace(t, e.root)
	e.ctx = workspace.NewContext(tool.WithCall(context.Background(), c), e.ws)
	return e
}

// goneMarked waits up to 5 s until no process holds marker.
func goneMarked(t *testing.T, marker string) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if len(procs.Marked(marker)) == 0 {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// sleepMarker is a sleep duration no other process uses.
func sleepMarker() string { return fmt.Sprintf("30.%09d", rand.IntN(1e9)) }

// openWorkspace opens dir as a workspace, as the runtime does for a call,
// until the test ends.
func openWorkspace(t *testing.T, dir string) *workspace.Dir {
	t.Helper()
	ws, err := workspace.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// file writes body at the workspace-relative path rel.
func (e *env) file(t *testing.T, rel, body string) string {
	t.Helper()
	p := filepath.Join(e.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// builtin returns the built-in tool of that name.
func builtin(t *testing.T, name string) *tool.Tool {
	t.Helper()
	all, err := Builtins()
	return pick(t, name, all, err)
}

// pick returns the tool named name from a constructor's tools, failing the
// test on the constructor's error or a missing tool.
func pick(t *testing.T, name string, all []*tool.Tool, err error) *tool.Tool {
	t.Helper()
	if err != nil {
		t.Fatalf("building %s: %v", name, err)
	}
	for _, tl := range all {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q among those built", name)
	return nil
}

// registered returns a constructor's tool after checking that a registry
// accepts it (so the test drives what the runtime would).
func registered(t *testing.T, tl *tool.Tool, err error) *tool.Tool {
	t.Helper()
	if err != nil {
		t.Fatalf("building a tool: %v", err)
	}
	if _, err := tool.NewRegistry(tl); err != nil {
		t.Fatalf("register %s: %v", tl.Name, err)
	}
	return tl
}

// call validates args and runs tl with them in ctx, as the runtime would.
func call(t *testing.T, ctx context.Context, tl *tool.Tool, args string) (tool.Result, error) {
	t.Helper()
	if err := tl.Validate(json.RawMessage(args)); err != nil {
		t.Fatalf("%s: Validate(%s) = %v, want nil", tl.Name, args, err)
	}
	return tl.Run(ctx, json.RawMessage(args))
}

// text returns the text of a result with one text part.
func text(t *testing.T, r tool.Result) string {
	t.Helper()
	if len(r.Parts) != 1 || r.Parts[0].Type != tool.PartText {
		t.Fatalf("result parts=%+v, want one text part", r.Parts)
	}
	return r.Parts[0].Text
}

// mustContain fails unless s contains every one of want.
func mustContain(t *testing.T, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%q does not contain %q", s, w)
		}
	}
}
