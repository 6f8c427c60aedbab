package security

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
)

// TestMain lets this binary serve as the shell sandbox helper, finds rg, and
// removes the binaries internal/testnode built when the run ends.
func TestMain(m *testing.M) {
	testenv.Main(m, nil, testnode.Cleanup)
}

// node starts a default node process (cmd/callsheet-node, no build tags) on a fresh
// data dir, with cfg as its config when not nil, and extra flags.
func node(t *testing.T, cfg any, args ...string) *testnode.Proc {
	t.Helper()
	return testnode.Start(t, testnode.Node(t, ""), testnode.Options{
		Data: filepath.Join(t.TempDir(), "data"), Config: cfg, Args: args,
	})
}

// open opens a session on p (with workspace name ws, or the default) and
// returns its id.
func open(t *testing.T, p *testnode.Proc, ws string) string {
	t.Helper()
	body := map[string]any{}
	if ws != "" {
		body["workspace"] = ws
	}
	var out struct{ Session string }
	code, err := p.Do("POST", "/v1/sessions", body, &out)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("open session (workspace %q): %d %v", ws, code, err)
	}
	return out.Session
}

// call runs one call as a one-call turn and returns its result.
func call(t *testing.T, p *testnode.Proc, session, name string, args any) projections.Turn {
	t.Helper()
	var tv projections.Turn
	body := map[string]any{"calls": []any{map[string]any{"id": "c1", "name": name, "arguments": args}}}
	code, err := p.Do("POST", fmt.Sprintf("/v1/sessions/%s/turns", session), body, &tv)
	if err != nil || code != http.StatusOK || len(tv.Results) != 1 {
		t.Fatalf("%s %v: %d %v %+v", name, args, code, err, tv)
	}
	return tv
}
