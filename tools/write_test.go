package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteCreates(t *testing.T) {
	e := newEnv(t)
	r, err := call(t, e.ctx, builtin(t, "write"), `{"path": "new/deep/a.txt", "content": "hello"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), "created new/deep/a.txt (5 bytes)"; got != want {
		t.Errorf("text=%q, want %q", got, want)
	}
	p := filepath.Join(e.root, "new", "deep", "a.txt")
	if got := readFile(t, p); got != "hello" {
		t.Errorf("content=%q, want hello", got)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != newFileMode {
		t.Errorf("mode=%v, want %v", got, fs.FileMode(newFileMode))
	}
	// Empty content is a file, not a missing argument.
	if _, err := call(t, e.ctx, builtin(t, "write"), `{"path": "empty", "content": ""}`); err != nil {
		t.Errorf("write empty content: %v", err)
	}
}

func TestWriteReplacesAtomically(t *testing.T) {
	e := newEnv(t)
	p := e.file(t, "a.sh", "old content")
	if err := os.Chmod(p, 0o750); err != nil {
		t.Fatal(err)
	}
	// A reader that opened the old file keeps seeing the old content: the
	// new one arrives by rename, not by rewriting the file in place.
	old, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	r, err := call(t, e.ctx, builtin(t, "write"), `{"path": "a.sh", "content": "new"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), "replaced a.sh (3 bytes)"; got != want {
		t.Errorf("text=%q, want %q", got, want)
	}
	if got := readFile(t, p); got != "new" {
		t.Errorf("content=%q, want new", got)
	}
	if b, _ := io.ReadAll(old); string(b) != "old content" {
		t.Errorf("old handle reads %q, want the old content intact", b)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o750 {
		t.Errorf("mode=%v, want the old mode -rwxr-x---", got)
	}
	entries, err := os.ReadDir(e.root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("workspace holds %d entries after the write, want 1 (no temp file left)", len(entries))
	}
}

func TestWriteThroughInsideLink(t *testing.T) {
	e := newEnv(t)
	target := e.file(t, "real.txt", "old")
	link := filepath.Join(e.root, "link.txt")
	if err := os.Symlink("real.txt", link); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, e.ctx, builtin(t, "write"), `{"path": "link.txt", "content": "new"}`); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("link.txt is no longer a link (err=%v)", err)
	}
	if got := readFile(t, target); got != "new" {
		t.Errorf("target content=%q, want new", got)
	}
}

func TestWriteConfined(t *testing.T) {
	e := newEnv(t)
	secret := filepath.Join(e.outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"out-link":     secret,
		"out-dir":      e.outside,
		"dangling-out": filepath.Join(e.outside, "dangling.txt"),
	} {
		if err := os.Symlink(target, filepath.Join(e.root, link)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, path string
	}{
		{"dotdot", "../outside/x.txt"},
		{"dotdot existing", "../outside/secret.txt"},
		{"absolute outside", filepath.Join(e.outside, "y.txt")},
		{"absolute existing outside", secret},
		{"link to outside file", "out-link"},
		{"link to outside dir", "out-dir/secret.txt"},
		{"link to outside dir, new subdir", "out-dir/sub/z.txt"},
		{"dangling link to outside", "dangling-out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := call(t, e.ctx, builtin(t, "write"), fmt.Sprintf(`{"path": %q, "content": "pwned"}`, tt.path))
			if !errors.Is(err, workspace.ErrOutside) {
				t.Fatalf("result=%+v err=%v, want ErrOutside", r, err)
			}
			mustContain(t, err.Error(), "must stay inside the workspace")
		})
	}
	if got := readFile(t, secret); got != "secret" {
		t.Errorf("outside file content=%q, want it untouched", got)
	}
	entries, err := os.ReadDir(e.outside)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	if !reflect.DeepEqual(names, []string{"secret.txt"}) {
		t.Errorf("outside dir holds %q, want only secret.txt: nothing may be created", names)
	}
}

func TestWriteRefusesDirectory(t *testing.T) {
	e := newEnv(t)
	e.file(t, "dir/x", "")
	for _, p := range []string{"dir", "."} {
		if _, err := call(t, e.ctx, builtin(t, "write"), fmt.Sprintf(`{"path": %q, "content": "x"}`, p)); err == nil {
			t.Errorf("write %s succeeded, want a refusal", p)
		}
	}
}

func TestWriteDeclarations(t *testing.T) {
	w := builtin(t, "write")
	want := tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplayNever, Concurrency: tool.ConcurrencyExclusive}
	if w.Declarations != want {
		t.Errorf("declarations=%+v, want %+v", w.Declarations, want)
	}
	for args, want := range map[string][]string{
		`{"path": "./a/../b.txt", "content": ""}`: {"b.txt"},
		`{"path": "../x", "content": ""}`:         nil,
		`{"path": "a"}`:                           nil,
		`not json`:                                nil,
	} {
		if got := w.MutatedPaths(json.RawMessage(args)); !reflect.DeepEqual(got, want) {
			t.Errorf("MutatedPaths(%s)=%q, want %q", args, got, want)
		}
	}
	for _, args := range []string{`{"path": "a"}`, `{"content": "a"}`, `{"path": "a", "content": "b", "mode": 7}`} {
		err := w.Validate(json.RawMessage(args))
		if !errors.Is(err, tool.ErrInvalidArguments) {
			t.Errorf("Validate(%s) err=%v, want ErrInvalidArguments", args, err)
		}
	}
	if err := w.Validate(json.RawMessage(`"{\"path\": \"a\", \"content\": \"b\"}"`)); err != nil {
		t.Errorf("Validate(arguments as a string) err=%v, want nil", err)
	}
	if !strings.Contains(string(w.InputSchema), `"required":["path","content"]`) {
		t.Errorf("schema %s does not require path and content", w.InputSchema)
	}
}
