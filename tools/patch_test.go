package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

func patchTool(t *testing.T) *tool.Tool {
	t.Helper()
	tl, err := PatchTool()
	return registered(t, tl, err)
}

// applyPatch runs apply_patch with patch as its argument.
func applyPatch(t *testing.T, e *env, patch string) (tool.Result, error) {
	t.Helper()
	args, err := json.Marshal(map[string]string{"patch": patch})
	if err != nil {
		t.Fatal(err)
	}
	return call(t, e.ctx, patchTool(t), string(args))
}

// treeSnapshot returns every file under root with its content, to compare a
// tree before and after a refused patch.
func treeSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParsePatch(t *testing.T) {
	text := "\n\n*** Begin Patch\r\n" +
		"*** Add File: a/new.txt\n" +
		"+one\n" +
		"+\n" +
		"*** Update File: b.go\n" +
		"*** Move to: c.go\n" +
		"@@ func f() {\n" +
		"@@ \tx := 1\n" +
		" keep\n" +
		"\n" +
		"-old\n" +
		"+new\n" +
		"@@ -10,3 +10,3 @@ func g()\n" +
		" g\n" +
		"*** End of File\n" +
		"*** Delete File: d.txt\n" +
		"*** End Patch\n\n"
	p, err := ParsePatch(text)
	if err != nil {
		t.Fatal(err)
	}
	want := &Patch{Files: []FilePatch{
		{Op: PatchAdd, Path: "a/new.txt", Lines: []string{"one", ""}, Line: 4},
		{Op: PatchUpdate, Path: "b.go", MoveTo: "c.go", Line: 7, Hunks: []Hunk{
			{Anchors: []string{"func f() {", "x := 1"}, Line: 9, Lines: []HunkLine{
				{Kind: ' ', Text: "keep", Line: 11}, {Kind: ' ', Text: "", Line: 12},
				{Kind: '-', Text: "old", Line: 13}, {Kind: '+', Text: "new", Line: 14},
			}},
			{Anchors: []string{"func g()"}, Line: 15, EndOfFile: true, Lines: []HunkLine{{Kind: ' ', Text: "g", Line: 16}}},
		}},
		{Op: PatchDelete, Path: "d.txt", Line: 18},
	}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("ParsePatch=%+v\nwant %+v", p, want)
	}
	if got, want := p.Paths(), []string{"a/new.txt", "b.go", "c.go", "d.txt"}; !slices.Equal(got, want) {
		t.Errorf("Paths=%q, want %q", got, want)
	}
	again, err := ParsePatch(p.String())
	if err != nil {
		t.Fatalf("ParsePatch(String()): %v\n%s", err, p.String())
	}
	if !samePatch(p, again) {
		t.Errorf("round trip:\n%s\ngave %+v", p.String(), again)
	}
}

