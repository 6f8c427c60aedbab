package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/callsheet/callsheet/workspace"
)

// The node's workspaces: each session's calls share one verified handle on
// its workspace (n.workspaces, a workspace.Cache keyed by tenant/session),
// checked at every call to still be what the session's workspace name leads
// to without a symbolic link (docs/security.md "Workspace"). The node drops
// a session's handle wherever it changes the session or its directories
// itself: when the session's actor stops (passivated, retired, moved to
// another node, or the node stopping: route's stopped), when the session is
// closed, after a rewind (the workspace and the ones nested in it), and when
// a workspace is created (a directory made where a handle's had been
// deleted). What a session's own processes do to a directory is seen by the
// per-call check.

// openWorkspace opens the workspace name of tenant afresh (verified: no
// component may be a symbolic link, docs/security.md "Workspace"), unshared;
// with create, its missing directories are made first and given the
// WorkspaceOwner, and every handle on the name is dropped. The caller
// closes the Dir. The error wraps ErrInvalid for a name that is refused,
// with the *workspace.NameError saying why.
func (n *Node) openWorkspace(tenant, name string, create bool) (*workspace.Dir, error) {
	var (
		d   *workspace.Dir
		err error
	)
	if create {
		var owner *workspace.Owner
		if n.opts.WorkspaceOwner != nil {
			if uid, gid, ok := n.opts.WorkspaceOwner(tenant); ok {
				owner = &workspace.Owner{UID: uid, GID: gid}
			}
		}
		d, err = workspace.Create(n.tenantRoot(tenant), name, owner)
		n.workspaces.Forget(n.tenantRoot(tenant), name)
	} else {
		d, err = workspace.Open(n.tenantRoot(tenant), name)
	}
	return d, workspaceErr(err)
}

// workspaceErr words a workspace that cannot be opened: ErrInvalid for a
// name that is refused, with the *workspace.NameError saying why.
func workspaceErr(err error) error {
	var ne *workspace.NameError
	if errors.As(err, &ne) && !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

// workspaceOf gives a session's workspace for one call or rewind: a lease of
// the session's shared handle, verified when it was opened and checked again
// now (workspace.Cache.Open). The caller closes it, which releases the
// lease. A *workspace.NameError says the workspace cannot be used now
// (actors.Deps.Workspace).
func (n *Node) workspaceOf(tenant, session string) (*workspace.Dir, error) {
	rec, err := n.record(context.Background(), tenant, session)
	if err != nil {
		return nil, err
	}
	d, err := n.workspaces.Open(key(tenant, session), n.tenantRoot(tenant), rec.Workspace)
	return d, workspaceErr(err)
}

// forgetWorkspace drops the handles on a session's workspace and on those
// nested in it, after the node changed its files itself (a rewind), so the
// next call of each verifies it afresh.
func (n *Node) forgetWorkspace(tenant, session string) {
	n.workspaces.Drop(key(tenant, session))
	if rec, err := n.record(context.Background(), tenant, session); err == nil {
		n.workspaces.Forget(n.tenantRoot(tenant), rec.Workspace)
	}
}
