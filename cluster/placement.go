package cluster

import (
	"crypto/sha256"
	"encoding/binary"
)

// Owner is a session's owner as its log records it.
type Owner struct {
	// Node is the owner's name; empty for a session never owned.
	Node string
	// Released: the owner handed the session over.
	Released bool
	// WorkspaceNode keeps the session's workspace; empty when the fleet
	// shares one workspace root.
	WorkspaceNode string
}

// Decision is where a session goes, for one node asking.
type Decision struct {
	// Take: the asking node should own the session (take it, or keep it).
	Take bool
	// Holder, when not Take, is the node that serves the session; empty
	// when no node can now (the asking node may not act).
	Holder string
	// WorkspaceAway, when Take, names the node that keeps the session's
	// workspace if the asking node does not.
	WorkspaceAway string
}

// View is what a node knows of the fleet when it places a session.
type View struct {
	// Self is the asking node; SelfAlive whether it holds its lease.
	Self      string
	SelfAlive bool
	// Alive reports whether a node's lease is alive.
	Alive func(node string) bool
	// Shared: every node reaches every workspace.
	Shared bool
}

// Place decides whether the asking node should own a session
// (docs/spec.md §7). It is pure. In order:
//
//   - a node that may not act (no lease) takes nothing;
//   - ownership is sticky: a live owner other than the asking node keeps
//     the session, unless it released it;
//   - without shared workspaces, the node that keeps a session's workspace
//     is where it belongs while that node is alive: another node takes it
//     only when it is lost (and then without the workspace);
//   - otherwise the asking node takes it: the session has no owner, its
//     owner was lost or released it, or the owner is the asking node's name
//     in an earlier process.
//
// Which live node should take a lost node's session is Rendezvous's
// answer; Place only says whether the asking node may.
func Place(v View, cur Owner) Decision {
	if !v.SelfAlive {
		return Decision{}
	}
	alive := func(n string) bool { return n == v.Self || (v.Alive != nil && v.Alive(n)) }
	if cur.Node != "" && cur.Node != v.Self && !cur.Released && alive(cur.Node) {
		return Decision{Holder: cur.Node}
	}
	ws := cur.WorkspaceNode
	if v.Shared || ws == "" || ws == v.Self {
		return Decision{Take: true}
	}
	if alive(ws) {
		return Decision{Holder: ws}
	}
	return Decision{Take: true, WorkspaceAway: ws}
}

// Rendezvous picks, among nodes, the one that takes a session over
// (highest random weight): every node with the same view picks the same
// one, and when a node is lost only its sessions move. Without shared
// workspaces a live workspace node always wins. It returns "" for no nodes.
func Rendezvous(tenant, session string, nodes []string, workspaceNode string, shared bool) string {
	if !shared && workspaceNode != "" {
		for _, n := range nodes {
			if n == workspaceNode {
				return n
			}
		}
	}
	best, bestW := "", uint64(0)
	for _, n := range nodes {
		h := sha256.Sum256([]byte(n + "\x00" + tenant + "\x00" + session))
		w := binary.BigEndian.Uint64(h[:8])
		if best == "" || w > bestW || (w == bestW && n < best) {
			best, bestW = n, w
		}
	}
	return best
}
