package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// layout builds a workspace with real files and real symbolic links beside
// an outside directory, and returns the workspace root and the outside dir.
//
//	outside/secret.txt
//	ws/a.txt
//	ws/sub/b.txt
//	ws/sub/deep/
//	ws/in-link      -> sub/b.txt          (inside, relative)
//	ws/in-abs       -> <ws>/sub           (inside, absolute)
//	ws/dir-link     -> sub/deep           (inside, a directory)
//	ws/out-link     -> <outside>/secret.txt
//	ws/out-dir      -> <outside>
//	ws/dangling-out -> <outside>/new.txt  (target does not exist)
//	ws/dangling-in  -> sub/new.txt        (target does not exist)
//	ws/sub/up       -> ..                 (back to the root: inside)
//	ws/sub/upup     -> ../..              (the parent of the root: outside)
//	ws/loop         -> loop
func layout(t testing.TB) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "ws")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{outside, filepath.Join(root, "sub", "deep")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{
		filepath.Join(outside, "secret.txt"): "secret",
		filepath.Join(root, "a.txt"):         "a",
		filepath.Join(root, "sub", "b.txt"):  "b",
	} {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"in-link":      "sub/b.txt",
		"in-abs":       filepath.Join(root, "sub"),
		"dir-link":     "sub/deep",
		"out-link":     filepath.Join(outside, "secret.txt"),
		"out-dir":      outside,
		"dangling-out": filepath.Join(outside, "new.txt"),
		"dangling-in":  "sub/new.txt",
		"sub/up":       "..",
		"sub/upup":     "../..",
		"loop":         "loop",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

// openDir opens dir as a workspace until the test ends.
func openDir(t testing.TB, dir string) *Dir {
	t.Helper()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// errAny marks a case that must fail, for any reason.
var errAny = errors.New("any error")

func TestRel(t *testing.T) {
	const root = "/srv/ws"
	tests := []struct {
		path, want string
		wantErr    error
	}{
		{path: "a.txt", want: "a.txt"},
		{path: ".", want: "."},
		{path: "./a/../b//c/", want: "b/c"},
		{path: "/srv/ws", want: "."},
		{path: "/srv/ws/x/y", want: "x/y"},
		{path: "/srv/ws/x/../y", want: "y"},
		{path: "link/..", want: "."},
		{path: "", wantErr: ErrInvalidPath},
		{path: "a\x00b", wantErr: ErrInvalidPath},
		{path: "..", wantErr: ErrOutside},
		{path: "../ws/a", wantErr: ErrOutside},
		{path: "a/../../b", wantErr: ErrOutside},
		{path: "/srv/ws-evil/x", wantErr: ErrOutside},
		{path: "/srv/ws/../other", wantErr: ErrOutside},
		{path: "/etc/passwd", wantErr: ErrOutside},
	}
	for _, tt := range tests {
		got, err := Rel(root, tt.path)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Rel(%q) = %q, %v; want %v", tt.path, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Rel(%q) = %q, %v; want %q", tt.path, got, err, tt.want)
		}
	}
	_, err := Rel(root, "../x")
	var oe *OutsideError
	if !errors.As(err, &oe) || oe.Path != "../x" {
		t.Fatalf("Rel(../x) err=%#v, want an *OutsideError naming ../x", err)
	}
	for _, want := range []string{`path "../x" resolves outside the workspace`, "must stay inside the workspace"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), root) {
		t.Errorf("message %q shows the workspace's absolute path", err)
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"w1", "w1/sub", "a.b_c-D/9", "...", "a..b", ".hidden", strings.Repeat("x", MaxNameBytes)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "/abs", "a/", "a//b", ".", "..", "a/./b", "a/../b", "../a", "a b", "a\x00", "é", "a\\b", strings.Repeat("x", MaxNameBytes+1)} {
		err := ValidName(bad)
		if !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidName(%q) = %v, want ErrInvalidName", bad, err)
		}
		var ne *NameError
		if !errors.As(err, &ne) || ne.Name != bad {
			t.Errorf("ValidName(%q): %#v is not a *NameError naming it", bad, err)
		}
	}
}

