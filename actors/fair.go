package actors

// fairQueue is the decision of who gets a concurrency class's next worker
// (LocalRequests holds one under its lock): the requests waiting, queued per
// tenant in the order they came, and the workers held, per tenant and in
// all. A free worker goes to the tenant served least recently among those
// with a request waiting and fewer workers than their cap, which takes its
// oldest request. So with k tenants waiting, each under its cap, each gets a
// worker within k of them; no tenant holds more than its cap; a tenant alone
// uses up to its cap; and within a tenant requests start first in, first
// out. Pure: no clock, no goroutines; not safe for concurrent use.
type fairQueue[T any] struct {
	size    int                     // workers in all, at least 1
	capOf   func(tenant string) int // a tenant's cap; nil: size
	held    int                     // workers held
	queued  int                     // requests waiting
	served  uint64                  // workers given so far
	tenants map[string]*fairTenant[T]
	// waiting are the tenants with a request queued, in the order each
	// came to have one (the tie-break between tenants never served).
	waiting []*fairTenant[T]
}

// fairTenant is one tenant's share: kept while the node runs, so that a
// tenant that returns is ordered by when it was last served.
type fairTenant[T any] struct {
	name   string
	queue  []T
	held   int
	served uint64 // the count of fairQueue.served when it last got a worker; 0: never
}

func newFairQueue[T any](size int, capOf func(string) int) *fairQueue[T] {
	return &fairQueue[T]{size: max(size, 1), capOf: capOf, tenants: map[string]*fairTenant[T]{}}
}

// capFor is tenant's cap, within 1..size.
func (q *fairQueue[T]) capFor(tenant string) int {
	if q.capOf == nil {
		return q.size
	}
	return min(max(q.capOf(tenant), 1), q.size)
}

// push queues v, a request of tenant's, behind the tenant's others.
func (q *fairQueue[T]) push(tenant string, v T) {
	t := q.tenants[tenant]
	if t == nil {
		t = &fairTenant[T]{name: tenant}
		q.tenants[tenant] = t
	}
	if len(t.queue) == 0 {
		q.waiting = append(q.waiting, t)
	}
	t.queue = append(t.queue, v)
	q.queued++
}

// pop takes a worker for the next request, as the type's comment says, and
// returns the request and its tenant; ok is false when every worker is
// held or no tenant with a request waiting is under its cap.
func (q *fairQueue[T]) pop() (tenant string, v T, ok bool) {
	if q.held >= q.size {
		return "", v, false
	}
	best := -1
	for i, t := range q.waiting {
		if t.held >= q.capFor(t.name) {
			continue
		}
		if best < 0 || t.served < q.waiting[best].served {
			best = i
		}
	}
	if best < 0 {
		return "", v, false
	}
	t := q.waiting[best]
	v = t.queue[0]
	var zero T
	t.queue[0] = zero
	t.queue = t.queue[1:]
	if len(t.queue) == 0 {
		t.queue = nil
		q.waiting = append(q.waiting[:best], q.waiting[best+1:]...)
	}
	q.queued--
	q.served++
	t.served = q.served
	t.held++
	q.held++
	return t.name, v, true
}

// take takes a worker for a request of tenant's that is not queued (one
// its session claims as it decides it: LocalRequests.take), and reports
// whether it did: only while no request waits, so nothing queued is passed
// over, a worker is free and tenant is under its cap. It counts as serving
// tenant.
func (q *fairQueue[T]) take(tenant string) bool {
	if q.queued > 0 || q.held >= q.size {
		return false
	}
	t := q.tenants[tenant]
	if t == nil {
		t = &fairTenant[T]{name: tenant}
		q.tenants[tenant] = t
	}
	if t.held >= q.capFor(tenant) {
		return false
	}
	q.served++
	t.served = q.served
	t.held++
	q.held++
	return true
}

// release frees a worker tenant held.
func (q *fairQueue[T]) release(tenant string) {
	if t := q.tenants[tenant]; t != nil && t.held > 0 {
		t.held--
		q.held--
	}
}

// ready reports whether pop may find a request now.
func (q *fairQueue[T]) ready() bool { return q.queued > 0 && q.held < q.size }

// drop forgets every request waiting; workers held stay held until
// released.
func (q *fairQueue[T]) drop() {
	for _, t := range q.waiting {
		t.queue = nil
	}
	q.waiting, q.queued = nil, 0
}
