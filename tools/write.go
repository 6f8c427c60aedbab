package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/callsheet/callsheet/tool"
)

// newFileMode is the mode of a file write creates (the umask does not apply:
// the mode is set explicitly); a replaced file keeps its own permission bits.
// Directories write creates get 0755, less the umask (workspace.Dir.MkdirAll).
// Files and directories created are given the workspace's owner when the
// node runs as root (docs/security.md, "Workspace").
const newFileMode = 0o644

// writeArgs are the write tool's arguments.
type writeArgs struct {
	Path    string `json:"path" jsonschema:"the file to create or replace, relative to the workspace (an absolute path inside the workspace works too); missing parent directories are created"`
	Content string `json:"content" jsonschema:"the whole new content of the file"`
}

// newWrite builds the write tool: side_effecting, never, exclusive; its
// mutated path is the path it writes, so the runtime checkpoints the file's
// pre-image before the call runs.
func newWrite() (*tool.Tool, error) {
	return tool.New("write",
		"Create a file, or replace a whole file, with the given content. Missing parent directories are created. "+
			"The write is atomic: the file holds either its old content or the new one, never a mix.",
		runWrite,
		tool.WithShortDescription("Create or replace a whole file."),
		tool.WithGuidelines(
			"Use write to create a new file, or to deliberately replace all of a file; prefer apply_patch for edits to part of an existing file.",
			"Read a file before replacing it, so nothing you did not mean to drop is lost.",
		),
		tool.WithSnippet(`{"path": "notes/todo.md", "content": "- ship it\n"}`),
		tool.WithDeclarations(tool.Declarations{
			Effect:      tool.EffectSideEffecting,
			Replay:      tool.ReplayNever,
			Concurrency: tool.ConcurrencyExclusive,
		}),
		tool.WithMutatedPaths(func(a writeArgs) []string { return cleanPaths(a.Path) }),
	)
}

// runWrite is the write tool's function.
func runWrite(ctx context.Context, a writeArgs) (tool.Result, error) {
	ws, err := workspaceFrom(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	// An existing link inside the workspace (Resolve refuses one that
	// leads out) is written through: target is the file it leads to, so
	// the link survives and its target gets the content.
	rel, target, err := ws.Resolve(a.Path)
	if err != nil {
		return tool.Result{}, fmt.Errorf("write: %w", err)
	}
	if rel == "." {
		return tool.Result{}, fmt.Errorf("write %s: that is the workspace directory itself; give a file path", a.Path)
	}
	mode := fs.FileMode(newFileMode)
	verb := "created"
	switch fi, err := ws.Root().Stat(target); {
	case err == nil && fi.IsDir():
		return tool.Result{}, fmt.Errorf("write %s: it is a directory; give a file path", rel)
	case err == nil && !fi.Mode().IsRegular():
		return tool.Result{}, fmt.Errorf("write %s: not a regular file (%s)", rel, fi.Mode().Type())
	case err == nil:
		// Permission bits only: set-id bits do not survive new content,
		// as the kernel clears them when anyone but root writes a file.
		mode, verb = fi.Mode().Perm(), "replaced"
	case !errors.Is(err, fs.ErrNotExist):
		return tool.Result{}, fileError("write", rel, err)
	}
	if err := ws.MkdirAll(filepath.Dir(target)); err != nil {
		return tool.Result{}, fileError("write", rel, err)
	}
	if err := ws.WriteFile(target, []byte(a.Content), mode); err != nil {
		return tool.Result{}, fileError("write", rel, err)
	}
	return tool.Text(fmt.Sprintf("%s %s (%d bytes)", verb, rel, len(a.Content))), nil
}