func TestResolve(t *testing.T) {
	root, outside := layout(t)
	d := openDir(t, root)
	tests := []struct {
		name, path string
		wantRel    string
		wantReal   string
		wantErr    error
	}{
		{name: "plain file", path: "a.txt", wantRel: "a.txt", wantReal: "a.txt"},
		{name: "root itself", path: ".", wantRel: ".", wantReal: "."},
		{name: "nested", path: "sub/b.txt", wantRel: "sub/b.txt", wantReal: "sub/b.txt"},
		{name: "not yet existing", path: "new/dir/c.txt", wantRel: "new/dir/c.txt", wantReal: "new/dir/c.txt"},
		{name: "dotdot that stays inside", path: "sub/../a.txt", wantRel: "a.txt", wantReal: "a.txt"},
		{name: "doubled separators", path: "sub//b.txt", wantRel: "sub/b.txt", wantReal: "sub/b.txt"},
		{name: "absolute inside", path: filepath.Join(root, "sub", "b.txt"), wantRel: "sub/b.txt", wantReal: "sub/b.txt"},
		{name: "absolute root", path: root, wantRel: ".", wantReal: "."},
		{name: "inside link", path: "in-link", wantRel: "in-link", wantReal: "sub/b.txt"},
		{name: "inside absolute link", path: "in-abs/b.txt", wantRel: "in-abs/b.txt", wantReal: "sub/b.txt"},
		{name: "nested dir link", path: "dir-link/x.txt", wantRel: "dir-link/x.txt", wantReal: "sub/deep/x.txt"},
		{name: "dangling link inside", path: "dangling-in", wantRel: "dangling-in", wantReal: "sub/new.txt"},
		{name: "link to root", path: "sub/up/a.txt", wantRel: "sub/up/a.txt", wantReal: "a.txt"},
		// ".." is applied to the path as written before links are
		// followed, as filepath.Clean does: dir-link/.. is the root.
		{name: "dotdot after dir link", path: "dir-link/../b.txt", wantRel: "b.txt", wantReal: "b.txt"},
		{name: "dotdot after link to root", path: "sub/up/../outside", wantRel: "sub/outside", wantReal: "sub/outside"},
		{name: "below a file", path: "a.txt/x", wantRel: "a.txt/x", wantReal: "a.txt/x"},

		{name: "empty", path: "", wantErr: ErrInvalidPath},
		{name: "NUL byte", path: "a\x00b", wantErr: ErrInvalidPath},
		{name: "dotdot escape", path: "../outside/secret.txt", wantErr: ErrOutside},
		{name: "dotdot escape deep", path: "sub/../../x", wantErr: ErrOutside},
		{name: "bare dotdot", path: "..", wantErr: ErrOutside},
		{name: "absolute outside", path: filepath.Join(outside, "secret.txt"), wantErr: ErrOutside},
		{name: "absolute sibling prefix", path: root + "-evil/x", wantErr: ErrOutside},
		{name: "absolute system file", path: "/etc/passwd", wantErr: ErrOutside},
		{name: "link to outside file", path: "out-link", wantErr: ErrOutside},
		{name: "link to outside dir", path: "out-dir/secret.txt", wantErr: ErrOutside},
		{name: "link to outside dir, new file", path: "out-dir/new/x.txt", wantErr: ErrOutside},
		{name: "dangling link to outside", path: "dangling-out", wantErr: ErrOutside},
		{name: "link to parent of root", path: "sub/upup/outside/secret.txt", wantErr: ErrOutside},
		{name: "link loop", path: "loop", wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rel, real, err := d.Resolve(tt.path)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Resolve(%q) = %q, %q, nil; want error %v", tt.path, rel, real, tt.wantErr)
				}
				if tt.wantErr != errAny && !errors.Is(err, tt.wantErr) {
					t.Fatalf("Resolve(%q) err=%v, want %v", tt.path, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q) err=%v, want nil", tt.path, err)
			}
			if rel != tt.wantRel || real != tt.wantReal {
				t.Errorf("Resolve(%q) = %q, %q; want %q, %q", tt.path, rel, real, tt.wantRel, tt.wantReal)
			}
		})
	}
	// The error names the link that leads out, workspace-relative.
	_, _, err := d.Resolve("out-dir/secret.txt")
	var oe *OutsideError
	if !errors.As(err, &oe) || oe.Link != "out-dir" || oe.Target != outside {
		t.Errorf("Resolve(out-dir/secret.txt) err=%#v, want an *OutsideError naming the link out-dir -> %s", err, outside)
	}
}

