package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// ripgrep returns the rg the tests drive: FindRipgrep's, else the one
// scripts/ensure-rg installs in the repository. Without either the test is
// skipped with a note saying how to get it.
func ripgrep(t *testing.T) string {
	t.Helper()
	if p, _, err := FindRipgrep(); err == nil {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", ".tools", "bin", "rg")
	if _, err := RipgrepVersion(p); err == nil {
		return p
	}
	t.Skip("ripgrep 14+ not found: run scripts/ensure-rg, or set " + RipgrepEnv)
	return ""
}

// searchTool returns glob or grep bound to rg.
func searchTool(t *testing.T, rg, name string) *tool.Tool {
	t.Helper()
	all, err := SearchTools(rg, RipgrepUnconfined()) // confined where Landlock is
	return pick(t, name, all, err)
}

// searchTree writes a small tree with an ignored file, a hidden directory,
// a .git directory and names that sort differently by component than as
// strings ("a/b.go" before "a-c/z.go").
func searchTree(t *testing.T, e *env) {
	t.Helper()
	e.file(t, "a/b.go", "x1\nfoo\nx3\nx4\nx5\nx6\nfoo bar\nx8\n")
	e.file(t, "a-c/z.go", "Foo\nfoo\n")
	e.file(t, ".hid/h.go", "foo hidden\n")
	e.file(t, ".git/config", "foo in git\n")
	e.file(t, ".gitignore", "ignored.go\n")
	e.file(t, "ignored.go", "foo\n")
	e.file(t, "src/sub/m.go", "nothing\nfoo(1)\n")
	e.file(t, "src/sub/m_test.go", "foo test\n")
	e.file(t, "src/readme.md", "about foo\n")
	e.file(t, "-dash.txt", "foo dash\n")
	e.file(t, "bin.dat", "foo\x00binary\n")
}

// rgDirect runs rg itself in dir with args, as a user would, and returns its
// output lines.
func rgDirect(t *testing.T, rg, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(rg, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + fallbackPath, "HOME=" + dir}
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("rg %v: %v", args, err)
	}
	return splitOut(string(out))
}

func splitOut(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// notIgnored keeps the lines of rg's output whose path is one of files.
func notIgnored(out, files []string) []string {
	var keep []string
	for _, l := range out {
		for _, f := range files {
			if l == f || strings.HasPrefix(l, f+":") || strings.HasPrefix(l, f+"-") {
				keep = append(keep, l)
				break
			}
		}
	}
	return keep
}

// prefixed puts dir/ in front of every path rg printed, the way the tools
// report paths relative to the workspace.
func prefixed(dir string, ls []string) []string {
	if dir == "." {
		return ls
	}
	out := make([]string, len(ls))
	for i, l := range ls {
		if l == "--" {
			out[i] = l
		} else {
			out[i] = dir + "/" + l
		}
	}
	return out
}

func TestFindRipgrep(t *testing.T) {
	rg := ripgrep(t)
	t.Setenv(RipgrepEnv, rg)
	p, v, err := FindRipgrep()
	if err != nil || p != rg {
		t.Fatalf("FindRipgrep()=%q, %q, %v; want %q", p, v, err, rg)
	}
	if _, major, ok := parseRipgrepVersion([]byte("ripgrep " + v)); !ok || major < MinRipgrepMajor {
		t.Errorf("version=%q, want %d or newer", v, MinRipgrepMajor)
	}

	dir := t.TempDir()
	old := filepath.Join(dir, "rg13")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho 'ripgrep 13.0.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("#!/bin/sh\necho 'GNU grep 3.8'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     string
		path    string
		wantErr error
	}{
		{name: "env missing file", env: filepath.Join(dir, "nope"), wantErr: ErrRipgrepMissing},
		{name: "env too old", env: old, wantErr: ErrRipgrepTooOld},
		{name: "env not ripgrep", env: junk, wantErr: ErrRipgrepTooOld},
		// An unset variable and an empty PATH: nothing to find.
		{name: "nothing on PATH", env: "", path: dir, wantErr: ErrRipgrepMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(RipgrepEnv, tt.env)
			if tt.path != "" {
				t.Setenv("PATH", tt.path)
			}
			_, _, err := FindRipgrep()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err=%v, want %v", err, tt.wantErr)
			}
			// The message says how to get ripgrep 14.
			mustContain(t, err.Error(), "github.com/BurntSushi/ripgrep/releases", "cargo install ripgrep", "scripts/ensure-rg", "@anthropic-ai/claude-code@1.0.128")
			if _, err := SearchTools(tt.env); !errors.Is(err, tt.wantErr) {
				t.Errorf("SearchTools(%q) err=%v, want %v", tt.env, err, tt.wantErr)
			}
		})
	}
}

