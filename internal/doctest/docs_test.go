package doctest

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	onlySession = flag.String("doctest.session", "", "run only these sessions, comma-separated (the markup of every file is still checked)")
	keepTree    = flag.Bool("doctest.keep", false, "keep the fresh tree the docs ran in, and say where")
)

// TestDocs runs the shell blocks of the README and docs/ as a newcomer
// would: in a fresh tree of the repository (its committed files, with the
// working tree's changes to them), session by session, each session one
// bash in the tree's root, and compares each command's output with the
// output the docs show (internal/doctest/doc.go has the markup).
func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' commands: builds both binaries and starts nodes")
	}
	root := repoRoot(t)
	docs, files := parseAll(t, root)
	sessions, err := Sessions(docs)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var blocks, skipped int
	for _, f := range files {
		d := docs[f]
		if d.Blocks > 0 {
			t.Logf("blocks in %s: %d of commands: %d run in %d steps, %d skipped", f, d.Blocks, d.Blocks-len(d.Skips), len(d.Steps), len(d.Skips))
		}
		blocks += d.Blocks
		skipped += len(d.Skips)
	}
	for _, f := range files {
		for _, sk := range docs[f].Skips {
			t.Logf("skipped %s:%d: %s", sk.File, sk.Line, sk.Reason)
		}
	}
	defer func() {
		verdict := "as shown"
		if t.Failed() {
			verdict = "NOT as shown (above)"
		}
		t.Logf("docs ran %d of %d blocks of commands in %d sessions (%d skipped, each named above with why), %s, in %s",
			blocks-skipped, blocks, len(sessions), skipped, verdict, time.Since(began).Round(time.Second))
	}()

	// The docs' commands use fixed ports, as a newcomer's would: make run's
	// 7700, the tenants' node's 7710 and the fleet's 7701-7703 and 6221-6223.
	for _, port := range []int{7700, 7701, 7702, 7703, 7710, 6221, 6222, 6223} {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("port %d is taken (%v): the docs' commands use it as written; stop what listens there (a make run?) and run again", port, err)
		}
		l.Close()
	}
	tree := freshTree(t, root)
	env := sessionEnv(t, tree)
	for _, pkg := range []string{"./cmd/callsheet-node", "./cmd/callsheet-replay"} {
		// go run caches the linked binary: the docs' own go run lines
		// start at once after this.
		start := time.Now()
		out, err := command(tree, env, "go", "run", pkg, "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("go run %s --version in the fresh tree: %v\n%s", pkg, err, out)
		}
		t.Logf("built %s in %s: %s", pkg, time.Since(start).Round(time.Second/10), strings.TrimSpace(string(out)))
	}
	host, _ := os.Hostname()
	norm := Normaliser{Root: tree, Host: host}
	for _, s := range sessions {
		if *onlySession != "" && !slices.Contains(strings.Split(*onlySession, ","), s.Name) {
			continue
		}
		t.Run(s.Name, func(t *testing.T) { runSession(t, tree, env, norm, s) })
	}
}

// TestDocsMarkup checks every Markdown file's markup alone (no commands
// run): a block of commands without a directive fails here too.
func TestDocsMarkup(t *testing.T) {
	docs, _ := parseAll(t, repoRoot(t))
	if _, err := Sessions(docs); err != nil {
		t.Fatal(err)
	}
}

// parseAll parses the repository's Markdown files (but testdata's, whose
// Markdown is golden output) and fails the test on any problem, naming
// them all.
func parseAll(t *testing.T, root string) (map[string]*Doc, []string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	seen := map[string]bool{} // ls-files names a file once per stage while a merge is unresolved
	for _, f := range strings.Fields(string(out)) {
		if seen[f] {
			continue
		}
		seen[f] = true
		if strings.Contains("/"+f, "/testdata/") || strings.HasPrefix(f, ".tools/") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			continue // deleted in the working tree
		}
		files = append(files, f)
	}
	files = Order(files)
	docs := map[string]*Doc{}
	var probs []string
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		d, ps := Parse(f, src)
		for _, p := range ps {
			probs = append(probs, p.Error())
		}
		docs[f] = d
	}
	if len(probs) > 0 {
		t.Fatalf("the docs' markup (internal/doctest/doc.go):\n%s", strings.Join(probs, "\n"))
	}
	return docs, files
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: run the test from its package directory", dir)
	}
	return dir
}

// freshTree writes the repository's files as a clone would have them into
// a temporary directory: HEAD, with the working tree's changes to tracked
// files (git stash create records them without touching anything), so the
// docs run against what a newcomer gets; untracked files are not in it.
func freshTree(t *testing.T, root string) string {
	t.Helper()
	rev := "HEAD"
	if out, err := exec.Command("git", "-C", root, "stash", "create").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		rev = string(bytes.TrimSpace(out))
	}
	base := t.TempDir()
	if *keepTree {
		d, err := os.MkdirTemp("", "doctest-")
		if err != nil {
			t.Fatal(err)
		}
		base = d
		t.Logf("the fresh tree is kept at %s", d)
	}
	tree := filepath.Join(base, "callsheet")
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", tree)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	// A buffer each: exec copies each one's standard error on a goroutine
	// of its own.
	var archiveErrs, untarErrs bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErrs, &untarErrs
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, archiveErrs.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, untarErrs.String())
	}
	return tree
}

