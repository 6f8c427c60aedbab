package tools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/tool"
)

// RipgrepEnv names the environment variable FindRipgrep reads first: the path
// of the rg binary glob and grep drive. The Makefile sets it to what
// scripts/ensure-rg prints.
const RipgrepEnv = "CALLSHEET_RG"

// MinRipgrepMajor is the oldest ripgrep major version glob and grep accept
// (docs/spec.md §5): 14, whose --json output and --sort flag they rely on.
const MinRipgrepMajor = 14

// ripgrepInstallHint tells an operator how to get ripgrep 14+. Debian 12's
// apt has only 13, so the package manager is not the way there.
const ripgrepInstallHint = "install ripgrep 14 or newer: download a release (14.1.1) from " +
	"https://github.com/BurntSushi/ripgrep/releases, or run `cargo install ripgrep`, or in the callsheet " +
	"repository run scripts/ensure-rg (it fetches the static rg 14.1.1 bundled in the npm package " +
	"@anthropic-ai/claude-code@1.0.128); then put rg on PATH or set " + RipgrepEnv + " to its path " +
	"(Debian 12's apt has only ripgrep 13)"

// ErrRipgrepMissing is wrapped by the error FindRipgrep, RipgrepVersion and
// SearchTools return when there is no rg to run: none on PATH, or
// CALLSHEET_RG naming a file that does not exist or does not run.
var ErrRipgrepMissing = errors.New("tools: ripgrep (rg) not found")

// ErrRipgrepTooOld is wrapped by the error FindRipgrep, RipgrepVersion and
// SearchTools return for an rg older than MinRipgrepMajor, or one whose
// --version output does not say which version it is.
var ErrRipgrepTooOld = errors.New("tools: ripgrep is too old")

// ErrInvalidPattern is wrapped by the error glob and grep return when rg
// refuses the pattern: a regex that does not parse, or a glob that does not.
// The message carries rg's own explanation. It is permanent
// (tool.IsPermanent): the runtime does not retry the call.
var ErrInvalidPattern = tool.Permanent(errors.New("tools: invalid pattern"))

// Bounds of glob and grep. rg's output is read as a stream and never held
// whole: once a cap is reached rg is killed and the result says it was cut.
const (
	// MaxSearchOutput caps the bytes read from rg's standard output for one
	// call (8 MiB); rg is killed when it is reached.
	MaxSearchOutput = 8 << 20
	// DefaultGlobLimit and MaxGlobLimit bound how many paths glob returns.
	DefaultGlobLimit = 1000
	MaxGlobLimit     = 10000
	// DefaultGrepLimit and MaxGrepLimit bound how many matching lines grep
	// returns (context lines are not counted).
	DefaultGrepLimit = 200
	MaxGrepLimit     = 2000
	// MaxGrepContext is the most context lines grep shows around a match.
	MaxGrepContext = 10
	// MaxGrepLineBytes cuts a line grep shows (2,000 bytes); the rest is
	// replaced by a note saying how many bytes were cut.
	MaxGrepLineBytes = 2000

	// maxRgLine caps one line of rg output held in memory (1 MiB): a JSON
	// message for a longer line is skipped and counted.
	maxRgLine = 1 << 20
	// maxRgStderr caps rg's standard error held for an error message.
	maxRgStderr = 64 << 10
	// rgVersionTimeout bounds `rg --version`.
	rgVersionTimeout = 10 * time.Second
)

// FindRipgrep finds the rg binary glob and grep drive: the path in
// CALLSHEET_RG when it is set (nothing else is tried then, so a wrong setting
// is reported rather than silently replaced), else rg on PATH. It runs
// `rg --version` and returns the path and the version (such as "14.1.1").
//
// The error wraps ErrRipgrepMissing when there is no rg to run, and
// ErrRipgrepTooOld when it is older than MinRipgrepMajor; either message
// says how to install ripgrep 14. FindRipgrep is safe for concurrent use.
func FindRipgrep() (path string, version string, err error) {
	if p := os.Getenv(RipgrepEnv); p != "" {
		v, err := RipgrepVersion(p)
		if err != nil {
			return "", "", fmt.Errorf("%s=%s: %w", RipgrepEnv, p, err)
		}
		return p, v, nil
	}
	p, err := exec.LookPath("rg")
	if err != nil {
		return "", "", fmt.Errorf("%w: no rg on PATH and %s is not set; %s", ErrRipgrepMissing, RipgrepEnv, ripgrepInstallHint)
	}
	v, err := RipgrepVersion(p)
	if err != nil {
		return "", "", err
	}
	return p, v, nil
}

