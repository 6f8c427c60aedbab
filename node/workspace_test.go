package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
)

// TestWorkspaceOwner: a new workspace's directories get the owner
// Options.WorkspaceOwner names, and the files the file tools then create
// in it take that owner too (docs/security.md, "Workspace"), so a sandboxed
// command running as the owner can change them. Giving files away needs
// root; as any other user the option is refused when it names someone
// else.
func TestWorkspaceOwner(t *testing.T) {
	const uid, gid = 4321, 4322
	dir := t.TempDir()
	n, err := node.New(context.Background(), node.Options{DataDir: dir,
		WorkspaceOwner: func(string) (int, int, bool) { return uid, gid, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	info, err := n.OpenSession(context.Background(), "default", "team/w", "")
	if os.Geteuid() != 0 {
		if err == nil || !strings.Contains(err.Error(), "giving it to uid") {
			t.Fatalf("OpenSession as uid %d with another owner: err=%v, want a refusal to give it away", os.Geteuid(), err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	owned := func(p string, wantUID, wantGID int) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != wantUID || int(st.Gid) != wantGID {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, wantUID, wantGID)
		}
	}
	tenantRoot := filepath.Join(dir, "workspaces", "default")
	owned(tenantRoot, 0, 0)
	owned(filepath.Join(tenantRoot, "team"), uid, gid)
	owned(info.Workspace, uid, gid)

	args, _ := json.Marshal(map[string]string{"path": "a/b/new.txt", "content": "x\n"})
	submit(t, n, info.Session, "t1", events.CallSpec{ID: "w", Name: "write", Arguments: args})
	for _, p := range []string{"a", "a/b", "a/b/new.txt"} {
		owned(filepath.Join(info.Workspace, p), uid, gid)
	}

	// A name through a link is refused with ErrInvalid (HTTP 400).
	if err := os.Symlink("/", filepath.Join(info.Workspace, "root")); err != nil {
		t.Fatal(err)
	}
	if _, err := n.OpenSession(context.Background(), "default", "team/w/root", ""); !errors.Is(err, node.ErrInvalid) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("OpenSession through a link: err=%v, want ErrInvalid naming the symbolic link", err)
	}
}
