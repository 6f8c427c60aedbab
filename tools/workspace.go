package tools

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/callsheet/callsheet/workspace"
)

// workspaceFrom returns the workspace of the call ctx carries: the
// *workspace.Dir the runtime opened for it (verified, held open for the
// call). File tools reach files through it, never by path. The error is the
// context's, or ErrNoWorkspace.
func workspaceFrom(ctx context.Context) (*workspace.Dir, error) {
	if _, err := callFrom(ctx); err != nil {
		return nil, err
	}
	ws, ok := workspace.FromContext(ctx)
	if !ok {
		return nil, ErrNoWorkspace
	}
	return ws, nil
}

// processPath resolves a model's path for a tool that hands it to another
// process (rg), which can only take a path: every link along it is
// resolved through the workspace, refusing one that leads out, and abs is
// the result under the workspace's path, with what it is (fi). rel is the
// path to show, real the resolved workspace-relative one. Confining what
// the process then does is the sandbox's job (docs/security.md).
func processPath(ctx context.Context, op, p string) (abs, rel, real string, fi fs.FileInfo, err error) {
	ws, err := workspaceFrom(ctx)
	if err != nil {
		return "", "", "", nil, err
	}
	if rel, real, err = ws.Resolve(p); err != nil {
		return "", "", "", nil, fmt.Errorf("%s: %w", op, err)
	}
	if fi, err = ws.Root().Stat(real); err != nil {
		return "", "", "", nil, fileError(op, rel, err)
	}
	return filepath.Join(ws.Path(), real), rel, real, fi, nil
}