func TestParsePatchErrors(t *testing.T) {
	tests := []struct {
		name, patch string
		line        int
		want        string
	}{
		{name: "empty", patch: "  \n", line: 1, want: "empty"},
		{name: "no begin", patch: "*** Update File: a\n*** End Patch", line: 1, want: "must start with"},
		{name: "no end", patch: "*** Begin Patch\n*** Delete File: a\n", line: 2, want: "must end with"},
		{name: "only markers", patch: "*** Begin Patch\n*** End Patch", line: 2, want: "changes no file"},
		{name: "unknown header", patch: "*** Begin Patch\n*** Rename File: a\n*** End Patch", line: 2, want: "expected a file header"},
		{name: "add without plus", patch: "*** Begin Patch\n*** Add File: a\n+x\ny\n*** End Patch", line: 4, want: `starts with "+"`},
		{name: "no path", patch: "*** Begin Patch\n*** Delete File:  \n*** End Patch", line: 2, want: "names no path"},
		{name: "delete with lines", patch: "*** Begin Patch\n*** Delete File: a\n-x\n*** End Patch", line: 3, want: "takes no lines"},
		{name: "update without hunks", patch: "*** Begin Patch\n*** Update File: a\n*** End Patch", line: 2, want: "has no hunk"},
		{name: "bad hunk line", patch: "*** Begin Patch\n*** Update File: a\n@@\n x\n?y\n*** End Patch", line: 5, want: "starts with ' '"},
		{name: "empty hunk", patch: "*** Begin Patch\n*** Update File: a\n@@ f\n*** End Patch", line: 3, want: "hunk has no lines"},
		{name: "bad @@", patch: "*** Begin Patch\n*** Update File: a\n@@f\n x\n*** End Patch", line: 3, want: "an @@ line"},
		{name: "eof first", patch: "*** Begin Patch\n*** Update File: a\n*** End of File\n*** End Patch", line: 3, want: "must follow"},
		{name: "after eof", patch: "*** Begin Patch\n*** Update File: a\n x\n*** End of File\n y\n*** End Patch", line: 5, want: "start a new hunk"},
		{name: "unknown marker", patch: "*** Begin Patch\n*** Update File: a\n x\n*** Frobnicate\n*** End Patch", line: 4, want: "unknown marker"},
		{name: "duplicate", patch: "*** Begin Patch\n*** Delete File: a\n*** Update File: ./a\n x\n*** End Patch", line: 3, want: "already changed at patch line 2"},
		{name: "move onto another", patch: "*** Begin Patch\n*** Delete File: b\n*** Update File: a\n*** Move to: b\n*** End Patch", line: 4, want: "already changed"},
		{name: "nested begin", patch: "*** Begin Patch\n*** Delete File: a\n*** Begin Patch\n*** Delete File: b\n*** End Patch", line: 3, want: "inside the patch"},
		{name: "early end", patch: "*** Begin Patch\n*** Delete File: a\n*** End Patch\n*** Delete File: b\n*** End Patch", line: 3, want: "before the end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePatch(tt.patch)
			var pe *PatchError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidPatch) {
				t.Fatalf("err=%v, want a *PatchError", err)
			}
			if pe.Line != tt.line {
				t.Errorf("line=%d, want %d (%v)", pe.Line, tt.line, err)
			}
			mustContain(t, err.Error(), tt.want, fmt.Sprintf("patch line %d", tt.line))
		})
	}
}

func TestApplyPatchAddUpdateDeleteMove(t *testing.T) {
	e := newEnv(t)
	e.file(t, "src/main.go", "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n\nfunc other() {\n\tprintln(\"hi\")\n}\n")
	e.file(t, "old.txt", "bye\n")
	e.file(t, "mv/from.txt", "a\nb\nc\n")
	if err := os.Chmod(filepath.Join(e.root, "src/main.go"), 0o600); err != nil {
		t.Fatal(err)
	}
	patch := `*** Begin Patch
*** Add File: docs/deep/new.md
+# New
+
+text
*** Update File: src/main.go
@@ func other() {
-	println("hi")
+	println("other")
*** Delete File: old.txt
*** Update File: mv/from.txt
*** Move to: moved/to.txt
@@
 a
-b
+B
*** End Patch`
	r, err := applyPatch(t, e, patch)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), "A docs/deep/new.md\nM src/main.go\nD old.txt\nR mv/from.txt -> moved/to.txt\n"; got != want {
		t.Errorf("summary=%q, want %q", got, want)
	}
	for rel, want := range map[string]string{
		"docs/deep/new.md": "# New\n\ntext\n",
		"src/main.go":      "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n\nfunc other() {\n\tprintln(\"other\")\n}\n",
		"moved/to.txt":     "a\nB\nc\n",
	} {
		if got := readFile(t, filepath.Join(e.root, rel)); got != want {
			t.Errorf("%s=%q, want %q", rel, got, want)
		}
	}
	for _, gone := range []string{"old.txt", "mv/from.txt"} {
		if _, err := os.Lstat(filepath.Join(e.root, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: stat err=%v, want it gone", gone, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(e.root, "src/main.go")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("src/main.go mode=%v (%v), want 0600 kept", fi.Mode().Perm(), err)
	}
}

func TestApplyPatchStaleContextChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.file(t, "a.txt", "one\ntwo\nthree\n")
	e.file(t, "b.txt", "alpha\nbeta\ngamma\n")
	before := treeSnapshot(t, e.root)

	// Two files: the first hunk matches, the second file's does not.
	_, err := applyPatch(t, e, `*** Begin Patch
*** Update File: a.txt
 one
-two
+TWO
*** Add File: new/c.txt
+c
*** Update File: b.txt
@@
 alpha
-BETA
+delta
*** End Patch`)
	if !errors.Is(err, ErrPatchMismatch) {
		t.Fatalf("err=%v, want ErrPatchMismatch", err)
	}
	// The error names the file, the patch line and the expected text.
	mustContain(t, err.Error(), "b.txt", "patch line 9", "  alpha\n  BETA", "line 1 of the file", "no file was changed")
	if after := treeSnapshot(t, e.root); !reflect.DeepEqual(after, before) {
		t.Errorf("tree changed:\nbefore %q\nafter  %q", before, after)
	}

	// A stale context alone changes nothing either.
	_, err = applyPatch(t, e, "*** Begin Patch\n*** Update File: a.txt\n one\n-zwei\n+2\n*** End Patch")
	if !errors.Is(err, ErrPatchMismatch) {
		t.Fatalf("err=%v, want ErrPatchMismatch", err)
	}
	if after := treeSnapshot(t, e.root); !reflect.DeepEqual(after, before) {
		t.Errorf("tree changed by a stale hunk")
	}
}

