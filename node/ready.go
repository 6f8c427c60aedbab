package node

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ReadyTimeout bounds the JetStream round trip Ready makes.
const ReadyTimeout = 2 * time.Second

// Ready reports whether the node serves: it is not closing, its NATS
// connection is up, JetStream answers a request within ReadyTimeout, and in
// a fleet it holds its lease. The error says plainly why not; nil means
// ready. An operator's /readyz answers with it.
func (n *Node) Ready(ctx context.Context) error {
	if n.reg == nil || n.reg.isClosed() {
		return errors.New("the node is shutting down")
	}
	if n.store == nil || n.store.nc == nil {
		return errors.New("not connected to NATS yet")
	}
	if !n.store.nc.IsConnected() {
		return fmt.Errorf("not connected to NATS (connection %s)", n.store.nc.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	if _, err := n.store.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("JetStream does not answer: %v", err)
	}
	if n.fleet != nil && n.fleet.lease != nil {
		if err := n.fleet.lease.Check(); err != nil {
			return fmt.Errorf("this node does not hold its lease, so it may not act on its sessions: %v", err)
		}
	}
	return nil
}