// RipgrepVersion runs `rg --version` with the binary at path and returns its
// version when it is at least MinRipgrepMajor. The error wraps
// ErrRipgrepMissing when path does not run, and ErrRipgrepTooOld when the
// version is older or cannot be read. It is safe for concurrent use.
func RipgrepVersion(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%w: the rg path is empty; %s", ErrRipgrepMissing, ripgrepInstallHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), rgVersionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = []string{"PATH=" + fallbackPath, "LANG=C.UTF-8"}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s --version: %v; %s", ErrRipgrepMissing, path, err, ripgrepInstallHint)
	}
	v, major, ok := parseRipgrepVersion(out)
	switch {
	case !ok:
		first, _, _ := strings.Cut(string(out), "\n")
		return "", fmt.Errorf("%w: %s --version printed %q, not \"ripgrep X.Y.Z\"; %s", ErrRipgrepTooOld, path, first, ripgrepInstallHint)
	case major < MinRipgrepMajor:
		return "", fmt.Errorf("%w: %s is ripgrep %s, glob and grep need %d or newer; %s", ErrRipgrepTooOld, path, v, MinRipgrepMajor, ripgrepInstallHint)
	}
	return v, nil
}

// parseRipgrepVersion reads the first line of `rg --version`, "ripgrep
// 14.1.1 (rev 4649aa9700)", and returns "14.1.1" and 14.
func parseRipgrepVersion(out []byte) (version string, major int, ok bool) {
	first, _, _ := bytes.Cut(out, []byte{'\n'})
	fields := strings.Fields(string(first))
	if len(fields) < 2 || fields[0] != "ripgrep" {
		return "", 0, false
	}
	version = fields[1]
	m, _, _ := strings.Cut(version, ".")
	major, err := strconv.Atoi(m)
	if err != nil {
		return "", 0, false
	}
	return version, major, true
}

// SearchTools returns the glob and grep tools, in that order, bound to the
// rg binary at rgPath (as FindRipgrep returns it). Both are read_only, safe
// and parallel_safe. SearchTools runs `rg --version` to check rgPath and
// returns an error wrapping ErrRipgrepMissing or ErrRipgrepTooOld when it is
// not ripgrep 14+; a *tool.RegistrationError only a broken build produces.
// Each call builds new tools; they are safe for concurrent use.
func SearchTools(rgPath string, opts ...RipgrepOption) ([]*tool.Tool, error) {
	if _, err := RipgrepVersion(rgPath); err != nil {
		return nil, err
	}
	var o searchOptions
	for _, opt := range opts {
		opt(&o)
	}
	glob, err := newGlob(rgPath, o)
	if err != nil {
		return nil, err
	}
	grep, err := newGrep(rgPath, o)
	if err != nil {
		return nil, err
	}
	return []*tool.Tool{glob, grep}, nil
}

// RipgrepOption configures SearchTools.
type RipgrepOption func(*searchOptions)

type searchOptions struct {
	unconfined bool
	box        *sandbox.Sandbox
}

// RipgrepUnconfined lets glob and grep run rg unconfined on a kernel
// without Landlock where no sandbox can run it either (the config's
// accept_weaker "landlock"); without it they refuse there. Where Landlock
// is available rg is always confined by it.
func RipgrepUnconfined() RipgrepOption { return func(o *searchOptions) { o.unconfined = true } }

// RipgrepSandbox runs rg in box on a kernel without Landlock: its mount view
// holds the workspace only, so a walk led out of it finds nothing. It costs
// a sandbox per search, which Landlock, where the kernel has it, does not.
func RipgrepSandbox(box *sandbox.Sandbox) RipgrepOption {
	return func(o *searchOptions) { o.box = box }
}

// confine decides how an rg run for tenant in workspace (with the glob
// filter file, if any, and dir as its working directory) is confined, or
// refuses it.
func (o searchOptions) confine(toolName, tenant, workspace, dir, filterFlag string) (rgConfinement, error) {
	var files []string
	if f, ok := strings.CutPrefix(filterFlag, "--ignore-file="); ok {
		files = append(files, f)
	}
	switch {
	case searchLandlock():
		return rgConfinement{read: append([]string{workspace}, files...)}, nil
	case o.box != nil && boxReady(o.box) == nil:
		return rgConfinement{box: o.box, run: sandbox.Run{Tenant: tenant, Workspace: workspace, Dir: dir, ReadOnly: files}}, nil
	case o.unconfined:
		return rgConfinement{}, nil
	}
	return rgConfinement{}, errRipgrepUnconfined(toolName)
}

