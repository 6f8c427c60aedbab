package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/callsheet/callsheet/tool"
)

// globArgs are the glob tool's arguments.
type globArgs struct {
	Pattern string `json:"pattern" jsonschema:"the glob files must match, in .gitignore syntax: * and ? stay within one path component, ** crosses directories, {a,b} is either; a pattern without a slash matches the file name at any depth (*.go finds every Go file), one with a slash is matched against the path relative to path; a leading ! excludes"`
	Path    string `json:"path,omitempty" jsonschema:"the directory to search, relative to the workspace (default: the workspace itself)" default:"."`
	Limit   int    `json:"limit,omitempty" jsonschema:"the most paths to return (default 1000, at most 10000)" default:"1000" minimum:"1" maximum:"10000"`
}

// newGlob builds the glob tool bound to the rg binary at rg: read_only,
// safe, parallel_safe.
func newGlob(rg string, o searchOptions) (*tool.Tool, error) {
	run := func(ctx context.Context, a globArgs) (tool.Result, error) { return runGlob(ctx, rg, o, a) }
	return tool.New("glob",
		"Find files by name pattern (\"**/*.go\", \"src/**/*_test.ts\", \"*.{yml,yaml}\") under a directory of the workspace, "+
			"with ripgrep. Returns workspace-relative paths, one per line, sorted by path. Files ignored by .gitignore, "+
			".ignore or .rgignore, and the .git directory, are skipped; other hidden files are included.",
		run,
		tool.WithShortDescription("Find files by glob pattern."),
		tool.WithGuidelines(
			"Use glob to find files by name or extension; use grep to find files by what they contain.",
			"A pattern without a slash matches the file name at any depth; add path to search one directory instead of the whole workspace.",
			"Files ignored by .gitignore are not listed; read or shell can still reach them when you know their path.",
		),
		tool.WithSnippet(`{"pattern": "**/*_test.go", "path": "internal"}`),
		tool.WithDeclarations(searchDeclarations),
	)
}

// runGlob is the glob tool's function. No match is a result saying so, not
// an error; a pattern rg refuses is an error wrapping ErrInvalidPattern.
func runGlob(ctx context.Context, rg string, o searchOptions, a globArgs) (tool.Result, error) {
	call, err := callFrom(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	if a.Pattern == "" {
		return tool.Result{}, tool.Permanent(errors.New("glob: the pattern is empty; give a glob such as **/*.go"))
	}
	if a.Path == "" {
		a.Path = "."
	}
	limit := a.Limit
	if limit <= 0 {
		limit = DefaultGlobLimit
	}
	limit = min(limit, MaxGlobLimit)
	abs, rel, _, fi, err := processPath(ctx, "glob", a.Path)
	if err != nil {
		return tool.Result{}, err
	}
	switch {
	case !fi.IsDir():
		return tool.Result{}, tool.Permanent(fmt.Errorf("glob %s: not a directory; give the directory to search in path", rel))
	}

	// rg runs in the directory searched, so that a pattern with a slash is
	// relative to it and the paths it prints need only rel in front.
	filter, cleanup, err := rgGlobFilter("glob", a.Pattern)
	if err != nil {
		return tool.Result{}, err
	}
	defer cleanup()
	args := append(slices.Clone(rgCommonArgs), "--files", filter, rgExcludeGit)
	confine, err := o.confine("glob", call.Tenant, call.Workspace, abs, filter)
	if err != nil {
		return tool.Result{}, err
	}
	if confine.box != nil {
		// Bind the directory the runtime verified, not the path.
		run, release, err := sandboxRun(ctx, call, confine.box)
		if err != nil {
			return tool.Result{}, fmt.Errorf("glob: %w", err)
		}
		defer release()
		confine.run.Workspace, confine.run.Opened = run.Workspace, run.Opened
	}
	var (
		paths []string
		cut   string
	)
	exit, err := runRg(ctx, rgRun{rg: rg, dir: abs, args: args, env: processEnv(call, nil), confine: confine}, func(r io.Reader) (bool, error) {
		var stop bool
		paths, cut, stop = decodeGlobPaths(r, rel, limit, MaxSearchOutput)
		return stop, nil
	})
	if err != nil {
		return tool.Result{}, err
	}
	if err := globError("glob", a.Pattern, exit); err != nil {
		return tool.Result{}, err
	}
	if len(paths) == 0 && !exit.stopped && exit.code == 2 {
		return tool.Result{}, rgFailure("glob", a.Pattern, exit)
	}
	if len(paths) == 0 {
		where := "the workspace"
		if rel != "." {
			where = rel
		}
		return tool.Text(fmt.Sprintf("no files match %q under %s (files ignored by .gitignore and the .git directory are not searched)", a.Pattern, where)), nil
	}
	var b strings.Builder
	for _, p := range paths {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	b.WriteString(cut)
	b.WriteString(rgNote(exit))
	return tool.Text(b.String()), nil
}

// decodeGlobPaths reads the paths rg --files prints, one a line, relative to
// the directory it ran in, and returns them workspace-relative (prefixed with
// dir) in path order. It stops, returning stop=true and a note in cut, at the
// limit-th path when more follow, or when maxBytes were read. A path that is
// not UTF-8 is shown with U+FFFD in place of its bad bytes.
func decodeGlobPaths(r io.Reader, dir string, limit int, maxBytes int64) (paths []string, cut string, stop bool) {
	lr := newLineReader(r, maxRgLine, maxBytes)
	skipped := 0
	for {
		line, long, err := lr.next()
		if errors.Is(err, errOverBudget) {
			cut = fmt.Sprintf("(stopped after %d bytes of paths; narrow the pattern or path)\n", maxBytes)
			stop = true
			break
		}
		if err != nil {
			break // io.EOF, or a broken pipe once rg is gone
		}
		if long {
			skipped++
			continue
		}
		if len(line) == 0 {
			continue
		}
		if len(paths) == limit {
			cut = fmt.Sprintf("(stopped at %d paths; more files match: narrow the pattern or path, or raise limit, at most %d)\n", limit, MaxGlobLimit)
			stop = true
			break
		}
		paths = append(paths, joinRel(dir, strings.ToValidUTF8(string(line), "\uFFFD")))
	}
	// rg --sort path already walks in this order; sorting again keeps the
	// promise whatever rg does, and costs nothing on sorted input.
	slices.SortStableFunc(paths, comparePaths)
	if skipped > 0 {
		cut += fmt.Sprintf("(%d paths longer than %d bytes were skipped)\n", skipped, maxRgLine)
	}
	return paths, cut, stop
}
