package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// newFileMode is the mode of a file write creates (the umask does not apply:
// the mode is set explicitly); a replaced file keeps its own permission bits.
// Directories write creates get newDirMode, less the umask.
const (
	newFileMode = 0o644
	newDirMode  = 0o755
)

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
	call, err := callFrom(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	abs, rel, err := workspace.Resolve(call.Workspace, a.Path)
	if err != nil {
		return tool.Result{}, err
	}
	if rel == "." {
		return tool.Result{}, fmt.Errorf("write %s: that is the workspace directory itself; give a file path", a.Path)
	}
	// An existing link inside the workspace (Resolve has checked where it
	// leads) is written through, so the link survives and its target gets
	// the content.
	target := abs
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		target = real
	}
	mode := fs.FileMode(newFileMode)
	verb := "created"
	switch fi, err := os.Stat(target); {
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
	if err := os.MkdirAll(filepath.Dir(target), newDirMode); err != nil {
		return tool.Result{}, fileError("write", rel, err)
	}
	if err := writeAtomic(target, []byte(a.Content), mode); err != nil {
		return tool.Result{}, fileError("write", rel, err)
	}
	return tool.Text(fmt.Sprintf("%s %s (%d bytes)", verb, rel, len(a.Content))), nil
}

// writeAtomic replaces path with data: it writes a temporary file in the same
// directory, syncs it, gives it mode, renames it over path and syncs the
// directory, so a reader (or a crash) sees the old content or the new, never
// a part. The temporary file is removed on failure.
func writeAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".callsheet-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// The rename is durable once the directory is synced. Failing to sync
	// it does not undo the write, so it is not reported.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