// searchDeclarations are glob's and grep's: they only read, may be retried,
// and may overlap any other read-only call.
var searchDeclarations = tool.Declarations{
	Effect:      tool.EffectReadOnly,
	Replay:      tool.ReplaySafe,
	Concurrency: tool.ConcurrencyParallelSafe,
}

// rgCommonArgs are the flags every rg run starts with: no config file (an
// operator's RIPGREP_CONFIG_PATH must not change what the model sees), hidden
// files included (rgExcludeGit keeps .git out), the tree's .gitignore, .ignore
// and .rgignore honoured even outside a git repository but no global git
// excludes (so the answer depends on the workspace alone), and output sorted
// by path so that a cut result is the same prefix every time. Sorting makes
// rg walk with one thread; stable answers are worth it.
var rgCommonArgs = []string{
	"--no-config",
	"--hidden",
	"--no-require-git",
	"--no-ignore-global",
	"--sort=path",
	"--color=never",
}

// rgExcludeGit keeps the .git directory out of every search. It is an
// override glob, which takes precedence over every ignore file.
const rgExcludeGit = "--glob=!.git"

// rgGlobFilter returns the rg flag that keeps only the files matching the
// user's glob, and a function that removes the file it writes.
//
// rg's own --glob is an override: a file it matches is listed even when a
// .gitignore ignores it, and "**" or "*" match ignored directories too, so
// glob "**/*.js" would list node_modules. The user's glob goes instead into
// an ignore file given with --ignore-file, which rg consults after .rgignore,
// .ignore and .gitignore. Its lines are "*" (ignore every file), "!*/" (but
// walk every directory) and "!PATTERN" (and keep the files PATTERN matches);
// for "!PATTERN", the line PATTERN alone (keep every file but those). The
// ignore files of the tree decide first, so what they ignore stays ignored;
// the one difference from rg's --glob is that a file an ignore file
// re-includes with a "!" line of its own is decided there and listed whatever
// the pattern. Patterns in the file are relative to the directory rg runs in,
// like --glob's. A pattern holding a line break or NUL, which the file cannot
// express, is refused with ErrInvalidPattern.
func rgGlobFilter(toolName, pattern string) (flag string, cleanup func(), err error) {
	if strings.ContainsAny(pattern, "\n\r\x00") {
		return "", nil, fmt.Errorf("%w: %s: the glob %q holds a line break or NUL byte", ErrInvalidPattern, toolName, pattern)
	}
	var rules string
	if neg, ok := strings.CutPrefix(pattern, "!"); ok {
		rules = escapeIgnoreLine(neg) + "\n"
	} else {
		rules = "*\n!*/\n!" + pattern + "\n"
	}
	f, err := os.CreateTemp("", "callsheet-glob-*.ignore")
	if err != nil {
		return "", nil, fmt.Errorf("%s: glob filter file: %w", toolName, err)
	}
	cleanup = func() { os.Remove(f.Name()) }
	_, err = f.WriteString(rules)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("%s: glob filter file: %w", toolName, err)
	}
	return "--ignore-file=" + f.Name(), cleanup, nil
}

// escapeIgnoreLine keeps a pattern that starts with "#" (a comment in an
// ignore file) or "!" (a negation) a pattern.
func escapeIgnoreLine(p string) string {
	if strings.HasPrefix(p, "#") || strings.HasPrefix(p, "!") {
		return "\\" + p
	}
	return p
}

// rgRun is one rg invocation.
type rgRun struct {
	rg   string
	dir  string
	args []string
	env  []string
	// confine says how rg is kept to the workspace; see runRg.
	confine rgConfinement
}

// rgConfinement is how one rg run is kept to the workspace: by Landlock
// (read set), or, on a kernel without it, in the sandbox (box set), or not
// at all (neither: accepted by the config).
type rgConfinement struct {
	// read are the only paths rg may read (the workspace, the glob filter
	// file), besides itself and the shared libraries.
	read []string
	// box runs rg in the sandbox, with run (the workspace and the filter
	// file shown, rg's directory as its working directory).
	box *sandbox.Sandbox
	run sandbox.Run
}

// searchLandlock reports whether this kernel can confine rg (Landlock);
// tests replace it to play a kernel without.
var searchLandlock = func() bool { return sandbox.Probe().Available() }