func TestSearchDeclarations(t *testing.T) {
	rg := ripgrep(t)
	all, err := SearchTools(rg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range all {
		names = append(names, tl.Name)
		if got := tl.DeclarationsFor(nil); got != searchDeclarations {
			t.Errorf("%s declarations=%+v, want %+v", tl.Name, got, searchDeclarations)
		}
		if tl.MutatedPaths != nil {
			t.Errorf("%s declares mutated paths", tl.Name)
		}
		if _, err := tool.NewRegistry(tl); err != nil {
			t.Errorf("Register(%s): %v", tl.Name, err)
		}
	}
	grep := all[1]
	for args, want := range map[string][]string{
		`{"pattern": "x", "path": "src/"}`: {"src"},
		`{"pattern": "x", "path": "./"}`:   nil,
		`{"pattern": "x"}`:                 nil,
	} {
		if got := grep.TouchedPaths([]byte(args)); !slices.Equal(got, want) {
			t.Errorf("grep TouchedPaths(%s)=%q, want %q", args, got, want)
		}
	}
	if want := []string{"glob", "grep"}; !slices.Equal(names, want) {
		t.Errorf("names=%v, want %v", names, want)
	}
}

// TestGlobMatchesRg checks glob against rg itself for the same queries: the
// same files, in the same order, paths relative to the workspace.
func TestGlobMatchesRg(t *testing.T) {
	rg := ripgrep(t)
	e := newEnv(t)
	searchTree(t, e)
	glob := searchTool(t, rg, "glob")
	tests := []struct {
		pattern, path string
	}{
		{"**/*.go", "."},
		{"*.go", "."},
		{"*", "."},
		{"sub/*.go", "src"},
		{"*_test.go", "src"},
		{"*.{md,txt}", "."},
		{"!*.go", "."},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" in "+tt.path, func(t *testing.T) {
			r, err := call(t, e.ctx, glob, fmt.Sprintf(`{"pattern": %q, "path": %q}`, tt.pattern, tt.path))
			if err != nil {
				t.Fatal(err)
			}
			got := splitOut(text(t, r))
			// rg's --glob lists ignored files it matches; the tool does
			// not, so the oracle is rg's answer among the files rg does
			// not ignore.
			dir := filepath.Join(e.root, tt.path)
			common := []string{"--files", "--hidden", "--no-require-git", "--no-ignore-global", "--sort", "path"}
			want := prefixed(tt.path, notIgnored(rgDirect(t, rg, dir, append(common, "--glob", tt.pattern, "--glob", "!.git")...),
				rgDirect(t, rg, dir, append(common, "--glob", "!.git")...)))
			if len(want) == 0 {
				t.Fatalf("rg finds nothing for %q: a useless case", tt.pattern)
			}
			if !slices.Equal(got, want) {
				t.Errorf("glob=%q\nrg  =%q", got, want)
			}
			for _, p := range got {
				if strings.HasPrefix(p, ".git/") || p == "ignored.go" || p == "bin.dat" && tt.pattern == "**/*.go" {
					t.Errorf("glob lists %q", p)
				}
			}
		})
	}
}

