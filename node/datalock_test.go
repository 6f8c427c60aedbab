package node_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/node"
)

// TestSecondNodeOnTheSameDataDirIsRefused: node.New, the one place cmd/callsheet-node
// and a Go program go through, refuses a data directory another node holds
// (naming it, touching nothing), and takes it once that node has closed.
func TestSecondNodeOnTheSameDataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	first := startNode(t, dir, nil, nil)
	t.Cleanup(func() { first.Close() })
	s := openSession(t, first)

	_, err := node.New(context.Background(), node.Options{DataDir: dir, Name: "second"})
	if !errors.Is(err, node.ErrDataDirInUse) {
		t.Fatalf("second node.New: err=%v, want ErrDataDirInUse", err)
	}
	if !strings.Contains(err.Error(), "in use by callsheet-node") || !strings.Contains(err.Error(), "another --data directory") {
		t.Errorf("error %q: want the holder and what to do", err)
	}
	if err := node.CheckDataDir(dir); !errors.Is(err, node.ErrDataDirInUse) {
		t.Errorf("CheckDataDir while held: %v", err)
	}
	// The refused node touched nothing: the first still serves its session.
	if _, err := first.SessionStatus(context.Background(), "default", s); err != nil {
		t.Fatalf("first node after the refusal: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := node.CheckDataDir(dir); err != nil {
		t.Fatalf("CheckDataDir after Close: %v", err)
	}
	again := startNode(t, dir, nil, nil)
	t.Cleanup(func() { again.Close() })
	if _, err := again.SessionStatus(context.Background(), "default", s); err != nil {
		t.Fatalf("session after the restart: %v", err)
	}
	if _, err := os.Stat(dir + "/LOCK"); err != nil {
		t.Fatal(err)
	}
}

// TestRelativeDataDir: a relative --data (the default is ./data) starts a
// node; every path the node derives from it is absolute.
func TestRelativeDataDir(t *testing.T) {
	t.Chdir(t.TempDir())
	n, err := node.New(context.Background(), node.Options{DataDir: "data"})
	if err != nil {
		t.Fatalf("node.New with a relative data dir: %v", err)
	}
	defer n.Close()
	if _, err := os.Stat("data/LOCK"); err != nil {
		t.Fatal(err)
	}
}