// errRipgrepUnconfined refuses a search on a kernel without Landlock.
func errRipgrepUnconfined(toolName string) error {
	return fmt.Errorf("%s: nothing ran: %s confines rg's reads to the workspace with Landlock, and this kernel lacks it (%s), nor can the sandbox run it; "+
		"the node's operator can accept running it unconfined, where a command racing the search could lead rg out of the workspace, "+
		"with \"sandbox\": {\"accept_weaker\": [\"landlock\"]} in the config", toolName, toolName, sandbox.Probe().Reason)
}

// rgExit is how an rg run ended.
type rgExit struct {
	// code is rg's exit code: 0 found something, 1 found nothing, 2 an
	// error (possibly after finding something). It is meaningless when
	// stopped is true.
	code int
	// stopped says the consumer stopped reading and rg was killed.
	stopped bool
	// stderr is the start of rg's standard error.
	stderr string
}

// runRg runs r in its own process group and hands its standard output to
// consume, which reads it as a stream and returns stop=true to end the run
// early (a cap was reached). rg's whole group is then killed with SIGKILL, as
// it is when ctx is cancelled, and runRg waits for it.
//
// The error is ctx.Err() for a cancelled call (never turned into a result),
// one wrapping ErrTimeout for an expired deadline, and otherwise an error
// from starting rg or from consume.
//
// rg walks directories by path, so a directory a command swaps for a
// symlink while rg walks could lead it anywhere. With r.confine.read set,
// rg starts under Landlock (sandbox.StartConfined) with reading (and
// executing) confined to those paths, its own binary and the shared
// libraries: a walk led outside the workspace finds nothing it may open
// (docs/security.md "Sandbox").
// With r.confine.box set (a kernel without Landlock) it runs in the
// sandbox, where nothing but the workspace is there to be led to.
func runRg(ctx context.Context, r rgRun, consume func(io.Reader) (stop bool, err error)) (rgExit, error) {
	cmd := exec.CommandContext(ctx, r.rg, r.args...)
	cmd.Dir = r.dir
	cmd.Env = r.env
	start := cmd.Start
	if r.confine.read != nil {
		read := append(slices.Clone(r.confine.read), r.rg)
		start = func() error { return sandbox.StartConfined(cmd, sandbox.Spec{Read: read}) }
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = waitDelay
	stderr := &capBuffer{limit: maxRgStderr}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return rgExit{}, fmt.Errorf("tools: rg output pipe: %w", err)
	}
	var boxed *sandbox.Attached
	if c := r.confine; c.box != nil {
		run := c.run
		run.ReadOnly = append(slices.Clone(run.ReadOnly), r.rg)
		if boxed, err = c.box.Attach(cmd, run); err != nil {
			return rgExit{}, fmt.Errorf("tools: confine rg: %w", err)
		}
	}
	if err := start(); err != nil {
		if boxed != nil {
			boxed.Finish()
		}
		if ctx.Err() != nil {
			return rgExit{}, ctxError(ctx)
		}
		if errors.Is(err, sandbox.ErrConfine) || errors.Is(err, sandbox.ErrUnavailable) {
			return rgExit{}, fmt.Errorf("tools: confine rg: %w", err)
		}
		return rgExit{}, fmt.Errorf("tools: start rg (%s): %w; %s", r.rg, err, ripgrepInstallHint)
	}
	if boxed != nil {
		boxed.Started()
	}
	stop, cerr := consume(stdout)
	if stop || cerr != nil {
		_ = killGroup(cmd.Process.Pid)
	}
	waitErr := cmd.Wait()
	// rg starts no children, but a kill of the group costs nothing and
	// leaves nothing behind whatever rg does.
	_ = killGroup(cmd.Process.Pid)
	var setupErr error
	if boxed != nil {
		setupErr = boxed.Finish()
	}
	if ctx.Err() != nil {
		return rgExit{}, ctxError(ctx)
	}
	if setupErr != nil {
		return rgExit{}, fmt.Errorf("tools: rg did not run: %w", setupErr)
	}
	if cerr != nil {
		return rgExit{}, cerr
	}
	exit := rgExit{stopped: stop, stderr: strings.TrimSpace(strings.ToValidUTF8(string(stderr.Bytes()), "\uFFFD"))}
	if cmd.ProcessState == nil {
		return exit, fmt.Errorf("tools: wait for rg: %w", waitErr)
	}
	exit.code = cmd.ProcessState.ExitCode()
	return exit, nil
}