func TestGlobOrderAndNoMatch(t *testing.T) {
	rg := ripgrep(t)
	e := newEnv(t)
	searchTree(t, e)
	glob := searchTool(t, rg, "glob")
	r, err := call(t, e.ctx, glob, `{"pattern": "**/*.go"}`)
	if err != nil {
		t.Fatal(err)
	}
	// By component, each as bytes: '.' (0x2e) before 'a', and the
	// directory "a" before the name "a-c".
	want := ".hid/h.go\na/b.go\na-c/z.go\nsrc/sub/m.go\nsrc/sub/m_test.go\n"
	if got := text(t, r); got != want {
		t.Errorf("glob=%q, want %q", got, want)
	}
	r, err = call(t, e.ctx, glob, `{"pattern": "*.rs"}`)
	if err != nil {
		t.Fatalf("no match: err=%v, want a result", err)
	}
	mustContain(t, text(t, r), "no files match", `"*.rs"`)
}

// TestSearchRespectsIgnore checks that a pattern never brings back what an
// ignore file hides, as rg's own --glob would.
func TestSearchRespectsIgnore(t *testing.T) {
	rg := ripgrep(t)
	e := newEnv(t)
	e.file(t, ".gitignore", "node_modules\nbuild/\n*.log\n")
	e.file(t, "node_modules/p/i.js", "foo\n")
	e.file(t, "build/out.js", "foo\n")
	e.file(t, "x.log", "foo\n")
	e.file(t, "src/k.js", "foo\n")
	e.file(t, "#hash.txt", "foo\n")
	glob := searchTool(t, rg, "glob")
	for pattern, want := range map[string]string{
		"**/*.js":    "src/k.js\n",
		"*.log":      "no files match",
		"**":         "#hash.txt\n.gitignore\nsrc/k.js\n",
		"*":          "#hash.txt\n.gitignore\nsrc/k.js\n",
		"!*.js":      "#hash.txt\n.gitignore\n",
		"!#hash.txt": ".gitignore\nsrc/k.js\n",
		"#hash.txt":  "#hash.txt\n",
	} {
		r, err := call(t, e.ctx, glob, fmt.Sprintf(`{"pattern": %q}`, pattern))
		if err != nil {
			t.Fatal(err)
		}
		if got := text(t, r); !strings.HasPrefix(got, want) {
			t.Errorf("glob %q=%q, want %q", pattern, got, want)
		}
	}
	r, err := call(t, e.ctx, searchTool(t, rg, "grep"), `{"pattern": "foo", "glob": "*.{js,log}"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), "src/k.js:1:foo\n"; got != want {
		t.Errorf("grep=%q, want %q", got, want)
	}
}

func TestGlobLimit(t *testing.T) {
	rg := ripgrep(t)
	e := newEnv(t)
	for i := range 30 {
		e.file(t, fmt.Sprintf("d/f%02d.txt", i), "x\n")
	}
	r, err := call(t, e.ctx, searchTool(t, rg, "glob"), `{"pattern": "*.txt", "limit": 7}`)
	if err != nil {
		t.Fatal(err)
	}
	got := splitOut(text(t, r))
	if len(got) != 8 {
		t.Fatalf("lines=%q, want 7 paths and a note", got)
	}
	for i, p := range got[:7] {
		if want := fmt.Sprintf("d/f%02d.txt", i); p != want {
			t.Errorf("path %d=%q, want %q", i, p, want)
		}
	}
	mustContain(t, got[7], "stopped at 7 paths")
}

func TestGlobErrors(t *testing.T) {
	rg := ripgrep(t)
	e := newEnv(t)
	searchTree(t, e)
	glob := searchTool(t, rg, "glob")
	tests := []struct {
		name, args string
		wantErr    error
		want       string
	}{
		{name: "outside", args: `{"pattern": "*", "path": "../outside"}`, wantErr: workspace.ErrOutside},
		{name: "absolute outside", args: fmt.Sprintf(`{"pattern": "*", "path": %q}`, e.outside), wantErr: workspace.ErrOutside},
		{name: "missing dir", args: `{"pattern": "*", "path": "nope"}`, want: "no such file or directory"},
		{name: "a file", args: `{"pattern": "*", "path": "a/b.go"}`, want: "not a directory"},
		{name: "bad glob", args: `{"pattern": "a[", "path": "."}`, wantErr: ErrInvalidPattern, want: "unclosed character class"},
		{name: "line break", args: `{"pattern": "a\nb"}`, wantErr: ErrInvalidPattern},
		{name: "empty pattern", args: `{"pattern": ""}`, want: "pattern is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, e.ctx, glob, tt.args)
			if err == nil {
				t.Fatal("err=nil, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err=%v, want %v", err, tt.wantErr)
			}
			mustContain(t, err.Error(), tt.want)
		})
	}
	// A link inside the workspace to a directory outside is not followed.
	if err := os.WriteFile(filepath.Join(e.outside, "secret.go"), []byte("foo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.outside, filepath.Join(e.root, "link")); err != nil {
		t.Fatal(err)
	}
	r, err := call(t, e.ctx, glob, `{"pattern": "**/secret.go"}`)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, text(t, r), "no files match")
	if _, err := call(t, e.ctx, glob, `{"pattern": "*", "path": "link"}`); !errors.Is(err, workspace.ErrOutside) {
		t.Errorf("path through a link outside: err=%v, want ErrOutside", err)
	}
}

// TestGrepMatchesRg checks grep against rg's own output for the same
// queries: the same lines, in the same order, formatted the same way.
func TestGrepMatchesRg(t *testing.T) {
	rg := ripgrep(t)
	e := newEnv(t)
	searchTree(t, e)
	grep := searchTool(t, rg, "grep")
	tests := []struct {
		name string
		args string
		dir  string   // where rg runs, relative to the workspace
		rg   []string // rg's flags beyond the common ones
	}{
		{name: "regex", args: `{"pattern": "fo+"}`, dir: ".", rg: []string{"fo+"}},
		{name: "context", args: `{"pattern": "foo", "context": 1}`, dir: ".", rg: []string{"-C1", "foo"}},
		{name: "context 3", args: `{"pattern": "foo", "context": 3}`, dir: ".", rg: []string{"-C3", "foo"}},
		{name: "case", args: `{"pattern": "FOO", "case_insensitive": true}`, dir: ".", rg: []string{"-i", "FOO"}},
		{name: "glob", args: `{"pattern": "foo", "glob": "*.go"}`, dir: ".", rg: []string{"--glob", "*.go", "foo"}},
		{name: "dir", args: `{"pattern": "foo", "path": "src"}`, dir: "src", rg: []string{"foo"}},
		{name: "glob with slash", args: `{"pattern": "foo", "path": "src", "glob": "sub/*.go"}`, dir: "src", rg: []string{"--glob", "sub/*.go", "foo"}},
		{name: "literal", args: `{"pattern": "foo(1)", "literal": true}`, dir: ".", rg: []string{"-F", "foo(1)"}},
		{name: "file", args: `{"pattern": "foo", "path": "a/b.go", "context": 1}`, dir: "a", rg: []string{"-C1", "foo", "b.go"}},
		{name: "dash", args: `{"pattern": "-?dash", "path": "-dash.txt"}`, dir: ".", rg: []string{"--regexp=-?dash", "--", "-dash.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := call(t, e.ctx, grep, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			got := splitOut(text(t, r))
			flags := append([]string{"--no-heading", "--with-filename", "--line-number", "--color=never",
				"--hidden", "--no-require-git", "--no-ignore-global", "--sort", "path", "--glob", "!.git"}, tt.rg...)
			dir := filepath.Join(e.root, tt.dir)
			want := rgDirect(t, rg, dir, flags...)
			if strings.Contains(tt.args, `"glob"`) {
				want = notIgnored(want, rgDirect(t, rg, dir, "--files", "--hidden", "--no-require-git", "--no-ignore-global", "--glob", "!.git"))
			}
			want = prefixed(tt.dir, want)
			if len(want) == 0 {
				t.Fatal("rg finds nothing: a useless case")
			}
			if !slices.Equal(got, want) {
				t.Errorf("grep=\n%s\nrg=\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, l := range got {
				if strings.HasPrefix(l, ".git/") || strings.HasPrefix(l, "ignored.go") || strings.HasPrefix(l, "bin.dat") {
					t.Errorf("grep shows %q", l)
				}
			}
		})
	}
}

func TestGrepNoMatchAndErrors(t *testing.T) {
	rg := ripgrep(t)
	e := newEnv(t)
	searchTree(t, e)
	grep := searchTool(t, rg, "grep")
	r, err := call(t, e.ctx, grep, `{"pattern": "zebra"}`)
	if err != nil {
		t.Fatalf("no match: err=%v, want a result", err)
	}
	mustContain(t, text(t, r), "no matches", `"zebra"`)

	tests := []struct {
		name, args string
		wantErr    error
		want       []string
	}{
		{name: "bad regex", args: `{"pattern": "foo("}`, wantErr: ErrInvalidPattern, want: []string{"does not parse", "unclosed group", `"foo("`}},
		{name: "bad glob", args: `{"pattern": "foo", "glob": "a["}`, wantErr: ErrInvalidPattern, want: []string{`glob "a["`, "unclosed character class"}},
		{name: "outside", args: `{"pattern": "foo", "path": "../outside"}`, wantErr: workspace.ErrOutside},
		{name: "missing", args: `{"pattern": "foo", "path": "nope.go"}`, want: []string{"no such file"}},
		{name: "empty", args: `{"pattern": ""}`, want: []string{"pattern is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, e.ctx, grep, tt.args)
			if err == nil {
				t.Fatal("err=nil, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err=%v, want %v", err, tt.wantErr)
			}
			mustContain(t, err.Error(), tt.want...)
		})
	}
	// Arguments out of range are refused before any code runs.
	for _, args := range []string{`{"pattern": "x", "context": 11}`, `{"pattern": "x", "limit": 0}`, `{"pattern": "x", "limit": 2001}`, `{"pattern": "x", "regex": true}`, `{}`} {
		if err := grep.Validate([]byte(args)); err == nil {
			t.Errorf("Validate(%s)=nil, want an error", args)
		}
	}
}

func TestGrepLimit(t *testing.T) {
	rg := ripgrep(t)
	e := newEnv(t)
	var body strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&body, "line %d foo\nfiller %d\n", i, i)
	}
	e.file(t, "a.txt", body.String())
	e.file(t, "b.txt", body.String())
	r, err := call(t, e.ctx, searchTool(t, rg, "grep"), `{"pattern": "foo", "limit": 3, "context": 1}`)
	if err != nil {
		t.Fatal(err)
	}
	want := "a.txt:1:line 1 foo\na.txt-2-filler 1\na.txt:3:line 2 foo\na.txt-4-filler 2\na.txt:5:line 3 foo\na.txt-6-filler 3\n"
	got := text(t, r)
	if !strings.HasPrefix(got, want) {
		t.Fatalf("grep=%q, want it to start %q", got, want)
	}
	mustContain(t, strings.TrimPrefix(got, want), "stopped at 3 matching lines")
}

// fakeRg writes an executable that answers --version as ripgrep 14 and
// otherwise runs body (a shell script).
//
// A fake rg is a shell script, which the Landlock confinement of the real
// one (read the workspace and rg only) would not let run: the test plays a
// kernel without Landlock, where glob and grep built with RipgrepUnconfined
// run rg as is (TestSearchConfinedToWorkspace tests the confinement).
func fakeRg(t *testing.T, body string) string {
	t.Helper()
	orig := searchLandlock
	searchLandlock = func() bool { return false }
	t.Cleanup(func() { searchLandlock = orig })
	p := filepath.Join(t.TempDir(), "rg")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'ripgrep 14.1.1 (fake)'; exit 0; fi\n" + body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSearchCancelKillsRg cancels a call whose rg hangs: the call returns
// context.Canceled at once, and rg and its child are gone.
func TestSearchCancelKillsRg(t *testing.T) {
	for _, name := range []string{"glob", "grep"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			pids := filepath.Join(t.TempDir(), "pids")
			rg := fakeRg(t, fmt.Sprintf("sleep 300 &\necho $$ $! > %s\nwait", pids))
			ctx, cancel := context.WithCancel(e.ctx)
			done := make(chan error, 1)
			go func() {
				_, err := searchTool(t, rg, name).Run(ctx, []byte(`{"pattern": "x"}`))
				done <- err
			}()
			var ids []int
			deadline := time.Now().Add(10 * time.Second)
			for len(ids) < 2 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				b, _ := os.ReadFile(pids)
				ids = ids[:0]
				for _, f := range strings.Fields(string(b)) {
					n, _ := strconv.Atoi(f)
					ids = append(ids, n)
				}
			}
			if len(ids) < 2 {
				t.Fatal("the fake rg did not start")
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err=%v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the call did not return after cancel")
			}
			for _, pid := range ids {
				// The leader was reaped by the call; its orphaned child
				// is reaped by init once killed, so wait a moment.
				gone := false
				for range 200 {
					if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
						gone = true
						break
					}
					if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") Z ") {
						gone = true // killed, waiting for its parent
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				if !gone {
					t.Errorf("process %d still runs after cancel", pid)
				}
			}
		})
	}
}

// TestSearchCapsKillRg gives glob and grep an rg that never stops writing:
// the caps end the call with a note, which means rg was killed.
func TestSearchCapsKillRg(t *testing.T) {
	match := `{"type":"match","data":{"path":{"text":"a.go"},"lines":{"text":"foo\n"},"line_number":1,"absolute_offset":0,"submatches":[]}}`
	tests := []struct {
		name, tool, script, args, want string
	}{
		{name: "glob limit", tool: "glob", script: "exec yes a.go", args: `{"pattern": "*", "limit": 5}`, want: "stopped at 5 paths"},
		{name: "glob bytes", tool: "glob", script: "exec yes $(printf '%01000d' 0)", args: `{"pattern": "*", "limit": 10000}`, want: "stopped after 8388608 bytes"},
		{name: "grep limit", tool: "grep", script: "exec yes '" + match + "'", args: `{"pattern": "foo", "limit": 4}`, want: "stopped at 4 matching lines"},
		{name: "grep bytes", tool: "grep", script: "exec yes '{\"type\":\"begin\",\"data\":{\"path\":{\"text\":\"a.go\"}}}'", args: `{"pattern": "foo"}`, want: "stopped after 8388608 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
			defer cancel()
			r, err := searchTool(t, fakeRg(t, tt.script), tt.tool).Run(ctx, []byte(tt.args))
			if err != nil {
				t.Fatal(err)
			}
			mustContain(t, text(t, r), tt.want)
		})
	}
}

func TestSearchNoWorkspace(t *testing.T) {
	rg := ripgrep(t)
	for _, name := range []string{"glob", "grep"} {
		_, err := searchTool(t, rg, name).Run(context.Background(), []byte(`{"pattern": "x"}`))
		if !errors.Is(err, ErrNoWorkspace) {
			t.Errorf("%s: err=%v, want ErrNoWorkspace", name, err)
		}
	}
}

func TestComparePaths(t *testing.T) {
	in := []string{"a-c/z", "a/b", "a", ".h/x", "a/b/c", "B", "a.go"}
	slices.SortFunc(in, comparePaths)
	want := []string{".h/x", "B", "a", "a/b", "a/b/c", "a-c/z", "a.go"}
	if !slices.Equal(in, want) {
		t.Errorf("sorted=%q, want %q", in, want)
	}
}

// TestSearchConfinedToWorkspace runs rg as glob and grep do, told to follow
// a symlink in the workspace to a directory outside it (where a directory
// swapped for a symlink mid-walk would lead it): confined by Landlock, and
// in the sandbox as on a kernel without Landlock, it reads nothing there,
// while it reads the workspace.
func TestSearchConfinedToWorkspace(t *testing.T) {
	rg := ripgrep(t)
	for _, mode := range []string{"landlock", "sandbox"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			if err := os.WriteFile(filepath.Join(e.outside, "secret.txt"), []byte("s3cret\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(e.outside, filepath.Join(e.root, "link")); err != nil {
				t.Fatal(err)
			}
			e.file(t, "inside.txt", "s3cret\n")
			o := searchOptions{box: DefaultSandbox()}
			if mode == "sandbox" {
				orig := searchLandlock
				searchLandlock = func() bool { return false }
				defer func() { searchLandlock = orig }()
			}
			c, err := o.confine("grep", testCall.Tenant, e.root, e.root, "")
			if err != nil {
				t.Fatalf("confine: %v (this kernel: %s)", err, sandbox.Probe())
			}
			if got := c.box != nil; got != (mode == "sandbox") {
				t.Fatalf("confinement %+v, want %s", c, mode)
			}
			var out []byte
			exit, err := runRg(e.ctx, rgRun{rg: rg, dir: e.root, args: []string{"--no-config", "--follow", "--sort=path", "s3cret"}, env: []string{"PATH=/usr/bin:/bin"}, confine: c},
				func(r io.Reader) (bool, error) { out, _ = io.ReadAll(r); return false, nil })
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), "secret.txt") {
				t.Errorf("rg read outside the workspace: exit %d, output %q, stderr %q", exit.code, out, exit.stderr)
			}
			if !strings.Contains(string(out), "inside.txt:s3cret") {
				t.Errorf("rg did not read the workspace: exit %d, output %q, stderr %q", exit.code, out, exit.stderr)
			}
			if mode == "landlock" {
				// Started outside the workspace, it can read nothing.
				exit, err = runRg(e.ctx, rgRun{rg: rg, dir: e.outside, args: []string{"--no-config", "s3cret"}, env: []string{"PATH=/usr/bin:/bin"}, confine: c},
					func(r io.Reader) (bool, error) { out, _ = io.ReadAll(r); return false, nil })
				if err != nil || strings.Contains(string(out), "s3cret") || exit.code == 0 {
					t.Errorf("rg in a directory outside: exit %d, err %v, output %q", exit.code, err, out)
				}
			}
		})
	}
}

// TestSearchWithoutLandlock plays a kernel without Landlock: glob and grep
// refuse, saying how to accept it, unless built with RipgrepUnconfined.
func TestSearchWithoutLandlock(t *testing.T) {
	defer func(orig func() bool) { searchLandlock = orig }(searchLandlock)
	searchLandlock = func() bool { return false }
	e := newEnv(t)
	e.file(t, "a.txt", "needle\n")
	rg := ripgrep(t)
	refused, err := SearchTools(rg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range refused {
		_, err := call(t, e.ctx, tl, `{"pattern": "*"}`)
		if tl.Name == "grep" {
			_, err = call(t, e.ctx, tl, `{"pattern": "needle"}`)
		}
		if err == nil {
			t.Fatalf("%s ran on a kernel without Landlock", tl.Name)
		}
		mustContain(t, err.Error(), "nothing ran", "Landlock", `"accept_weaker": ["landlock"]`)
	}
	accepted, err := SearchTools(rg, RipgrepUnconfined())
	if err != nil {
		t.Fatal(err)
	}
	r, err := call(t, e.ctx, pick(t, "grep", accepted, nil), `{"pattern": "needle"}`)
	if err != nil || !strings.Contains(text(t, r), "a.txt:1:needle") {
		t.Errorf("accepted unconfined: %v %v", r, err)
	}
}