// TestResolveLinkedRoot checks a workspace reached through a link (as /tmp
// is on some systems): the real path of a file inside is accepted, and so
// is the linked one, and an absolute link to either is followed.
func TestResolveLinkedRoot(t *testing.T) {
	root, _ := layout(t)
	linked := filepath.Join(t.TempDir(), "linked-ws")
	if err := os.Symlink(root, linked); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(linked, "a.txt"), filepath.Join(root, "via-linked")); err != nil {
		t.Fatal(err)
	}
	d := openDir(t, linked)
	for _, p := range []string{"a.txt", filepath.Join(root, "a.txt"), filepath.Join(linked, "a.txt"), "via-linked"} {
		_, real, err := d.Resolve(p)
		if err != nil || real != "a.txt" {
			t.Errorf("Resolve(%q) = %q, %v; want a.txt", p, real, err)
		}
	}
	if _, _, err := d.Resolve("out-link"); !errors.Is(err, ErrOutside) {
		t.Errorf("Resolve(out-link) err=%v, want ErrOutside", err)
	}
}

// TestResolveTouchesNothing checks that refusing or accepting a path leaves
// the file system as it was.
func TestResolveTouchesNothing(t *testing.T) {
	root, outside := layout(t)
	d := openDir(t, root)
	for _, p := range []string{"new/dir/c.txt", "dangling-out", "out-dir/new/x.txt"} {
		_, _, _ = d.Resolve(p)
	}
	for _, p := range []string{filepath.Join(root, "new"), filepath.Join(outside, "new.txt"), filepath.Join(outside, "new")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after Resolve (err=%v); Resolve must create nothing", p, err)
		}
	}
}

// TestRootRefusesLinksOut checks what the file tools rely on when a path
// is swapped after Resolve: operations through Root() do not follow a link
// out, and Escaped recognises the refusal.
func TestRootRefusesLinksOut(t *testing.T) {
	root, _ := layout(t)
	d := openDir(t, root)
	for _, p := range []string{"out-link", "out-dir/secret.txt", "sub/upup/outside/secret.txt", "in-abs/b.txt"} {
		_, err := d.Root().ReadFile(p)
		if !Escaped(err) {
			t.Errorf("Root().ReadFile(%q) err=%v, want the root's refusal (Escaped)", p, err)
		}
	}
	if err := d.WriteFile("out-dir/planted.txt", []byte("x"), 0o644); !Escaped(err) {
		t.Errorf("WriteFile through out-dir err=%v, want the root's refusal", err)
	}
	if err := d.MkdirAll("out-dir/new/deeper"); !Escaped(err) {
		t.Errorf("MkdirAll through out-dir err=%v, want the root's refusal", err)
	}
	for _, err := range []error{nil, fs.ErrNotExist, errors.New("path escapes"), &fs.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}} {
		if Escaped(err) {
			t.Errorf("Escaped(%v) = true", err)
		}
	}
}

