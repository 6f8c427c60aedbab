package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/callsheet/callsheet/tool"
)

// grepArgs are the grep tool's arguments.
type grepArgs struct {
	Pattern         string `json:"pattern" jsonschema:"the regular expression to search for (Rust regex syntax, as ripgrep uses: no look-around or backreferences); set literal to search for the text as is"`
	Path            string `json:"path,omitempty" jsonschema:"the file or directory to search, relative to the workspace (default: the workspace itself)" default:"."`
	Glob            string `json:"glob,omitempty" jsonschema:"only search files whose path matches this glob (.gitignore syntax, such as *.go or src/**/*.ts; a leading ! excludes); it filters the files found in a directory, not a file given as path"`
	CaseInsensitive bool   `json:"case_insensitive,omitempty" jsonschema:"match regardless of case"`
	Context         int    `json:"context,omitempty" jsonschema:"lines to show before and after each match (0 to 10, default 0)" minimum:"0" maximum:"10"`
	Limit           int    `json:"limit,omitempty" jsonschema:"the most matching lines to return (default 200, at most 2000)" default:"200" minimum:"1" maximum:"2000"`
	Literal         bool   `json:"literal,omitempty" jsonschema:"treat pattern as plain text, not a regular expression"`
}

// newGrep builds the grep tool bound to the rg binary at rg: read_only,
// safe, parallel_safe; its touched path is the file or directory searched.
func newGrep(rg string, o searchOptions) (*tool.Tool, error) {
	run := func(ctx context.Context, a grepArgs) (tool.Result, error) { return runGrep(ctx, rg, o, a) }
	return tool.New("grep",
		"Search file contents for a regular expression with ripgrep. Returns matching lines as path:line:text "+
			"(context lines as path-line-text, groups separated by --), sorted by path and line. Files ignored by .gitignore, "+
			"binary files and the .git directory are skipped; other hidden files are searched.",
		run,
		tool.WithShortDescription("Search file contents by regular expression."),
		tool.WithGuidelines(
			"Use grep to find where something is defined or used; use glob to find files by name.",
			"Narrow a search with path and glob (such as *.go) rather than raising limit; set literal when the pattern holds regex characters you mean as text.",
			"Ask for context lines to see the code around a match instead of reading the whole file.",
		),
		tool.WithSnippet(`{"pattern": "func (New|Open)\\w*\\(", "glob": "*.go", "context": 2}`),
		tool.WithDeclarations(searchDeclarations),
		tool.WithTouchedPaths(func(a grepArgs) []string {
			// The whole workspace is not a file worth recording.
			if p := cleanPaths(a.Path); len(p) == 1 && p[0] != "." {
				return p
			}
			return nil
		}),
	)
}

