package actors

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/quick"
)

// fairItem is a request in the fair queue's tests: its tenant and its place
// in the tenant's order of arrival.
type fairItem struct {
	tenant string
	n      int
}

// fairSim drives a fairQueue as a pool does (a worker is taken whenever one
// is free and a request may have it) and checks its promises after every
// step.
type fairSim struct {
	t       *testing.T
	q       *fairQueue[fairItem]
	caps    map[string]int
	pushed  map[string]int
	popped  map[string]int
	running []fairItem
	// passedBy[T] holds the tenants given a worker while T had a request
	// waiting and was under its cap, since T's last worker.
	passedBy map[string]map[string]bool
}

func newFairSim(t *testing.T, size int, caps map[string]int) *fairSim {
	return &fairSim{t: t, q: newFairQueue[fairItem](size, func(tenant string) int { return caps[tenant] }), caps: caps,
		pushed: map[string]int{}, popped: map[string]int{}, passedBy: map[string]map[string]bool{}}
}

func (s *fairSim) held(tenant string) int {
	n := 0
	for _, it := range s.running {
		if it.tenant == tenant {
			n++
		}
	}
	return n
}

// eligible reports whether tenant has a request waiting and is under its cap.
func (s *fairSim) eligible(tenant string) bool {
	return s.pushed[tenant] > s.popped[tenant] && s.held(tenant) < min(s.caps[tenant], s.q.size)
}

func (s *fairSim) push(tenant string) {
	s.q.push(tenant, fairItem{tenant, s.pushed[tenant]})
	s.pushed[tenant]++
	s.fill()
}

func (s *fairSim) release(i int) {
	it := s.running[i]
	s.running = append(s.running[:i], s.running[i+1:]...)
	s.q.release(it.tenant)
	s.fill()
}

// fill takes workers until none may be taken, checking each one given.
func (s *fairSim) fill() {
	s.t.Helper()
	for {
		before := map[string]bool{}
		for tenant := range s.caps {
			before[tenant] = s.eligible(tenant)
		}
		tenant, it, ok := s.q.pop()
		if !ok {
			break
		}
		switch {
		case it.tenant != tenant:
			s.t.Fatalf("pop returned tenant %q with %q's request", tenant, it.tenant)
		case it.n != s.popped[tenant]:
			s.t.Fatalf("tenant %s's request %d started, want %d: first in, first out within a tenant", tenant, it.n, s.popped[tenant])
		case !before[tenant]:
			s.t.Fatalf("tenant %s got a worker holding %d of its cap %d", tenant, s.held(tenant), s.caps[tenant])
		}
		for other, waited := range before {
			switch {
			case other == tenant:
				s.passedBy[other] = nil
			case !waited:
				s.passedBy[other] = nil // at its cap or nothing waiting: no claim on this worker
			case s.passedBy[other][tenant]:
				s.t.Fatalf("tenant %s got a second worker while %s waited under its cap (passed by %v): not round-robin", tenant, other, s.passedBy[other])
			default:
				if s.passedBy[other] == nil {
					s.passedBy[other] = map[string]bool{}
				}
				s.passedBy[other][tenant] = true
			}
		}
		s.popped[tenant]++
		s.running = append(s.running, it)
		if len(s.running) > s.q.size {
			s.t.Fatalf("%d workers held of %d", len(s.running), s.q.size)
		}
	}
	// Work-conserving: a worker is left free only when no tenant may take it.
	if len(s.running) < s.q.size {
		for tenant := range s.caps {
			if s.eligible(tenant) {
				s.t.Fatalf("tenant %s waits under its cap (%d of %d) while %d of %d workers are free", tenant, s.held(tenant), s.caps[tenant], s.q.size-len(s.running), s.q.size)
			}
		}
	}
	if s.q.held != len(s.running) {
		s.t.Fatalf("queue counts %d held, the pool %d", s.q.held, len(s.running))
	}
}

// TestFairQueueProperties: random arrivals and releases of up to 5 tenants
// on 1 to 8 workers with random caps; after every step no tenant holds
// more than its cap, no worker is free while a tenant under its cap has a
// request waiting, a tenant's requests start in their order, and while a
// tenant waits under its cap no other tenant gets two workers (so with k
// tenants waiting, each gets one within k).
func TestFairQueueProperties(t *testing.T) {
	check := func(seed uint64) bool {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		size := 1 + r.IntN(8)
		caps := map[string]int{}
		for i := range 1 + r.IntN(5) {
			caps[fmt.Sprint("t", i)] = 1 + r.IntN(size+1) // size+1: a cap above the pool counts as the pool
		}
		names := make([]string, 0, len(caps))
		for n := range caps {
			names = append(names, n)
		}
		s := newFairSim(t, size, caps)
		for range 400 {
			if len(s.running) > 0 && r.IntN(2) == 0 {
				s.release(r.IntN(len(s.running)))
			} else {
				// Skewed: the first tenant floods, the others trickle.
				tenant := names[0]
				if r.IntN(3) == 0 {
					tenant = names[r.IntN(len(names))]
				}
				s.push(tenant)
			}
		}
		return !t.Failed()
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 300}); err != nil {
		t.Fatal(err)
	}
}