// tenant builds ROOT/TENANT with workspaces w1 (holding links of every
// kind) and w2, and an outside directory; it returns the tenant root.
func tenant(t *testing.T) (tenantRoot, outside string) {
	t.Helper()
	base := t.TempDir()
	tenantRoot = filepath.Join(base, "workspaces", "acme")
	other := filepath.Join(base, "workspaces", "umbrella")
	outside = filepath.Join(base, "outside")
	for _, dir := range []string{filepath.Join(tenantRoot, "w1", "sub"), filepath.Join(tenantRoot, "w2"), filepath.Join(other, "vault"), outside} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tenantRoot, "w1", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"w1/root":       "/",
		"w1/out":        outside,
		"w1/peer":       "../w2",
		"w1/peer-abs":   filepath.Join(tenantRoot, "w2"),
		"w1/inner":      "sub",
		"w1/tenant":     "../../umbrella",
		"w1/vault":      "../../umbrella/vault",
		"w1/dangling":   "nowhere",
		"w1/sub/parent": "..",
	} {
		if err := os.Symlink(target, filepath.Join(tenantRoot, filepath.FromSlash(link))); err != nil {
			t.Fatal(err)
		}
	}
	return tenantRoot, outside
}

func TestOpenRefusesNamesThroughLinks(t *testing.T) {
	tenantRoot, outside := tenant(t)
	tests := []struct {
		name, component string
		wantErr         error
	}{
		{"w1/root", "w1/root", ErrNameLink},
		{"w1/root/tmp", "w1/root", ErrNameLink},
		{"w1/out", "w1/out", ErrNameLink},
		{"w1/peer", "w1/peer", ErrNameLink},
		{"w1/peer-abs", "w1/peer-abs", ErrNameLink},
		{"w1/inner", "w1/inner", ErrNameLink}, // even a link that stays inside
		{"w1/tenant/vault", "w1/tenant", ErrNameLink},
		{"w1/vault", "w1/vault", ErrNameLink},
		{"w1/dangling", "w1/dangling", ErrNameLink},
		{"w1/sub/parent", "w1/sub/parent", ErrNameLink},
		{"w1/file", "w1/file", ErrNotDir},
		{"w1/missing", "w1/missing", fs.ErrNotExist},
		{"../umbrella", "../umbrella", ErrInvalidName},
		{"w1/../w2", "w1/../w2", ErrInvalidName},
	}
	for _, tt := range tests {
		for _, create := range []bool{false, true} {
			if create && errors.Is(tt.wantErr, fs.ErrNotExist) {
				continue
			}
			var d *Dir
			var err error
			if create {
				d, err = Create(tenantRoot, tt.name+"/new", nil)
			} else {
				d, err = Open(tenantRoot, tt.name)
			}
			if d != nil {
				d.Close()
			}
			var ne *NameError
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &ne) {
				t.Errorf("create=%v %q: err=%v, want a *NameError wrapping %v", create, tt.name, err, tt.wantErr)
				continue
			}
			if !errors.Is(tt.wantErr, ErrInvalidName) && ne.Component != tt.component {
				t.Errorf("create=%v %q: component %q, want %q", create, tt.name, ne.Component, tt.component)
			}
			if errors.Is(err, ErrNameLink) && !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("message %q does not say symbolic link", err)
			}
		}
	}
	// Nothing was made behind a link.
	for _, p := range []string{
		filepath.Join(tenantRoot, "w2", "new"), filepath.Join(outside, "new"), "/tmp/new",
		filepath.Join(filepath.Dir(tenantRoot), "umbrella", "vault", "new"),
		filepath.Join(tenantRoot, "w1", "sub", "new"),
	} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was created behind a link", p)
		}
	}
	// A tenant root that is itself a link is refused.
	linked := filepath.Join(t.TempDir(), "linked-tenant")
	if err := os.Symlink(tenantRoot, linked); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(linked, "w1"); !errors.Is(err, ErrNameLink) {
		t.Errorf("Open under a linked tenant root err=%v, want ErrNameLink", err)
	}
	// The real directories open, and create makes nested ones.
	for _, name := range []string{"w1", "w1/sub", "w2"} {
		d, err := Open(tenantRoot, name)
		if err != nil {
			t.Fatalf("Open(%q): %v", name, err)
		}
		if want := filepath.Join(tenantRoot, name); d.Path() != want {
			t.Errorf("Path()=%q, want %q", d.Path(), want)
		}
		d.Close()
	}
	d, err := Create(tenantRoot, "w3/a/b", nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if fi, err := os.Lstat(filepath.Join(tenantRoot, "w3", "a", "b")); err != nil || !fi.IsDir() {
		t.Errorf("Create(w3/a/b) made no directory: %v", err)
	}
	d, err = Create(filepath.Join(t.TempDir(), "fresh", "tenant"), "w", nil)
	if err != nil {
		t.Fatalf("Create under a missing tenant root: %v", err)
	}
	d.Close()
}