// runGrep is the grep tool's function. No match is a result saying so, not
// an error; a regex or glob rg refuses is an error wrapping
// ErrInvalidPattern.
func runGrep(ctx context.Context, rg string, o searchOptions, a grepArgs) (tool.Result, error) {
	call, err := callFrom(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	if a.Pattern == "" {
		return tool.Result{}, tool.Permanent(errors.New("grep: the pattern is empty; give a regular expression (or text with literal set)"))
	}
	if a.Path == "" {
		a.Path = "."
	}
	limit := a.Limit
	if limit <= 0 {
		limit = DefaultGrepLimit
	}
	limit = min(limit, MaxGrepLimit)
	ctxLines := min(max(a.Context, 0), MaxGrepContext)
	abs, rel, real, fi, err := processPath(ctx, "grep", a.Path)
	if err != nil {
		return tool.Result{}, err
	}

	// rg runs in the directory searched (for a file, its directory, naming
	// the file), so that a glob with a slash is relative to it and the
	// paths it prints need only dir in front.
	dir, relDir := abs, rel
	var target []string
	switch {
	case fi.IsDir():
	case fi.Mode().IsRegular():
		dir, relDir = filepath.Dir(abs), filepath.ToSlash(filepath.Dir(real))
		target = []string{"--", filepath.Base(abs)}
	default:
		return tool.Result{}, fmt.Errorf("grep %s: not a regular file (%s); grep searches files and directories", rel, fi.Mode().Type())
	}
	var filter string
	if a.Glob != "" {
		var cleanup func()
		if filter, cleanup, err = rgGlobFilter("grep", a.Glob); err != nil {
			return tool.Result{}, err
		}
		defer cleanup()
	}
	args := grepRgArgs(a, ctxLines, filter, target)
	confine, err := o.confine("grep", call.Tenant, call.Workspace, dir, filter)
	if err != nil {
		return tool.Result{}, err
	}
	if confine.box != nil {
		// Bind the directory the runtime verified, not the path.
		run, release, err := sandboxRun(ctx, call, confine.box)
		if err != nil {
			return tool.Result{}, fmt.Errorf("grep: %w", err)
		}
		defer release()
		confine.run.Workspace, confine.run.Opened = run.Workspace, run.Opened
	}

	var hits grepHits
	exit, err := runRg(ctx, rgRun{rg: rg, dir: dir, args: args, env: processEnv(call, nil), confine: confine}, func(r io.Reader) (bool, error) {
		var stop bool
		var derr error
		hits, stop, derr = decodeRgStream(r, grepLimits{matches: limit, context: ctxLines, bytes: MaxSearchOutput, maxLine: maxRgLine})
		return stop, derr
	})
	if err != nil {
		return tool.Result{}, err
	}
	if err := globError("grep", a.Glob, exit); err != nil {
		return tool.Result{}, err
	}
	if hits.matches == 0 && !exit.stopped && exit.code == 2 {
		return tool.Result{}, rgFailure("grep", a.Pattern, exit)
	}
	if hits.matches == 0 {
		return tool.Text(noMatchText(a, rel, hits)), nil
	}
	var b strings.Builder
	b.WriteString(formatGrep(hits.lines, relDir, ctxLines))
	b.WriteString(hits.cut)
	if hits.skipped > 0 {
		fmt.Fprintf(&b, "(%d lines longer than %d bytes were skipped)\n", hits.skipped, maxRgLine)
	}
	b.WriteString(rgNote(exit))
	return tool.Text(b.String()), nil
}

// grepRgArgs are the flags of the rg run for a: JSON output, the glob filter
// flag (from rgGlobFilter) when there is one, the pattern given with
// --regexp= so that one starting with "-" is not a flag, then target.
func grepRgArgs(a grepArgs, ctxLines int, filter string, target []string) []string {
	args := append(slices.Clone(rgCommonArgs), "--json")
	if a.CaseInsensitive {
		args = append(args, "--ignore-case")
	} else {
		args = append(args, "--case-sensitive")
	}
	if a.Literal {
		args = append(args, "--fixed-strings")
	}
	if ctxLines > 0 {
		args = append(args, "--context="+strconv.Itoa(ctxLines))
	}
	if filter != "" {
		args = append(args, filter)
	}
	args = append(args, rgExcludeGit, "--regexp="+a.Pattern)
	return append(args, target...)
}

// noMatchText is grep's result when nothing matched.
func noMatchText(a grepArgs, rel string, hits grepHits) string {
	where := "the workspace"
	if rel != "." {
		where = rel
	}
	kind := "regex"
	if a.Literal {
		kind = "text"
	}
	s := fmt.Sprintf("no matches for %s %q in %s", kind, a.Pattern, where)
	if a.Glob != "" {
		s += fmt.Sprintf(" (files matching %q)", a.Glob)
	}
	s += "; files ignored by .gitignore, binary files and the .git directory are not searched"
	if hits.skipped > 0 {
		s += fmt.Sprintf(" (%d lines longer than %d bytes were skipped)", hits.skipped, maxRgLine)
	}
	if hits.cut != "" {
		s += "\n" + hits.cut
	}
	return s
}
