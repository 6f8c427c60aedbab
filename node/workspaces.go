package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/workspace"
)

// workspaces are the node's sessions' workspaces, under the workspace root:
// each session's calls share one verified handle on its workspace (a
// workspace.Cache keyed by tenant/session), checked at every call to still
// be what the session's workspace name leads to without a symbolic link
// (docs/security.md "Workspace"). A session's handle is dropped wherever the
// node changes the session or its directories itself: when its actor stops
// (passivated, retired, moved to another node, or the node stopping), when
// it is closed, after a rewind (the workspace and the ones nested in it),
// and when a workspace is created (a directory made where a handle's had
// been deleted). What a session's own processes do to a directory is seen
// by the per-call check. It is the actors' Workspaces; close closes the
// handles.
type workspaces struct {
	root string
	// owner, when it answers ok, names the uid and gid given to the
	// directories a new workspace of a tenant's makes
	// (Options.WorkspaceOwner).
	owner func(tenant string) (uid, gid int, ok bool)
	cache *workspace.Cache
	reg   *registry
}

var _ actors.Workspaces = (*workspaces)(nil)

// workspaceHandles is how many unused workspace handles the node keeps
// open: enough for every session whose actor is in memory (a stopped
// actor's handle is dropped), so that sessions calling in turn each find
// theirs, within a sixteenth of the file descriptor limit (two descriptors
// a handle: an eighth of the descriptors, the HTTP connections at most
// half), and never fewer than workspace.DefaultMaxIdle. Unused handles still
// close after workspace.DefaultIdleTimeout.
func workspaceHandles() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return workspace.DefaultMaxIdle
	}
	return int(max(min(rl.Cur/16, maxWorkspaceHandles), workspace.DefaultMaxIdle))
}

// maxWorkspaceHandles bounds workspaceHandles whatever the descriptor limit.
const maxWorkspaceHandles = 1 << 16

// tenantRoot is the directory under which tenant's workspaces live:
// ROOT/TENANT, apart from every other tenant's (docs/spec.md §10).
func (w *workspaces) tenantRoot(tenant string) string {
	return filepath.Join(w.root, tenant)
}

// open opens the workspace name of tenant afresh (verified: no component
// may be a symbolic link, docs/security.md "Workspace"), unshared; with
// create, its missing directories are made first and given the owner, and
// every handle on the name is dropped. The caller closes the Dir. The error
// wraps ErrInvalid for a name that is refused, with the
// *workspace.NameError saying why.
func (w *workspaces) open(tenant, name string, create bool) (*workspace.Dir, error) {
	var (
		d   *workspace.Dir
		err error
	)
	if create {
		var owner *workspace.Owner
		if w.owner != nil {
			if uid, gid, ok := w.owner(tenant); ok {
				owner = &workspace.Owner{UID: uid, GID: gid}
			}
		}
		d, err = workspace.Create(w.tenantRoot(tenant), name, owner)
		w.cache.Forget(w.tenantRoot(tenant), name)
	} else {
		d, err = workspace.Open(w.tenantRoot(tenant), name)
	}
	return d, workspaceErr(err)
}

// dropUnopened removes the workspace an opening that failed made for its
// session: only a directory named after the session itself (the default,
// which no caller could have named before the session's id existed), and
// only while it is empty (rmdir, through the tenant's root: nothing ran in
// it). A workspace the caller named may be another session's, and stays.
func (w *workspaces) dropUnopened(tenant, session, name string) error {
	if name != session {
		return nil
	}
	root, err := os.OpenRoot(w.tenantRoot(tenant))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer root.Close()
	w.cache.Forget(w.tenantRoot(tenant), name)
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// workspaceErr words a workspace that cannot be opened: ErrInvalid for a
// name that is refused, with the *workspace.NameError saying why.
func workspaceErr(err error) error {
	if err == nil {
		return nil // before errors.As, whose target would escape: every call comes here
	}
	var ne *workspace.NameError
	if errors.As(err, &ne) && !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

// Workspace gives a session's workspace for one call or rewind: a lease of
// the session's shared handle, verified when it was opened and checked
// again now (workspace.Cache.Open). The caller closes it, which releases
// the lease. A *workspace.NameError says the workspace cannot be used now
// (actors.Workspaces).
func (w *workspaces) Workspace(tenant, session string) (*workspace.Dir, error) {
	rec, err := w.reg.record(context.Background(), tenant, session)
	if err != nil {
		return nil, err
	}
	d, err := w.cache.Open(key(tenant, session), w.tenantRoot(tenant), rec.Workspace)
	return d, workspaceErr(err)
}

// drop drops a session's handle (key is tenant/session); its descriptor
// closes with its last lease.
func (w *workspaces) drop(key string) { w.cache.Drop(key) }

// forget drops the handles on a session's workspace and on those nested in
// it, after the node changed its files itself (a rewind), so the next call
// of each verifies it afresh.
func (w *workspaces) forget(tenant, session string) {
	w.cache.Drop(key(tenant, session))
	if rec, err := w.reg.record(context.Background(), tenant, session); err == nil {
		w.cache.Forget(w.tenantRoot(tenant), rec.Workspace)
	}
}
