package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/sandbox"
)

// fleetCaps adapts cluster.Caps to the tool actors (actors.FleetCaps). A
// call with a timeout gets a lease with its slot (slotLease): once its tool
// hands it a process group, the slot lapses with this node's renewals, not
// at the call's deadline, and the fleet's reaper ends the group first.
type fleetCaps struct {
	c      *cluster.Caps
	node   string
	reaper *reaperCell
	logger *slog.Logger
}

func (a fleetCaps) Acquire(ctx context.Context, tenant, session string, r *events.ToolCallRequested) (actors.CapSlot, error) {
	var timeout time.Duration
	if r.TimeoutMS > 0 {
		timeout = time.Duration(r.TimeoutMS) * time.Millisecond
	}
	slot, err := a.c.Acquire(ctx, cluster.Scope(r.FleetCapScope, tenant), r.Name, r.FleetCap, timeout,
		cluster.Holder{Node: a.node, Tenant: tenant, Session: session, Call: r.Call, Attempt: r.Attempt})
	if err != nil {
		return actors.CapSlot{}, err
	}
	held := actors.CapSlot{Deadline: slot.Deadline(), Release: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = slot.Release(ctx) // a slot not released lapses by itself
	}}
	if !slot.Deadline().IsZero() && a.reaper != nil {
		held.Lease = &slotLease{slot: slot, reaper: a.reaper, logger: a.logger,
			until: slot.Until().Add(-cluster.BindMargin), groups: map[int]bool{}}
	}
	return held, nil
}

// slotLease holds a call's process groups to its slot (tool.Lease): each
// group the reaper kills at the latest moment the slot is sure to be held,
// moved on with every renewal of the bound slot (cluster.Slot.Bind).
type slotLease struct {
	slot   *cluster.Slot
	reaper *reaperCell
	logger *slog.Logger

	mu     sync.Mutex
	until  time.Time
	groups map[int]bool
	bound  bool
}

func (l *slotLease) Hold(pgid int) (release func()) {
	rp, err := l.reaper.get()
	if err != nil {
		// Without the reaper the slot keeps its deadline: the cap holds.
		if l.reaper.warned.CompareAndSwap(false, true) {
			l.logger.Warn("fleet cap: no reaper: slots are held until their calls' deadlines", "err", err)
		}
		return func() {}
	}
	l.mu.Lock()
	if err := rp.Hold(pgid, l.until); err != nil {
		l.mu.Unlock()
		l.logger.Warn("fleet cap: the reaper took no hold: the slot is held until the call's deadline", "err", err)
		return func() {}
	}
	l.groups[pgid] = true
	bind := !l.bound
	l.bound = true
	l.mu.Unlock()
	if bind {
		l.slot.Bind(l.set)
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.groups, pgid)
		rp.Release(pgid)
	}
}

// set moves every held group's end to until (the bound slot's renewals).
func (l *slotLease) set(until time.Time) {
	rp, err := l.reaper.get()
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until = until
	for pgid := range l.groups {
		if err := rp.Hold(pgid, until); err != nil {
			// The reaper is gone and the slot lapses with this node's
			// renewals: end the group now rather than exceed the cap.
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			l.logger.Error("fleet cap: the reaper is gone: a call's processes were killed to keep the cap", "slot", l.slot.Key(), "err", err)
		}
	}
}

// reaperCell starts the sandbox's reaper the first time a call's processes
// are held to a slot (most nodes never need it), and closes it with the
// fleet.
type reaperCell struct {
	once   sync.Once
	rp     *sandbox.Reaper
	err    error
	warned atomic.Bool // that it could not start, once
}

func (c *reaperCell) get() (*sandbox.Reaper, error) {
	c.once.Do(func() { c.rp, c.err = sandbox.StartReaper() })
	return c.rp, c.err
}

// close ends the reaper, if it started: it kills the groups it still holds.
func (c *reaperCell) close() {
	c.once.Do(func() { c.err = errReaperClosed })
	if c.rp != nil {
		_ = c.rp.Close()
	}
}

var errReaperClosed = errors.New("node: the fleet is closed")