// TestOpenSeesSwapAfterCreate: a workspace whose directory is replaced by
// a link after it was created is refused at the next Open, as the node
// opens it for every call.
func TestOpenSeesSwapAfterCreate(t *testing.T) {
	tenantRoot, outside := tenant(t)
	d, err := Create(tenantRoot, "w1/nested", nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	dir := filepath.Join(tenantRoot, "w1", "nested")
	if err := os.Rename(dir, dir+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(tenantRoot, "w1/nested"); !errors.Is(err, ErrNameLink) {
		t.Fatalf("Open after the swap err=%v, want ErrNameLink", err)
	}
}

// TestHandleIsTheVerifiedDirectory: a Dir opened before its path is swapped
// for a link still works in the directory it verified, and Handle gives
// that directory, not the link's target.
func TestHandleIsTheVerifiedDirectory(t *testing.T) {
	tenantRoot, outside := tenant(t)
	d, err := Create(tenantRoot, "w1/nested", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dir := filepath.Join(tenantRoot, "w1", "nested")
	if err := os.Rename(dir, dir+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("x.txt", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir+".real", "x.txt")); err != nil {
		t.Errorf("the write did not land in the verified directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "x.txt")); err == nil {
		t.Error("the write followed the swapped path outside")
	}
	h, err := d.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	names, err := h.Readdirnames(-1)
	if err != nil || len(names) != 1 || names[0] != "x.txt" {
		t.Errorf("Handle lists %v (%v), want [x.txt]", names, err)
	}
}

// TestOwnership: as root, the directories Create makes get the owner it is
// given, and what WriteFile and MkdirAll create gets the workspace root's
// owner. As any other user, giving directories away is refused and what the
// Dir creates stays the user's.
func TestOwnership(t *testing.T) {
	tenantRoot := filepath.Join(t.TempDir(), "t")
	owner := &Owner{UID: 4321, GID: 4322}
	owned := func(p string, uid, gid int) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
	}
	if os.Geteuid() != 0 {
		if _, err := Create(tenantRoot, "w", owner); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("Create with another owner as uid %d: err=%v, want a permission error", os.Geteuid(), err)
		}
		d, err := OpenDir(filepath.Join(tenantRoot, "w"))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if err := d.WriteFile("f", []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}
		owned(filepath.Join(tenantRoot, "w", "f"), os.Geteuid(), os.Getegid())
		return
	}
	if err := os.MkdirAll(filepath.Join(tenantRoot, "existing"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := Create(tenantRoot, "existing/w/sub", owner)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	owned(tenantRoot, 0, 0)
	owned(filepath.Join(tenantRoot, "existing"), 0, 0) // left as it was
	owned(filepath.Join(tenantRoot, "existing", "w"), owner.UID, owner.GID)
	owned(filepath.Join(tenantRoot, "existing", "w", "sub"), owner.UID, owner.GID)

	ws := filepath.Join(tenantRoot, "existing", "w", "sub")
	if err := d.MkdirAll("a/b"); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("a/b/f.txt", []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := d.Mkdir("c"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "a/b/f.txt", "c"} {
		owned(filepath.Join(ws, p), owner.UID, owner.GID)
	}
	// A workspace opened later takes its owner from its directory.
	d2, err := Open(tenantRoot, "existing/w/sub")
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := d2.WriteFile("g.txt", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	owned(filepath.Join(ws, "g.txt"), owner.UID, owner.GID)
}

func TestWriteFile(t *testing.T) {
	root, _ := layout(t)
	d := openDir(t, root)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	if err := d.WriteFile("sub/new.txt", []byte("hello"), 0o664); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, "sub", "new.txt"))
	if err != nil || fi.Mode().Perm() != 0o664 {
		t.Errorf("mode=%v (%v), want 0664 whatever the umask", fi.Mode(), err)
	}
	// A final link is replaced, not followed.
	if err := d.WriteFile("in-link", []byte("replaced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "sub", "b.txt")); string(b) != "b" {
		t.Errorf("sub/b.txt=%q: WriteFile followed the final link", b)
	}
	if fi, err := os.Lstat(filepath.Join(root, "in-link")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("in-link is not a regular file after WriteFile (%v)", err)
	}
	// No temporary file is left behind, on success or failure.
	if err := d.WriteFile("sub/deep", []byte("x"), 0o644); err == nil {
		t.Error("WriteFile over a directory succeeded")
	}
	if err := d.WriteFile("nodir/x", []byte("x"), 0o644); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
	for _, dir := range []string{root, filepath.Join(root, "sub")} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.Contains(e.Name(), ".callsheet-") {
				t.Errorf("temporary file %s left in %s", e.Name(), dir)
			}
		}
	}
	if err := d.MkdirAll("a.txt/x"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("MkdirAll below a file err=%v, want ENOTDIR", err)
	}
}

// TestSwapRace swaps a directory of the workspace with a link outside, as
// fast as the kernel allows (renameat2 RENAME_EXCHANGE: the directory is a
// link about half the time), while reads, writes and Resolve work in it.
// Nothing outside may be read or written.
func TestSwapRace(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("the swap needs renameat2 (Linux); GOOS=%s", runtime.GOOS)
	}
	root, outside := layout(t)
	if err := os.WriteFile(filepath.Join(outside, "x.txt"), []byte("OUTSIDE"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "d", "x.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	d := openDir(t, root)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, "d"), unix.AT_FDCWD, filepath.Join(root, "l"), unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				return
			}
		}
	}()
	// At least 3000 rounds, and on until 20 reads got through (a loaded
	// machine may favour the swapper), at most 100,000.
	ok, i := 0, 0
	for ; i < 100_000 && (i < 3000 || ok < 20); i++ {
		if b, err := d.Root().ReadFile("d/x.txt"); err == nil {
			ok++
			if bytes.Contains(b, []byte("OUTSIDE")) {
				t.Fatalf("read %d: d/x.txt read the outside file", i)
			}
		}
		if _, real, err := d.Resolve("d/x.txt"); err == nil {
			_, _ = d.Root().ReadFile(real)
		}
		_ = d.MkdirAll(fmt.Sprintf("d/m%d", i))
		_ = d.WriteFile(fmt.Sprintf("d/w%d.txt", i), []byte("planted"), 0o644)
	}
	close(stop)
	wg.Wait()
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "secret.txt" && e.Name() != "x.txt" {
			t.Errorf("%s was written outside the workspace", e.Name())
		}
	}
	if ok == 0 {
		t.Error("no read succeeded: the race was not exercised")
	}
	t.Logf("%d of %d reads succeeded", ok, i)
}

func TestContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Error("an empty context carries a Dir")
	}
	d := openDir(t, t.TempDir())
	if got, ok := FromContext(NewContext(context.Background(), d)); !ok || got != d {
		t.Errorf("FromContext = %v, %v; want the Dir", got, ok)
	}
	if _, ok := FromContext(NewContext(context.Background(), nil)); ok {
		t.Error("a nil Dir is carried")
	}
}

// FuzzRel asserts the lexical confinement: whatever Rel accepts is clean,
// relative, below the root when joined to it, and the same as what Rel
// gives for its own absolute form.
func FuzzRel(f *testing.F) {
	for _, s := range []string{"a.txt", ".", "..", "../x", "a/../../x", "/srv/ws", "/srv/ws/a", "/srv/ws-x/a",
		"/srv/ws/../ws/a", "a//b/./c/", "a\x00", "", "/", "//srv/ws/a", "...", "a/.."} {
		f.Add(s)
	}
	const root = "/srv/ws"
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := Rel(root, p)
		if err != nil {
			if !errors.Is(err, ErrOutside) && !errors.Is(err, ErrInvalidPath) {
				t.Fatalf("Rel(%q) err=%v matches neither ErrOutside nor ErrInvalidPath", p, err)
			}
			return
		}
		if filepath.IsAbs(rel) || escapes(rel) || filepath.Clean(rel) != rel {
			t.Fatalf("Rel(%q) = %q: not a clean path inside", p, rel)
		}
		if j := filepath.Join(root, rel); j != root && !strings.HasPrefix(j, root+"/") {
			t.Fatalf("Rel(%q) = %q joins to %q, outside %s", p, rel, j, root)
		}
		if again, err := Rel(root, filepath.Join(root, rel)); err != nil || again != rel {
			t.Fatalf("Rel of the absolute form of %q = %q, %v; want %q", p, again, err, rel)
		}
	})
}

