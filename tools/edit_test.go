package tools

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

func editTool(t *testing.T) *tool.Tool {
	t.Helper()
	tl, err := EditTool()
	return registered(t, tl, err)
}

func editArgsJSON(t *testing.T, path, old, new string, all bool) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"path": path, "old_string": old, "new_string": new, "replace_all": all})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEdit(t *testing.T) {
	tests := []struct {
		name, file, old, new string
		all                  bool
		want, wantText       string
	}{
		{name: "once", file: "a := 1\nb := 2\n", old: "b := 2", new: "b := 3", want: "a := 1\nb := 3\n", wantText: "edited f.go: replaced 1 occurrence"},
		{name: "all", file: "x x x\n", old: "x", new: "yy", all: true, want: "yy yy yy\n", wantText: "replaced 3 occurrences"},
		{name: "delete", file: "keep\ndrop\n", old: "drop\n", new: "", want: "keep\n"},
		{name: "crlf", file: "a\r\nb\r\nc\r\n", old: "a\nb", new: "A\nB", want: "A\r\nB\r\nc\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			p := e.file(t, "f.go", tt.file)
			if err := os.Chmod(p, 0o640); err != nil {
				t.Fatal(err)
			}
			r, err := call(t, e.ctx, editTool(t), editArgsJSON(t, "f.go", tt.old, tt.new, tt.all))
			if err != nil {
				t.Fatal(err)
			}
			mustContain(t, text(t, r), tt.wantText)
			if got := readFile(t, p); got != tt.want {
				t.Errorf("content=%q, want %q", got, tt.want)
			}
			if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
				t.Errorf("mode=%v, want 0640 kept", fi.Mode().Perm())
			}
		})
	}
}

func TestEditRefusals(t *testing.T) {
	e := newEnv(t)
	p := e.file(t, "f.txt", "dup\ndup\nonce\n")
	e.file(t, "bin", "a\x00b")
	if err := os.WriteFile(filepath.Join(e.outside, "o.txt"), []byte("once\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, args string
		wantErr    error
		want       string
	}{
		{name: "twice", args: editArgsJSON(t, "f.txt", "dup", "x", false), want: "occurs 2 times"},
		{name: "absent", args: editArgsJSON(t, "f.txt", "nope", "x", false), want: "does not occur"},
		{name: "same", args: editArgsJSON(t, "f.txt", "once", "once", false), want: "the same"},
		{name: "empty old", args: editArgsJSON(t, "f.txt", "", "x", false), want: "old_string is empty"},
		{name: "missing", args: editArgsJSON(t, "nope.txt", "a", "b", false), want: "no such file"},
		{name: "outside", args: editArgsJSON(t, "../outside/o.txt", "once", "x", false), wantErr: workspace.ErrOutside},
		{name: "binary", args: editArgsJSON(t, "bin", "a", "b", false), want: "binary"},
		{name: "directory", args: editArgsJSON(t, ".", "a", "b", false), want: "directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, e.ctx, editTool(t), tt.args)
			if err == nil {
				t.Fatal("err=nil, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err=%v, want %v", err, tt.wantErr)
			}
			mustContain(t, err.Error(), tt.want)
		})
	}
	if got := readFile(t, p); got != "dup\ndup\nonce\n" {
		t.Errorf("a refused edit changed the file: %q", got)
	}
}

func TestEditDeclarations(t *testing.T) {
	tl := editTool(t)
	if got := tl.DeclarationsFor(nil); got != tool.Strictest {
		t.Errorf("declarations=%+v, want %+v", got, tool.Strictest)
	}
	if got := tl.MutatedPaths([]byte(`{"path": "a/../b.go", "old_string": "x", "new_string": "y"}`)); !slices.Equal(got, []string{"b.go"}) {
		t.Errorf("MutatedPaths=%q, want [b.go]", got)
	}
	if got := tl.MutatedPaths([]byte(`{"path": "b.go"}`)); got != nil {
		t.Errorf("MutatedPaths(missing fields)=%q, want nil", got)
	}
}

// FuzzEditArgs runs arbitrary arguments through the edit tool's validator
// and mutated paths: no panic, and paths only for valid arguments.
func FuzzEditArgs(f *testing.F) {
	f.Add(`{"path": "a.go", "old_string": "x", "new_string": "y"}`)
	f.Add(`{"path": "../a", "old_string": "", "new_string": "", "replace_all": true}`)
	f.Add(`"{\"path\": \"a\", \"old_string\": \"x\", \"new_string\": \"y\"}"`)
	f.Add(`{"path": 1}`)
	tl, err := EditTool()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args string) {
		valid := tl.Validate(json.RawMessage(args)) == nil
		paths := tl.MutatedPaths(json.RawMessage(args))
		if !valid && paths != nil {
			t.Fatalf("MutatedPaths(%s)=%q for invalid arguments", args, paths)
		}
		if len(paths) > 1 {
			t.Fatalf("MutatedPaths=%q, want at most one", paths)
		}
	})
}
