package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/callsheet/callsheet/tool"
)

// editArgs are the edit tool's arguments.
type editArgs struct {
	Path       string `json:"path" jsonschema:"the file to edit, relative to the workspace (an absolute path inside the workspace works too)"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace, including whitespace and indentation; it must occur exactly once unless replace_all is set"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place (empty deletes it); it must differ from old_string"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence of old_string, not just one (default false)" default:"false"`
}

// EditTool returns the edit tool, which replaces an exact string in one file:
// side_effecting, never, exclusive; its mutated path is the file it edits.
// It is a registered slot outside the default surface (docs/spec.md §5). The error is
// a *tool.RegistrationError only a broken build produces. Each call builds a
// new tool; it is safe for concurrent use.
func EditTool() (*tool.Tool, error) {
	return tool.New("edit",
		"Replace an exact string in a file with another. old_string must occur exactly once in the file "+
			"(include enough surrounding lines to make it unique), or set replace_all to replace every occurrence. "+
			"The write is atomic and keeps the file's permissions.",
		runEdit,
		tool.WithShortDescription("Replace an exact string in a file."),
		tool.WithGuidelines(
			"Use edit for a small change to one file: read the file first and copy old_string exactly, indentation included.",
			"If old_string occurs more than once, add surrounding lines until it is unique, or set replace_all to change every occurrence (for a rename).",
		),
		tool.WithSnippet(`{"path": "src/config.go", "old_string": "timeout := 30", "new_string": "timeout := 60"}`),
		tool.WithDeclarations(tool.Declarations{
			Effect:      tool.EffectSideEffecting,
			Replay:      tool.ReplayNever,
			Concurrency: tool.ConcurrencyExclusive,
		}),
		tool.WithMutatedPaths(func(a editArgs) []string { return cleanPaths(a.Path) }),
	)
}

// runEdit is the edit tool's function.
func runEdit(ctx context.Context, a editArgs) (tool.Result, error) {
	ws, err := workspaceFrom(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	switch {
	case a.OldString == "":
		return tool.Result{}, errors.New("edit: old_string is empty; give the exact text to replace (use write to create a file)")
	case a.OldString == a.NewString:
		return tool.Result{}, errors.New("edit: old_string and new_string are the same, so the edit would change nothing")
	}
	// Like write, edit writes through a link inside the workspace.
	rel, target, err := ws.Resolve(a.Path)
	if err != nil {
		return tool.Result{}, fmt.Errorf("edit: %w", err)
	}
	data, mode, err := readForPatch(ws, "edit", target, rel, false, true)
	if err != nil {
		return tool.Result{}, err
	}
	text := string(data)
	old, repl := a.OldString, a.NewString
	n := strings.Count(text, old)
	if n == 0 && strings.Contains(text, "\r\n") && !strings.Contains(old, "\r\n") && strings.Contains(old, "\n") {
		// A CRLF file, and a model that wrote "\n": match its lines.
		old = strings.ReplaceAll(old, "\n", "\r\n")
		repl = strings.ReplaceAll(strings.ReplaceAll(repl, "\r\n", "\n"), "\n", "\r\n")
		n = strings.Count(text, old)
	}
	switch {
	case n == 0:
		return tool.Result{}, fmt.Errorf("edit %s: old_string does not occur in the file; read the file and copy the text exactly, whitespace and indentation included", rel)
	case n > 1 && !a.ReplaceAll:
		return tool.Result{}, fmt.Errorf("edit %s: old_string occurs %d times; include more surrounding text to make it unique, or set replace_all to replace all %d", rel, n, n)
	}
	var out string
	if a.ReplaceAll {
		out = strings.ReplaceAll(text, old, repl)
	} else {
		out = strings.Replace(text, old, repl, 1)
	}
	if err := ws.WriteFile(target, []byte(out), mode); err != nil {
		return tool.Result{}, fileError("edit", rel, err)
	}
	noun := "occurrence"
	if n > 1 {
		noun += "s"
	}
	return tool.Text(fmt.Sprintf("edited %s: replaced %d %s (%d bytes, was %d)", rel, n, noun, len(out), len(data))), nil
}