// FuzzValidName asserts that a name ValidName accepts is made of plain
// components only, so joined to a tenant's root it stays below it.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"w1", "w1/sub", "..", "a/../b", "/a", "a/", "a//b", ".x", "x.", "a b", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if err := ValidName(name); err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ValidName(%q) err=%v, want ErrInvalidName", name, err)
			}
			return
		}
		for c := range strings.SplitSeq(name, "/") {
			if c == "" || c == "." || c == ".." {
				t.Fatalf("ValidName(%q) accepted component %q", name, c)
			}
		}
		const base = "/srv/t"
		if j := filepath.Join(base, name); !strings.HasPrefix(j, base+"/") || filepath.Clean(j) != base+"/"+name {
			t.Fatalf("ValidName(%q) accepted a name that joins to %q", name, j)
		}
	})
}

// FuzzResolve asserts the confinement property of Resolve: any path it
// accepts has a real form inside the workspace, and whatever part of that
// exists lies, following every link, within the real root.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		"a.txt", ".", "..", "../x", "sub/../../x", "/etc/passwd", "out-link", "out-dir/x",
		"dangling-out", "sub/upup/outside", "sub/up/../x", "dir-link/../a.txt", "in-abs/b.txt",
		"loop", "a\x00", "//", "sub/./b.txt/../..", "sub/up/up/up", "in-link/x", "dangling-in/x",
	} {
		f.Add(s)
	}
	root, _ := layout(f)
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		f.Fatal(err)
	}
	d := openDir(f, root)
	f.Fuzz(func(t *testing.T, p string) {
		rel, real, err := d.Resolve(p)
		if err != nil {
			return
		}
		for _, q := range []string{rel, real} {
			if filepath.IsAbs(q) || escapes(q) || filepath.Clean(q) != q {
				t.Fatalf("Resolve(%q) = %q, %q: not clean and inside", p, rel, real)
			}
		}
		// An independent oracle: the kernel's view of the longest
		// existing prefix of real, which has no link left unless it is
		// the dangling end.
		prefix := filepath.Join(root, real)
		for {
			if _, err := os.Lstat(prefix); err == nil {
				break
			}
			prefix = filepath.Dir(prefix)
		}
		if fi, err := os.Lstat(prefix); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			t.Fatalf("Resolve(%q) = %q still ends at a link %s", p, real, prefix)
		}
		if r, err := filepath.EvalSymlinks(prefix); err == nil {
			if _, ok := within(realRoot, r); !ok {
				t.Fatalf("Resolve(%q) accepted %q, whose existing prefix %q is really %q, outside %s", p, real, prefix, r, realRoot)
			}
		}
	})
}
