package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/node"
)

// TestHarnessToolSurvivesRestart: a registration is durable: the node
// restarted on the same data dir plans with it before serving anything, and
// a deleted one stays deleted.
func TestHarnessToolSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	tt := &testTools{}
	n := startNode(t, dir, nil, tt)
	sp := harness.Spec{Description: "d", Guidelines: []string{"g"}, InputSchema: json.RawMessage(`{"type":"object"}`), Effect: "read_only"}
	ctx := context.Background()
	for _, name := range []string{"keep", "drop"} {
		if err := n.PutTool(ctx, "default", name, sp); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.DeleteTool(ctx, "default", "drop"); err != nil {
		t.Fatal(err)
	}
	if err := n.PutTool(ctx, "default", "nap", sp); !errors.Is(err, node.ErrConflict) {
		t.Fatalf("PutTool over a Go tool: %v, want ErrConflict", err)
	}
	n.Close()

	n = startNode(t, dir, nil, tt)
	defer n.Close()
	ts, err := n.ToolsFor("default", "")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, tl := range ts {
		found[tl.Name] = true
	}
	if !found["keep"] || found["drop"] {
		t.Fatalf("after restart: keep %v, drop %v; want keep only", found["keep"], found["drop"])
	}
	other, _ := n.ToolsFor("other", "")
	for _, tl := range other {
		if tl.Name == "keep" {
			t.Fatal("another tenant sees default's harness tool")
		}
	}
	if got, ok := n.HarnessTool("default", "keep"); !ok || got.Effect != "read_only" {
		t.Fatalf("HarnessTool = %+v, %v", got, ok)
	}
}