// rgFailure turns an rg run that exited with an error and produced nothing
// usable into the error the model sees: an invalid regex wraps
// ErrInvalidPattern and quotes rg; anything else quotes rg's stderr.
func rgFailure(toolName, pattern string, exit rgExit) error {
	msg := exit.stderr
	if msg == "" {
		msg = "(no message)"
	}
	if strings.Contains(msg, "regex parse error") || strings.Contains(msg, "error parsing regex") ||
		strings.Contains(msg, "literal") && strings.Contains(msg, "not allowed") {
		return fmt.Errorf("%w: %s: the regex %q does not parse (rg uses Rust regex syntax; set literal to search for the text as is): %s", ErrInvalidPattern, toolName, pattern, msg)
	}
	return fmt.Errorf("%s: rg failed with exit code %d: %s", toolName, exit.code, msg)
}

// globError returns the error for a glob rg could not parse, or nil. rg
// reports a bad line of the filter file from rgGlobFilter on stderr
// ("FILE: line 3: error parsing glob '!a[': unclosed character class;
// missing ']'") and carries on as if it were absent, so the run's exit code
// says nothing; the message is reworded without the file.
func globError(toolName, glob string, exit rgExit) error {
	_, after, ok := strings.Cut(exit.stderr, "error parsing glob")
	if !ok {
		return nil
	}
	reason := strings.TrimSpace(after)
	if _, r, ok := strings.Cut(reason, "': "); ok {
		reason = r
	}
	reason, _, _ = strings.Cut(reason, "\n")
	return fmt.Errorf("%w: %s: the glob %q does not parse: %s", ErrInvalidPattern, toolName, glob, reason)
}

// rgNote is the note a result carries when rg reported errors (exit 2) but
// also found something: the results stand, and the model sees what rg said.
func rgNote(exit rgExit) string {
	if exit.stopped || exit.code != 2 || exit.stderr == "" {
		return ""
	}
	return "(rg reported errors; the results above may be incomplete: " + tail([]byte(exit.stderr), 1024) + ")\n"
}

// lineReader reads lines of rg output with bounds: a line longer than
// maxLine is discarded past that point and reported as long, and reading
// stops with errOverBudget once maxTotal bytes were read.
type lineReader struct {
	br       *bufio.Reader
	maxLine  int
	maxTotal int64
	total    int64
}

// errOverBudget ends a lineReader whose byte budget is spent.
var errOverBudget = errors.New("tools: output byte cap reached")

func newLineReader(r io.Reader, maxLine int, maxTotal int64) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), maxLine: maxLine, maxTotal: maxTotal}
}

// next returns the next line without its newline, and long=true when the
// line was cut at maxLine (its beginning is returned). At the end of input
// it returns io.EOF (after a last unterminated line, if any), and
// errOverBudget instead of a line that would pass the byte budget. The line
// is valid until the next call.
func (l *lineReader) next() (line []byte, long bool, err error) {
	var buf []byte
	seen := false
	for {
		if l.total >= l.maxTotal {
			if _, perr := l.br.Peek(1); perr == io.EOF && !seen {
				return nil, false, io.EOF
			}
			return nil, false, errOverBudget
		}
		chunk, err := l.br.ReadSlice('\n')
		seen = seen || len(chunk) > 0
		l.total += int64(len(chunk))
		if l.total > l.maxTotal {
			// This line runs past the budget: it is not returned.
			return nil, false, errOverBudget
		}
		chunk = bytes.TrimSuffix(chunk, []byte{'\n'})
		take := min(max(l.maxLine-len(buf), 0), len(chunk))
		buf = append(buf, chunk[:take]...)
		long = long || take < len(chunk)
		if err == bufio.ErrBufferFull {
			continue // a line longer than the buffer: read on
		}
		if err != nil && err != io.EOF {
			return nil, false, err
		}
		if !seen {
			return nil, false, io.EOF
		}
		if buf == nil {
			buf = []byte{}
		}
		return buf, long, nil
	}
}

// comparePaths orders slash-separated paths the way rg --sort path walks a
// tree: component by component, each compared as bytes. So "a/b" sorts
// before "a-c" (the directory "a" comes before the name "a-c"), which a
// plain string comparison would not do.
func comparePaths(a, b string) int {
	for {
		ah, at, aMore := strings.Cut(a, "/")
		bh, bt, bMore := strings.Cut(b, "/")
		if c := strings.Compare(ah, bh); c != 0 {
			return c
		}
		switch {
		case !aMore && !bMore:
			return 0
		case !aMore:
			return -1
		case !bMore:
			return 1
		}
		a, b = at, bt
	}
}

// joinRel prefixes a path rg printed, relative to the directory it ran in,
// with that directory's workspace-relative path.
func joinRel(dir, p string) string {
	p = strings.TrimPrefix(p, "./")
	if dir == "." || dir == "" {
		return p
	}
	return dir + "/" + p
}
