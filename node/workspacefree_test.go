package node_test

import (
	"context"
	"slices"
	"testing"

	"github.com/callsheet/callsheet/node"
)

// TestWorkspaceFreeTools pins which built-in tools declare that they never
// touch the session's workspace: only those run, in a fleet without shared
// workspaces, on a node that does not keep it (docs/spec.md §7); every
// other tool, and every command tool, needs it (the strictest).
func TestWorkspaceFreeTools(t *testing.T) {
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var free []string
	for _, tl := range n.Registry().All() {
		if tl.WorkspaceFree {
			free = append(free, tl.Name)
		}
	}
	want := []string{"bg", "goal_get", "goal_update", "job", "plan_get", "plan_update", "question", "todo_get", "todo_update", "webfetch"}
	if !slices.Equal(free, want) {
		t.Fatalf("workspace-free tools %v, want %v", free, want)
	}
}
