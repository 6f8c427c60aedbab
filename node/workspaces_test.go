package node_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
)

// TestWorkspaceHandleFollowsTheSession: a session's calls leave one
// workspace handle open for the next; the node drops it after a rewind,
// when the session is closed, and when its actor passivates.
func TestWorkspaceHandleFollowsTheSession(t *testing.T) {
	ctx := context.Background()
	n, err := node.New(ctx, node.Options{DataDir: t.TempDir(), IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	write := func(id string) events.CallSpec {
		args, _ := json.Marshal(map[string]string{"path": id + ".txt", "content": id})
		return events.CallSpec{ID: id, Name: "write", Arguments: args}
	}
	handles := func(want int, when string) {
		t.Helper()
		if got := n.WorkspaceHandles(); got != want {
			t.Errorf("%s: %d workspace handles open, want %d", when, got, want)
		}
	}
	s := openSession(t, n)
	handles(0, "after OpenSession")
	submit(t, n, s, "t1", write("w1"))
	submit(t, n, s, "t2", write("w2"), write("w3"))
	handles(1, "after two turns")
	if _, err := n.Rewind(ctx, "default", s, "t2", "w2"); err != nil {
		t.Fatal(err)
	}
	handles(0, "after a rewind")
	submit(t, n, s, "t3", write("w4"))
	handles(1, "after the next turn")
	other := openSession(t, n)
	submit(t, n, other, "t1", write("x"))
	handles(2, "with a second session")
	if err := n.CloseSession(ctx, "default", s, "done"); err != nil {
		t.Fatal(err)
	}
	handles(1, "after CloseSession")
}

// TestWorkspaceHandleDroppedOnPassivation: a session whose actor passivates
// leaves no workspace handle open.
func TestWorkspaceHandleDroppedOnPassivation(t *testing.T) {
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), IdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := openSession(t, n)
	args, _ := json.Marshal(map[string]string{"path": "a.txt", "content": "a"})
	submit(t, n, s, "t1", events.CallSpec{ID: "w", Name: "write", Arguments: args})
	deadline := time.Now().Add(30 * time.Second)
	for n.WorkspaceHandles() != 0 || n.LiveSessions() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the session went idle: %d handles, %d live sessions; want 0, 0", n.WorkspaceHandles(), n.LiveSessions())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWorkspaceHandlesForManySessions: a node keeps a handle for each live
// session whose calls use its workspace, more than workspace.DefaultMaxIdle
// of them too: a bound below the sessions a node serves would drop, in a
// cycle of their calls, each one's handle before its next call, and every
// call would open and verify its workspace afresh (BenchmarkOpenPerCall
// against BenchmarkCacheLease: about 14 times the cost of a lease).
func TestWorkspaceHandlesForManySessions(t *testing.T) {
	ctx := context.Background()
	n, err := node.New(ctx, node.Options{DataDir: t.TempDir(), IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const sessions = 300
	if kept := node.WorkspaceHandlesKept(); kept < sessions {
		t.Skipf("the file descriptor limit gives the node %d workspace handles, fewer than %d sessions", kept, sessions)
	}
	args, _ := json.Marshal(map[string]string{"path": "a.txt", "content": "a"})
	for i := range sessions {
		submit(t, n, openSession(t, n), "t1", events.CallSpec{ID: "w", Name: "write", Arguments: args})
		if i == 0 && n.WorkspaceHandles() != 1 {
			t.Fatalf("after the first session's call: %d workspace handles open, want 1", n.WorkspaceHandles())
		}
	}
	if got := n.WorkspaceHandles(); got != sessions {
		t.Fatalf("%d live sessions that each ran a call: %d workspace handles open, want %d", sessions, got, sessions)
	}
}
