package tool

import "context"

// Lease ties a call's processes to the slot of a fleet-wide cap its call
// holds (docs/spec.md §7): a process tool hands it each process group it
// starts, and the group is then killed, even if the node is stopped or
// dies, before the slot could lapse; the slot in turn may lapse with the
// node's renewals instead of at the call's deadline. A call without a slot
// has no lease.
type Lease interface {
	// Hold keeps process group pgid within the slot's life until release
	// is called, which the tool does once the group ended.
	Hold(pgid int) (release func())
}

type leaseKey struct{}

// WithLease returns ctx carrying l.
func WithLease(ctx context.Context, l Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

// LeaseFrom returns the lease ctx carries, if any.
func LeaseFrom(ctx context.Context) (Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(Lease)
	return l, ok && l != nil
}