func TestApplyPatchRefusals(t *testing.T) {
	e := newEnv(t)
	e.file(t, "a.txt", "x\n")
	e.file(t, "b.txt", "y\n")
	e.file(t, "bin.dat", "a\x00b\n")
	if err := os.WriteFile(filepath.Join(e.outside, "o.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(e.outside, "o.txt"), filepath.Join(e.root, "out-link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, patch string
		wantErr     error
		want        string
	}{
		{name: "update outside", patch: "*** Update File: ../outside/o.txt\n-x\n+y", wantErr: workspace.ErrOutside},
		{name: "add outside", patch: "*** Add File: ../outside/new.txt\n+x", wantErr: workspace.ErrOutside},
		{name: "absolute outside", patch: "*** Delete File: " + filepath.Join(e.outside, "o.txt"), wantErr: workspace.ErrOutside},
		{name: "move outside", patch: "*** Update File: a.txt\n*** Move to: ../outside/a.txt", wantErr: workspace.ErrOutside},
		{name: "through a link", patch: "*** Update File: out-link\n-x\n+y", wantErr: workspace.ErrOutside},
		{name: "add existing", patch: "*** Add File: a.txt\n+x", want: "already exists"},
		{name: "update missing", patch: "*** Update File: nope.txt\n-x\n+y", want: "no such file"},
		{name: "delete missing", patch: "*** Delete File: nope.txt", want: "no such file"},
		{name: "move onto existing", patch: "*** Update File: a.txt\n*** Move to: b.txt", want: "already exists"},
		{name: "same file twice", patch: "*** Delete File: a.txt\n*** Update File: " + filepath.Join(e.root, "a.txt") + "\n-x\n+y", want: "same file"},
		{name: "binary", patch: "*** Update File: bin.dat\n-a\n+b", want: "binary"},
		{name: "directory", patch: "*** Delete File: .", want: "workspace directory"},
		{name: "parent is a file", patch: "*** Add File: a.txt/b\n+x", want: "not a directory"},
		{name: "eof not at end", patch: "*** Update File: a.txt\n@@\n-y\n*** End of File", wantErr: ErrPatchMismatch},
		{name: "missing anchor", patch: "*** Update File: a.txt\n@@ func nope()\n-x\n+y", wantErr: ErrPatchMismatch, want: `"func nope()"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := treeSnapshot(t, e.root)
			outBefore := treeSnapshot(t, e.outside)
			_, err := applyPatch(t, e, "*** Begin Patch\n"+tt.patch+"\n*** End Patch")
			if err == nil {
				t.Fatal("err=nil, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err=%v, want %v", err, tt.wantErr)
			}
			mustContain(t, err.Error(), tt.want)
			if !reflect.DeepEqual(treeSnapshot(t, e.root), before) || !reflect.DeepEqual(treeSnapshot(t, e.outside), outBefore) {
				t.Errorf("a refused patch changed files")
			}
		})
	}
}

func TestApplyHunks(t *testing.T) {
	tests := []struct {
		name, file, patch, want string
	}{
		{name: "trailing whitespace ignored", file: "a  \nb\t\nc\n", patch: " a\n-b\n+B", want: "a  \nB\nc\n"},
		{name: "exact preferred", file: "x \ny\nx\ny\n", patch: " x\n-y\n+Y", want: "x \ny\nx\nY\n"},
		{name: "first match after the previous hunk", file: "k\nv\nk\nv\n", patch: "@@\n k\n-v\n+1\n@@\n k\n-v\n+2", want: "k\n1\nk\n2\n"},
		{name: "anchor", file: "func a() {\n\treturn\n}\nfunc b() {\n\treturn\n}\n", patch: "@@ func b() {\n-\treturn\n+\treturn 2", want: "func a() {\n\treturn\n}\nfunc b() {\n\treturn 2\n}\n"},
		{name: "anchor ignores indentation", file: "class C:\n    def f(self):\n        pass\n", patch: "@@ def f(self):\n-        pass\n+        return 1", want: "class C:\n    def f(self):\n        return 1\n"},
		{name: "end of file", file: "x\ny\nx\ny\n", patch: "@@\n x\n-y\n+z\n*** End of File", want: "x\ny\nx\nz\n"},
		{name: "pure addition at end", file: "a\n", patch: "@@\n+b", want: "a\nb\n"},
		{name: "pure addition after anchor", file: "a\nb\n", patch: "@@ a\n+inserted", want: "a\ninserted\nb\n"},
		{name: "no final newline kept", file: "a\nb", patch: " a\n-b\n+c", want: "a\nc"},
		{name: "empty file gets a newline", file: "", patch: "@@\n+a", want: "a\n"},
		{name: "crlf", file: "a\r\nb\r\n", patch: " a\n-b\n+c\n+d", want: "a\r\nc\r\nd\r\n"},
		{name: "delete all", file: "a\nb\n", patch: "-a\n-b", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePatch("*** Begin Patch\n*** Update File: f\n" + tt.patch + "\n*** End Patch")
			if err != nil {
				t.Fatal(err)
			}
			got, err := applyHunks("f", []byte(tt.file), p.Files[0].Hunks)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestApplyPatchRollback fails a write in the middle of a patch: the files
// already written get their old content back, added files and the
// directories made for them go.
func TestApplyPatchRollback(t *testing.T) {
	e := newEnv(t)
	e.file(t, "a.txt", "a1\n")
	e.file(t, "c.txt", "c1\n")
	e.file(t, "d.txt", "d1\n")
	before := treeSnapshot(t, e.root)
	p, err := ParsePatch(`*** Begin Patch
*** Update File: a.txt
-a1
+a2
*** Add File: new/dir/b.txt
+b
*** Delete File: d.txt
*** Update File: c.txt
-c1
+c2
*** End Patch`)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := planPatch(e.ws, p)
	if err != nil {
		t.Fatal(err)
	}
	writes := 0
	real := dirOps(e.ws)
	ops := real
	ops.write = func(path string, data []byte, mode fs.FileMode) error {
		if writes++; writes == 3 { // a.txt, new/dir/b.txt, then c.txt fails
			return &fs.PathError{Op: "write", Path: path, Err: errors.New("disk full")}
		}
		return real.write(path, data, mode)
	}
	err = pl.commit(ops)
	if err == nil {
		t.Fatal("commit succeeded, want the injected failure")
	}
	mustContain(t, err.Error(), "c.txt", "disk full", "restored")
	if strings.Contains(err.Error(), e.root) {
		t.Errorf("the error shows the workspace's absolute path: %v", err)
	}
	if after := treeSnapshot(t, e.root); !reflect.DeepEqual(after, before) {
		t.Errorf("after rollback:\n%q\nwant %q", after, before)
	}

	// A rollback that fails says which files are left changed.
	ops.write = func(path string, data []byte, mode fs.FileMode) error {
		if strings.HasSuffix(path, "c.txt") || string(data) == "a1\n" {
			return errors.New("read-only")
		}
		return real.write(path, data, mode)
	}
	err = pl.commit(ops)
	mustContain(t, fmt.Sprint(err), "rolling back failed", "a.txt")
}

func TestPatchMutatedPaths(t *testing.T) {
	tl := patchTool(t)
	if got := tl.DeclarationsFor(nil); got != tool.Strictest {
		t.Errorf("declarations=%+v, want %+v", got, tool.Strictest)
	}
	args, _ := json.Marshal(map[string]string{"patch": "*** Begin Patch\n*** Add File: ./a/b.txt\n+x\n*** Update File: c.go\n*** Move to: d/e.go\n*** Delete File: ../x\n*** End Patch"})
	if got, want := tl.MutatedPaths(args), []string{"a/b.txt", "c.go", "d/e.go"}; !slices.Equal(got, want) {
		t.Errorf("MutatedPaths=%q, want %q", got, want)
	}
	if got := tl.MutatedPaths([]byte(`{"patch": "not a patch"}`)); got != nil {
		t.Errorf("MutatedPaths(unparsable)=%q, want nil", got)
	}
	if got := tl.MutatedPaths([]byte(`{"patch": 1}`)); got != nil {
		t.Errorf("MutatedPaths(malformed)=%q, want nil", got)
	}
}

// samePatch compares two patches but for their Line fields.
func samePatch(a, b *Patch) bool {
	strip := func(p *Patch) *Patch {
		c := &Patch{}
		for _, f := range p.Files {
			f.Line = 0
			hs := make([]Hunk, len(f.Hunks))
			for i, h := range f.Hunks {
				h.Line = 0
				ls := make([]HunkLine, len(h.Lines))
				for j, l := range h.Lines {
					l.Line = 0
					ls[j] = l
				}
				h.Lines = ls
				hs[i] = h
			}
			if len(hs) == 0 {
				hs = nil
			}
			f.Hunks = hs
			c.Files = append(c.Files, f)
		}
		return c
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// FuzzParsePatch parses arbitrary text: no panic; an error is a *PatchError
// whose line is in the text; a patch that parses prints to a text that
// parses back to the same patch.
func FuzzParsePatch(f *testing.F) {
	f.Add("*** Begin Patch\n*** Add File: a\n+x\n*** End Patch")
	f.Add("*** Begin Patch\n*** Update File: a\n*** Move to: b\n@@ f\n@@ g\n x\n\n-y\n+z\n*** End of File\n@@ -1 +1 @@\n q\n*** Delete File: c\n*** End Patch\n")
	f.Add("\r\n*** Begin Patch\r\n*** Update File: a\r\n-\r\r\n*** End Patch")
	f.Add("*** Begin Patch\n*** Update File: a\n@@ -1,2 +1,2 @@ ctx\n-x\n*** End Patch")
	f.Add("*** Begin Patch\n*** End Patch")
	f.Add("  *** Begin Patch\n  *** Update File: a  \n\t*** Move to: b\n@@\n x\n *** Add File: c\n\t*** Add File: d\n+y\n   *** Delete File: e\n *** End Patch ")
	f.Add("*** Begin Patch\n*** Delete File:\n*** Move to: x\n*** End Patch")
	f.Fuzz(func(t *testing.T, text string) {
		p, err := ParsePatch(text)
		if err != nil {
			var pe *PatchError
			if !errors.As(err, &pe) {
				t.Fatalf("err=%v (%T), want a *PatchError", err, err)
			}
			if n := strings.Count(text, "\n") + 1; pe.Line < 1 || pe.Line > n {
				t.Fatalf("error line %d outside the text's %d lines: %v", pe.Line, n, err)
			}
			return
		}
		printed := p.String()
		again, err := ParsePatch(printed)
		if err != nil {
			t.Fatalf("the printed patch does not parse: %v\n%s", err, printed)
		}
		if !samePatch(p, again) && !anchorLooksUnified(p) {
			t.Fatalf("round trip changed the patch:\n%q\n%+v\n%+v", printed, p, again)
		}
		// Applying it to an arbitrary file never panics.
		for _, fp := range p.Files {
			_, _ = applyHunks(fp.Path, []byte(text), fp.Hunks)
		}
	})
}

// anchorLooksUnified reports an anchor the printer cannot keep: "@@ " with
// it reads back as a unified-diff range.
func anchorLooksUnified(p *Patch) bool {
	for _, f := range p.Files {
		for _, h := range f.Hunks {
			for _, a := range h.Anchors {
				if unifiedHeader.MatchString("@@ " + a) {
					return true
				}
			}
		}
	}
	return false
}

// FuzzPatchArgs runs arbitrary arguments through apply_patch's validator and
// mutated paths: no panic, nil for arguments that are invalid or a patch
// that does not parse.
func FuzzPatchArgs(f *testing.F) {
	f.Add(`{"patch": "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch"}`)
	f.Add(`{"patch": "*** Begin Patch\n*** Update File: a\n*** Move to: ../b\n*** End Patch"}`)
	f.Add(`{"patch": 7}`)
	tl, err := PatchTool()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args string) {
		valid := tl.Validate(json.RawMessage(args)) == nil
		paths := tl.MutatedPaths(json.RawMessage(args))
		if !valid && paths != nil {
			t.Fatalf("MutatedPaths(%s)=%q for invalid arguments", args, paths)
		}
		var a patchArgs
		if paths != nil && json.Unmarshal([]byte(args), &a) == nil {
			if _, err := ParsePatch(a.Patch); err != nil {
				t.Fatalf("MutatedPaths=%q for a patch that does not parse: %v", paths, err)
			}
		}
	})
}

// FuzzApplyHunksLineEndings: whatever a file's line endings (LF, CRLF,
// mixed, a lone CR), a hunk of one context line taken from the file matches
// and changes nothing, byte for byte, and a line added after it adds exactly
// one line break.
func FuzzApplyHunksLineEndings(f *testing.F) {
	for _, s := range []string{"a\r\nb\nc\r\n", "x\ny\n", "one\r\ntwo", "\r\n\r\n\n", "a\rb\r\nc", "solo", "t  \r\nu\t\n"} {
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, data string, k uint8) {
		cmp := splitFile([]byte(data)).compared()
		if len(cmp) == 0 {
			return
		}
		line := cmp[int(k)%len(cmp)]
		same := []Hunk{{Lines: []HunkLine{{Kind: ' ', Text: line}}}}
		out, err := applyHunks("f", []byte(data), same)
		if err != nil {
			t.Fatalf("a context line of the file (%q) did not match: %v", line, err)
		}
		if string(out) != data {
			t.Fatalf("a context-only hunk changed %q into %q", data, out)
		}
		add := []Hunk{{Lines: []HunkLine{{Kind: ' ', Text: line}, {Kind: '+', Text: "added"}}}}
		out, err = applyHunks("f", []byte(data), add)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Count(string(out), "\n"), strings.Count(data, "\n")+1; got != want && !(got == want-1 && !strings.HasSuffix(data, "\n")) {
			t.Fatalf("adding a line to %q gave %q: %d line breaks, want %d", data, out, got, want)
		}
	})
}
