package node

import "time"

// LoseLeaseForTest does what the node does when it loses its lease for a
// moment (onLeaseLost: every session actor stops, to be rebuilt from the
// log on its next use), without losing it.
func (n *Node) LoseLeaseForTest() { n.fleet.onLeaseLost() }

// WorkspaceHandles reports, for tests, how many workspace handles the node
// holds open (workspace.Cache.Len).
func (n *Node) WorkspaceHandles() int {
	h, _ := n.ws.cache.Len()
	return h
}

// WorkspaceHandlesKept is, for tests, how many unused workspace handles a
// node keeps open (workspaceHandles).
func WorkspaceHandlesKept() int { return workspaceHandles() }

// SnapshotTips reports, for tests, how many sessions' snapshot tips the
// node's log holds (natslog.Log.CachedTips).
func (n *Node) SnapshotTips() int { return n.store.log.CachedTips() }

// CheckpointEventsHeld reports, for tests, how many sessions' heads the
// checkpointer holds with their last event.
func (n *Node) CheckpointEventsHeld() int {
	n.checkpoints.mu.Lock()
	defer n.checkpoints.mu.Unlock()
	held := 0
	for _, h := range n.checkpoints.heads {
		if h.last.ID != "" {
			held++
		}
	}
	return held
}

// SetUnopenedAfter sets, for a test, how old an unopened session's index
// entry must be for a node starting to remove it; the returned func puts
// the default back.
func SetUnopenedAfter(d time.Duration) (restore func()) {
	old := unopenedAfter
	unopenedAfter = d
	return func() { unopenedAfter = old }
}
