package workspace

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

func TestResolve(t *testing.T) {
	root, outside := layout(t)
	tests := []struct {
		name    string
		path    string
		wantRel string
		wantErr error
	}{
		{name: "plain file", path: "a.txt", wantRel: "a.txt"},
		{name: "root itself", path: ".", wantRel: "."},
		{name: "nested", path: "sub/b.txt", wantRel: "sub/b.txt"},
		{name: "not yet existing", path: "new/dir/c.txt", wantRel: "new/dir/c.txt"},
		{name: "dotdot that stays inside", path: "sub/../a.txt", wantRel: "a.txt"},
		{name: "doubled separators", path: "sub//b.txt", wantRel: "sub/b.txt"},
		{name: "absolute inside", path: filepath.Join(root, "sub", "b.txt"), wantRel: "sub/b.txt"},
		{name: "absolute root", path: root, wantRel: "."},
		{name: "inside link", path: "in-link", wantRel: "in-link"},
		{name: "inside absolute link", path: "in-abs/b.txt", wantRel: "in-abs/b.txt"},
		{name: "nested dir link", path: "dir-link/x.txt", wantRel: "dir-link/x.txt"},
		{name: "dangling link inside", path: "dangling-in", wantRel: "dangling-in"},
		{name: "link to root", path: "sub/up/a.txt", wantRel: "sub/up/a.txt"},
		{name: "dotdot after dir link", path: "dir-link/../b.txt", wantRel: "b.txt"},

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
		{name: "link then dotdot escapes", path: "sub/up/../outside", wantErr: ErrOutside},
		{name: "link loop", path: "loop", wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			abs, rel, err := Resolve(root, tt.path)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Resolve(%q) = %q, %q, nil; want error %v", tt.path, abs, rel, tt.wantErr)
				}
				if tt.wantErr != errAny && !errors.Is(err, tt.wantErr) {
					t.Fatalf("Resolve(%q) err=%v, want %v", tt.path, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q) err=%v, want nil", tt.path, err)
			}
			if rel != tt.wantRel {
				t.Errorf("rel=%q, want %q", rel, tt.wantRel)
			}
			if want := filepath.Join(root, tt.wantRel); abs != want {
				t.Errorf("abs=%q, want %q", abs, want)
			}
		})
	}
}

// errAny marks a case that must fail, for any reason.
var errAny = errors.New("any error")

func TestResolveErrorMessage(t *testing.T) {
	root, _ := layout(t)
	_, _, err := Resolve(root, "../x")
	if err == nil {
		t.Fatal("Resolve(../x) err=nil, want refusal")
	}
	msg := err.Error()
	for _, want := range []string{`"../x"`, "must stay inside the workspace"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
}

// TestResolveLinkedRoot checks a root reached through a link (as /tmp is on
// some systems): the real path of a file inside is accepted, and so is the
// linked one.
func TestResolveLinkedRoot(t *testing.T) {
	root, _ := layout(t)
	linked := filepath.Join(t.TempDir(), "linked-ws")
	if err := os.Symlink(root, linked); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a.txt", filepath.Join(root, "a.txt"), filepath.Join(linked, "a.txt")} {
		abs, rel, err := Resolve(linked, p)
		if err != nil {
			t.Fatalf("Resolve(%q, %q) err=%v", linked, p, err)
		}
		if rel != "a.txt" || abs != filepath.Join(linked, "a.txt") {
			t.Errorf("Resolve(%q, %q) = %q, %q; want %q, a.txt", linked, p, abs, rel, filepath.Join(linked, "a.txt"))
		}
	}
	if _, _, err := Resolve(linked, "out-link"); !errors.Is(err, ErrOutside) {
		t.Errorf("Resolve(linked root, out-link) err=%v, want ErrOutside", err)
	}
}

// TestResolveTouchesNothing checks that refusing or accepting a path leaves
// the file system as it was.
func TestResolveTouchesNothing(t *testing.T) {
	root, outside := layout(t)
	for _, p := range []string{"new/dir/c.txt", "dangling-out", "out-dir/new/x.txt"} {
		_, _, _ = Resolve(root, p)
	}
	for _, p := range []string{filepath.Join(root, "new"), filepath.Join(outside, "new.txt"), filepath.Join(outside, "new")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after Resolve (err=%v); Resolve must create nothing", p, err)
		}
	}
}

// FuzzResolve asserts the confinement property: any path Resolve accepts
// lies within the root lexically, and whatever part of it exists (following
// every link, dangling ones included) lies within the real root.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		"a.txt", ".", "..", "../x", "sub/../../x", "/etc/passwd", "out-link", "out-dir/x",
		"dangling-out", "sub/upup/outside", "sub/up/../x", "dir-link/../a.txt", "in-abs/b.txt",
		"loop", "a\x00", "//", "sub/./b.txt/../..", "sub/up/up/up",
	} {
		f.Add(s)
	}
	root, _ := layout(f)
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		abs, rel, err := Resolve(root, p)
		if err != nil {
			return
		}
		if r, ok := within(root, abs); !ok || r != rel {
			t.Fatalf("Resolve(%q) = %q, %q: not within %s", p, abs, rel, root)
		}
		if filepath.Join(root, rel) != abs {
			t.Fatalf("Resolve(%q): abs %q != root joined with rel %q", p, abs, rel)
		}
		// An independent oracle: the kernel's view of the longest existing
		// prefix, and of the target of a final dangling link.
		prefix := abs
		for {
			if _, err := os.Lstat(prefix); err == nil {
				break
			}
			prefix = filepath.Dir(prefix)
		}
		if real, err := filepath.EvalSymlinks(prefix); err == nil {
			if _, ok := within(realRoot, real); !ok {
				t.Fatalf("Resolve(%q) accepted %q, whose existing prefix %q is really %q, outside %s", p, abs, prefix, real, realRoot)
			}
		}
		if target, err := os.Readlink(prefix); err == nil {
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(prefix), target)
			}
			if _, err := os.Stat(prefix); err != nil && !strings.HasPrefix(target, realRoot+"/") && !strings.HasPrefix(target, root+"/") {
				t.Fatalf("Resolve(%q) accepted dangling link %q -> %q outside the root", p, prefix, target)
			}
		}
	})
}