// TestFairQueueCases: the promises in named situations.
func TestFairQueueCases(t *testing.T) {
	type step struct {
		push    string // a tenant's request arrives
		release string // a worker of this tenant's is freed
		want    string // the tenant given the worker taken next ("-": none)
	}
	tests := []struct {
		name  string
		size  int
		caps  map[string]int
		steps []step
	}{
		{"a tenant alone uses up to its cap", 8, map[string]int{"a": 3}, []step{
			{push: "a", want: "a"}, {push: "a", want: "a"}, {push: "a", want: "a"}, {push: "a", want: "-"},
			{release: "a", want: "a"}, {push: "a", want: "-"},
		}},
		{"a tenant's call starts at once while another holds its cap", 4, map[string]int{"a": 2, "b": 2}, []step{
			{push: "b", want: "b"}, {push: "b", want: "b"}, {push: "b", want: "-"}, {push: "b", want: "-"},
			{push: "a", want: "a"},
		}},
		{"a newcomer gets the next worker freed", 4, map[string]int{"a": 2, "b": 2, "c": 2}, []step{
			{push: "b", want: "b"}, {push: "c", want: "c"}, {push: "b", want: "b"}, {push: "c", want: "c"},
			{push: "b", want: "-"}, {push: "c", want: "-"}, {push: "a", want: "-"},
			{release: "b", want: "a"},
			{release: "c", want: "b"}, // b served before c: the least recently served
			{release: "a", want: "c"},
		}},
		{"round-robin among tenants with requests waiting", 1, map[string]int{"a": 1, "b": 1, "c": 1}, []step{
			{push: "a", want: "a"}, {push: "a", want: "-"}, {push: "a", want: "-"}, {push: "b", want: "-"}, {push: "b", want: "-"}, {push: "c", want: "-"},
			{release: "a", want: "b"}, {release: "b", want: "c"}, {release: "c", want: "a"}, {release: "a", want: "b"}, {release: "b", want: "a"},
		}},
		{"a cap above the pool is the pool", 2, map[string]int{"a": 5}, []step{
			{push: "a", want: "a"}, {push: "a", want: "a"}, {push: "a", want: "-"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newFairQueue[string](tt.size, func(tenant string) int { return tt.caps[tenant] })
			for i, st := range tt.steps {
				if st.push != "" {
					q.push(st.push, st.push)
				}
				if st.release != "" {
					q.release(st.release)
				}
				got := "-"
				if tenant, _, ok := q.pop(); ok {
					got = tenant
				}
				if got != st.want {
					t.Fatalf("step %d (%+v): worker to %q, want %q", i, st, got, st.want)
				}
			}
		})
	}
}

// TestFairQueueDrop: dropped requests are gone, held workers stay held until
// released.
func TestFairQueueDrop(t *testing.T) {
	q := newFairQueue[int](2, nil)
	q.push("a", 1)
	q.push("a", 2)
	q.push("b", 3)
	if _, v, ok := q.pop(); !ok || v != 1 {
		t.Fatalf("pop = %v %v, want 1", v, ok)
	}
	q.drop()
	if q.ready() {
		t.Fatal("ready after drop")
	}
	if _, _, ok := q.pop(); ok {
		t.Fatal("pop after drop found a request")
	}
	q.push("b", 4)
	if _, v, ok := q.pop(); !ok || v != 4 {
		t.Fatalf("pop = %v %v, want 4 (one worker still free)", v, ok)
	}
	if _, _, ok := q.pop(); ok || q.held != 2 {
		t.Fatalf("held = %d, want 2", q.held)
	}
	q.release("a")
	q.release("a") // a second release of a worker not held changes nothing
	if q.held != 1 {
		t.Fatalf("held = %d after releases, want 1", q.held)
	}
}

// TestFairQueueTake: a worker taken for a request that is not queued (its
// claim decided with it) is taken only while no request waits, a worker is
// free and the tenant is under its cap; it counts as held and serves the
// tenant like a popped one.
func TestFairQueueTake(t *testing.T) {
	q := newFairQueue[string](2, func(tenant string) int { return map[string]int{"a": 1, "b": 2}[tenant] })
	if !q.take("a") {
		t.Fatal("take with every worker free refused")
	}
	if q.take("a") {
		t.Fatal("take past a's cap of 1 allowed")
	}
	q.push("b", "b1")
	if q.take("b") {
		t.Fatal("take passed over a queued request")
	}
	if tenant, _, ok := q.pop(); !ok || tenant != "b" {
		t.Fatalf("pop = %q %v, want b's request", tenant, ok)
	}
	if q.take("b") || q.held != 2 {
		t.Fatalf("take with no worker free allowed (held %d)", q.held)
	}
	q.release("a")
	if !q.take("b") || q.held != 2 {
		t.Fatalf("take after a worker was freed refused (held %d)", q.held)
	}
	// b was served last, so a waiting a goes first when a worker frees.
	q.push("a", "a1")
	q.push("b", "b2")
	q.release("b")
	if tenant, _, ok := q.pop(); !ok || tenant != "a" {
		t.Fatalf("pop = %q %v, want a's (b was served more recently)", tenant, ok)
	}
}
