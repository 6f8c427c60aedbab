package node

// WorkspaceHandles reports, for tests, how many workspace handles the node
// holds open (workspace.Cache.Len).
func (n *Node) WorkspaceHandles() int {
	h, _ := n.workspaces.Len()
	return h
}
