package cluster

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// Question is what a node asks Route about a session.
type Question int

const (
	// Own: this node's actor of the session loaded its log, which names
	// another owner (or none): may this node take the session?
	Own Question = iota
	// Serve: a call for the session came to this node: does this node
	// serve it, or which node does?
	Serve
	// Adopt: should this node load the session now, unasked: at start, or
	// because its owner was lost or released it?
	Adopt
)

// Owner is a session's owner as the log (Own) or the owners index (Serve,
// Adopt) records it.
type Owner struct {
	// Node is the owner's name; empty for a session never owned.
	Node string
	// Released: the owner handed the session over.
	Released bool
	// WorkspaceNode keeps the session's workspace; empty when the fleet
	// shares one workspace root.
	WorkspaceNode string
}

// Session is the session a node asks about, and what it knows of it.
type Session struct {
	Tenant, ID string
	// Owner is its owner as recorded; Known says the owners index has an
	// entry for it (Serve, Adopt; the log always knows, for Own).
	Owner Owner
	Known bool
	// Here (Serve): the session's actor lives on the asking node, or the
	// call was forwarded to it: its actor answers, from the log.
	Here bool
	// Mine (Adopt): the owners index entry naming the asking node was
	// written by its own process (an ownership it released itself), not by
	// an earlier process of the same name.
	Mine bool
	// Lost (Adopt), when set, names a node that left the fleet a while
	// ago: the asking node takes the session if the index still gives it to
	// that node, whichever node the rendezvous picked (the backstop).
	Lost string
}

// View is what the asking node knows of the fleet.
type View struct {
	// Self is the asking node.
	Self string
	// Closing: the asking node is shutting down (it serves nothing new).
	Closing bool
	// Alive reports whether a node holds its lease (for Self: whether the
	// asking node may act).
	Alive func(node string) bool
	// Reachable reports whether a call can be forwarded to a node: its
	// lease is alive and it advertises its API. Nil: none can (Serve).
	Reachable func(node string) bool
	// Live lists the live nodes of the fleet; Route asks it only when it
	// needs them (a node shutting down or handing a session over, Adopt).
	Live func() []string
	// Shared: every node reaches every workspace.
	Shared bool
}

// live is a copy of the live nodes.
func (v View) live() []string {
	if v.Live == nil {
		return nil
	}
	return slices.Clone(v.Live())
}

// Decision is where a session goes, for the node that asked.
type Decision struct {
	// Here: the asking node serves the session (takes it, keeps it, loads
	// it).
	Here bool
	// Node, when not Here, is the node that serves it (Own, Serve); empty
	// when none can now.
	Node string
	// WorkspaceAway, when Here (Own), names the node that keeps the
	// session's workspace if the asking node does not.
	WorkspaceAway string
}

// Route decides who serves a session (docs/spec.md §7): the one place that
// decides it, for every question a node asks. It is pure. The rules, in
// order, for each question:
//
// Own (the log is the truth; the answer is acted on at once):
//   - a node that may not act (no lease, or shutting down) takes nothing;
//   - ownership is sticky: a live owner other than the asking node keeps
//     the session, unless it released it;
//   - without shared workspaces, the node that keeps a session's workspace
//     is where it belongs while that node is alive: another node takes it
//     only when it is lost (and then without the workspace);
//   - otherwise the asking node takes it: the session has no owner, its
//     owner was lost or released it, or the owner is the asking node's name
//     in an earlier process.
//
// Serve (the owners index is a hint; the actor that serves decides with the
// log, Own):
//   - a session whose actor is here, or a call forwarded here, is served
//     here, unless the asking node is shutting down or released the
//     session itself;
//   - a node that is shutting down, or released the session itself, sends
//     it to the node the rendezvous picks among the others, or serves it if
//     none is reachable;
//   - a live owner other than the asking node serves it;
//   - without shared workspaces, the node that keeps the workspace serves a
//     session whose owner released it or was lost;
//   - otherwise the asking node serves it.
//
// Adopt (eager, so that a lost owner's fence is in the log soon and its
// turns go on; the actor still decides with Own):
//   - a node that may not act adopts nothing;
//   - the backstop (Lost): a session the index still gives to that lost
//     node is adopted;
//   - a session the index gives to the asking node's name, written by an
//     earlier process, is adopted (its own, from before a restart);
//   - a session of a live owner that did not release it is not;
//   - otherwise the node the rendezvous picks among the live nodes, the
//     asking one included and a releasing owner excluded, adopts it.
func Route(q Question, v View, s Session) Decision {
	alive := func(n string) bool { return v.Alive != nil && v.Alive(n) }
	reachable := func(n string) bool { return n != "" && n != v.Self && v.Reachable != nil && v.Reachable(n) }
	own, ws := s.Owner, s.Owner.WorkspaceNode
	switch q {
	case Own:
		if v.Closing || !alive(v.Self) {
			return Decision{}
		}
		if own.Node != "" && own.Node != v.Self && !own.Released && alive(own.Node) {
			return Decision{Node: own.Node}
		}
		if v.Shared || ws == "" || ws == v.Self {
			return Decision{Here: true}
		}
		if alive(ws) {
			return Decision{Node: ws}
		}
		return Decision{Here: true, WorkspaceAway: ws}

	case Serve:
		releasedHere := s.Known && own.Released && own.Node == v.Self
		if s.Here && !v.Closing && !releasedHere {
			return Decision{Here: true}
		}
		if v.Closing || releasedHere {
			others := slices.DeleteFunc(v.live(), func(n string) bool { return n == v.Self })
			if to := rendezvous(s.Tenant, s.ID, others, ws, v.Shared); reachable(to) {
				return Decision{Node: to}
			}
			return Decision{Here: true}
		}
		if s.Known && !own.Released && own.Node != v.Self && reachable(own.Node) {
			return Decision{Node: own.Node}
		}
		if s.Known && !v.Shared && ws != "" && ws != v.Self && (own.Released || !alive(own.Node)) && reachable(ws) {
			return Decision{Node: ws}
		}
		return Decision{Here: true}

	case Adopt:
		if v.Closing || !alive(v.Self) {
			return Decision{}
		}
		if s.Lost != "" {
			return Decision{Here: s.Known && own.Node == s.Lost && !alive(s.Lost)}
		}
		if s.Known && own.Node == v.Self && !s.Mine {
			return Decision{Here: true}
		}
		if s.Known && own.Node != v.Self && !own.Released && alive(own.Node) {
			return Decision{}
		}
		nodes := v.live()
		if !slices.Contains(nodes, v.Self) {
			nodes = append(nodes, v.Self)
		}
		if own.Released && own.Node != "" && own.Node != v.Self {
			nodes = slices.DeleteFunc(nodes, func(n string) bool { return n == own.Node })
		}
		return Decision{Here: rendezvous(s.Tenant, s.ID, nodes, ws, v.Shared) == v.Self}
	}
	return Decision{}
}

// rendezvous picks, among nodes, the one that takes a session over
// (highest random weight): every node with the same view picks the same
// one, and when a node is lost only its sessions move. Without shared
// workspaces a live workspace node always wins. It returns "" for no nodes.
func rendezvous(tenant, session string, nodes []string, workspaceNode string, shared bool) string {
	if !shared && workspaceNode != "" && slices.Contains(nodes, workspaceNode) {
		return workspaceNode
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