// sessionEnv is the test's environment as a newcomer's shell would have
// it after scripts/ensure-rg: ripgrep 14+ in the tree's .tools/bin (where
// ensure-rg installs it), CALLSHEET_RG unset, and on PATH an rg too old
// for a node (Debian 12's ripgrep 13), so a node started as the docs say
// finds a usable rg only where the docs say how (make run, or
// CALLSHEET_RG=$(scripts/ensure-rg | tail -1)).
func sessionEnv(t *testing.T, tree string) []string {
	t.Helper()
	rg := os.Getenv("CALLSHEET_RG")
	if rg == "" {
		rg, _ = exec.LookPath("rg")
	}
	if rg == "" {
		rg = filepath.Join(repoRoot(t), ".tools", "bin", "rg")
		if _, err := os.Stat(rg); err != nil {
			t.Fatal("no ripgrep 14+: run scripts/ensure-rg (it installs .tools/bin/rg), or set CALLSHEET_RG")
		}
	}
	rg, err := filepath.Abs(rg)
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(tree, ".tools", "bin")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rg, filepath.Join(tools, "rg")); err != nil {
		t.Fatal(err)
	}
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "rg"), []byte("#!/bin/sh\necho 'ripgrep 13.0.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "CALLSHEET_RG", "PATH", "CALLSHEET_TOKEN", "B", "S", "W", "TMPDIR":
			continue
		case "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES":
			// Run under make test, a nested make prints "Entering
			// directory": the docs' commands run as from a shell.
			continue
		}
		env = append(env, kv)
	}
	// A go run that a session's end stops leaves its work directory in
	// TMPDIR: the test's own, removed with it.
	return append(env, "PATH="+old+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+t.TempDir())
}

func command(dir string, env []string, name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Dir, c.Env = dir, env
	return c
}

// runSession runs a session's steps in one bash, in order, and stops every
// process the session started when it ends.
func runSession(t *testing.T, tree string, env []string, norm Normaliser, s Session) {
	sh, err := startShell(t, tree, env)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.stop(t)
	for _, st := range s.Steps {
		if !runStep(t, sh, norm, st) {
			t.Logf("%s:%d: the session stops here", st.File, st.Line)
			return
		}
	}
}

// runStep runs one step and reports each segment's comparison. It returns
// false when the session cannot go on (a timeout, a dead background
// command).
func runStep(t *testing.T, sh *shell, norm Normaliser, st Step) bool {
	t.Helper()
	what := "block"
	if st.Setup {
		what = "setup"
	}
	if st.Background {
		seg := st.Segments[0]
		out, errOut, err := sh.background(seg.Script, strings.Count(tidy(seg.Expect), "\n")+1, st.Timeout)
		if err != nil {
			t.Errorf("%s:%d: %s (in the background): %v\nits stderr ends:\n%s", st.File, seg.Line, oneLine(seg.Script), err, tail(errOut, 20))
			return false
		}
		if err := Match(norm, seg.Expect, out, seg.JSON); err != nil {
			t.Errorf("%s:%d: %s (in the background): its stdout is not what %s:%d shows:\n%v\nstdout:\n%s\nstderr ends:\n%s", st.File, seg.Line, oneLine(seg.Script), st.File, seg.ExpectLine, err, out, tail(errOut, 20))
			return true
		}
		t.Logf("%s:%d: %s (in the background): its stdout matches %s:%d", st.File, seg.Line, oneLine(seg.Script), st.File, seg.ExpectLine)
		return true
	}
	for i, seg := range st.Segments {
		want := 0
		if i == len(st.Segments)-1 {
			want = st.Status
		}
		out, status, err := sh.run(seg.Script, st.Timeout)
		if err != nil {
			t.Errorf("%s:%d: %s %s: %v\noutput so far:\n%s", st.File, seg.Line, what, oneLine(seg.Script), err, tail(out, 40))
			return false
		}
		if status != want {
			t.Errorf("%s:%d: %s %s: exit status %d, want %d; output:\n%s", st.File, seg.Line, what, oneLine(seg.Script), status, want, tail(out, 40))
			if st.Setup {
				return false
			}
			continue
		}
		if st.Setup {
			t.Logf("%s:%d: setup %s: ok", st.File, seg.Line, oneLine(seg.Script))
			continue
		}
		if err := Match(norm, seg.Expect, out, seg.JSON); err != nil {
			src := "shows no output"
			if seg.Expect != "" {
				src = fmt.Sprintf("shows at line %d", seg.ExpectLine)
			}
			t.Errorf("%s:%d: %s: the output is not what the doc %s:\n%v\noutput:\n%s", st.File, seg.Line, oneLine(seg.Script), src, err, tail(out, 60))
			continue
		}
		if seg.Expect == "" {
			t.Logf("%s:%d: %s: no output, as shown", st.File, seg.Line, oneLine(seg.Script))
		} else {
			t.Logf("%s:%d: %s: %d lines as shown at line %d", st.File, seg.Line, oneLine(seg.Script), strings.Count(tidy(out), "\n")+1, seg.ExpectLine)
		}
	}
	return true
}

// oneLine is a script's first command line, for the log.
func oneLine(script string) string {
	for _, l := range strings.Split(script, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return "`" + clip(l, 90) + "`"
		}
	}
	return "(comments)"
}

func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = append([]string{fmt.Sprintf("[%d lines before]", len(ls)-n)}, ls[len(ls)-n:]...)
	}
	return strings.Join(ls, "\n")
}

// shell is one bash process, its own process group, that sources each
// segment from a file and reports its exit status on descriptor 3.
type shell struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	done chan string // exit statuses written on fd 3
	dir  string      // where segments and their outputs go
	n    int
	log  *bytes.Buffer // bash's own stderr and stdout
}

func startShell(t *testing.T, tree string, env []string) (*shell, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	sh := &shell{dir: t.TempDir(), done: make(chan string, 1), log: &bytes.Buffer{}}
	sh.cmd = command(tree, env, "bash", "--noprofile", "--norc")
	sh.cmd.ExtraFiles = []*os.File{w}
	sh.cmd.Stdout, sh.cmd.Stderr = sh.log, sh.log
	sh.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if sh.in, err = sh.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := sh.cmd.Start(); err != nil {
		return nil, err
	}
	w.Close()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			sh.done <- sc.Text()
		}
		close(sh.done)
		r.Close()
	}()
	return sh, nil
}

func (sh *shell) script(s string) (string, error) {
	sh.n++
	f := filepath.Join(sh.dir, fmt.Sprintf("seg-%d", sh.n))
	return f, os.WriteFile(f+".sh", []byte(s+"\n"), 0o600)
}

// run sources script in the session's shell, its stdin /dev/null and its
// stdout and stderr into one file, and returns that file and the exit
// status.
func (sh *shell) run(script string, timeout time.Duration) (string, int, error) {
	f, err := sh.script(script)
	if err != nil {
		return "", 0, err
	}
	fmt.Fprintf(sh.in, ". %s </dev/null >%s 2>&1; echo \"$?\" >&3\n", shq(f+".sh"), shq(f+".out"))
	st, err := sh.wait(timeout)
	out, _ := os.ReadFile(f + ".out")
	if err != nil {
		return string(out), 0, err
	}
	n, err := strconv.Atoi(st)
	return string(out), n, err
}

// background starts script in the background and waits until it has
// printed lines lines on stdout; it returns stdout and stderr so far.
func (sh *shell) background(script string, lines int, timeout time.Duration) (string, string, error) {
	f, err := sh.script(script)
	if err != nil {
		return "", "", err
	}
	fmt.Fprintf(sh.in, ". %s </dev/null >%s 2>%s & echo \"$!\" >&3\n", shq(f+".sh"), shq(f+".out"), shq(f+".err"))
	st, err := sh.wait(10 * time.Second)
	if err != nil {
		return "", "", err
	}
	pid, err := strconv.Atoi(st)
	if err != nil {
		return "", "", err
	}
	deadline := time.Now().Add(timeout)
	for {
		out, _ := os.ReadFile(f + ".out")
		errOut, _ := os.ReadFile(f + ".err")
		if bytes.Count(out, []byte("\n")) >= lines {
			return string(out), string(errOut), nil
		}
		if syscall.Kill(pid, 0) != nil {
			return string(out), string(errOut), errors.New("it ended before printing what the docs show")
		}
		if time.Now().After(deadline) {
			return string(out), string(errOut), fmt.Errorf("it printed %d of %d lines within %s", bytes.Count(out, []byte("\n")), lines, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (sh *shell) wait(timeout time.Duration) (string, error) {
	select {
	case st, ok := <-sh.done:
		if !ok {
			return "", fmt.Errorf("the shell ended (its own output: %q)", tail(sh.log.String(), 10))
		}
		return st, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("not done within %s", timeout)
	}
}

// stop ends the session: SIGTERM to its process group (the shell and
// every process it started, nodes included, which then shut down as
// documented), SIGKILL to what is left after 20 s.
func (sh *shell) stop(t *testing.T) {
	pgid := sh.cmd.Process.Pid
	sh.in.Close()
	syscall.Kill(-pgid, syscall.SIGTERM)
	go sh.cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			t.Logf("the session's processes outlived SIGTERM by 20 s: killed")
			syscall.Kill(-pgid, syscall.SIGKILL)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
