package core

import (
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"

	"github.com/callsheet/callsheet/tool"
)

const (
	P = tool.ConcurrencyParallelSafe
	E = tool.ConcurrencyExclusive
	B = tool.ConcurrencyIsolatedBackground
)

// startAll starts every call the schedule admits now and returns them.
func startAll(s *Schedule) []int {
	var got []int
	for {
		i, ok := s.Next()
		if !ok {
			return got
		}
		s.Start(i)
		got = append(got, i)
	}
}

func slotsOf(classes ...tool.Concurrency) []Slot {
	s := make([]Slot, len(classes))
	for i, c := range classes {
		s[i] = Slot{Class: c}
	}
	return s
}

// waves runs the schedule settling everything that runs after each wave, and
// returns the waves of started calls.
func waves(s *Schedule) [][]int {
	var out [][]int
	for !s.Done() {
		w := startAll(s)
		if len(w) == 0 {
			panic("schedule stuck")
		}
		out = append(out, w)
		for _, i := range w {
			s.Settle(i)
		}
	}
	return out
}

func TestScheduleRules(t *testing.T) {
	group := func(n int) Slot { return Slot{Class: E, Group: "task", GroupCap: n} }
	tests := []struct {
		name   string
		slots  []Slot
		cap    int
		serial bool
		want   [][]int
	}{
		{"parallel calls run together", slotsOf(P, P, P), 8, false, [][]int{{0, 1, 2}}},
		{"exclusive is a two-way barrier", slotsOf(P, E, P), 8, false, [][]int{{0}, {1}, {2}}},
		{"exclusive after a parallel run", slotsOf(P, P, E, P, P), 8, false, [][]int{{0, 1}, {2}, {3, 4}}},
		{"cap 2 gives three waves of six", slotsOf(P, P, P, P, P, P), 2, false, [][]int{{0, 1}, {2, 3}, {4, 5}}},
		{"consecutive exclusives run alone", slotsOf(E, E), 8, false, [][]int{{0}, {1}}},
		{"parallel_tool_calls false runs every call alone", slotsOf(P, P, P), 8, true, [][]int{{0}, {1}, {2}}},
		{"group members overlap up to the cap", []Slot{group(2), group(2), group(2)}, 8, false, [][]int{{0, 1}, {2}}},
		{"group drains non-members first", []Slot{{Class: P}, group(3), group(3)}, 8, false, [][]int{{0}, {1, 2}}},
		{"non-member waits for the group", []Slot{group(3), group(3), {Class: P}}, 8, false, [][]int{{0, 1}, {2}}},
		{"group cap read per call", []Slot{group(1), group(1)}, 8, false, [][]int{{0}, {1}}},
		{"background waits behind a barrier", slotsOf(E, B, P), 8, false, [][]int{{0}, {1, 2}}},
		{"background does not take a parallel slot", slotsOf(P, B, P), 2, false, [][]int{{0, 1, 2}}},
		{"blocked calls are no barrier", []Slot{{Class: P}, {Class: E, Skip: true}, {Class: P}}, 8, false, [][]int{{0, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := waves(NewSchedule(tt.slots, tt.cap, tt.serial))
			if !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Fatalf("waves=%v, want %v", got, tt.want)
			}
		})
	}
}

func TestScheduleFIFOBeyondGroupCap(t *testing.T) {
	g := Slot{Class: E, Group: "task", GroupCap: 2}
	s := NewSchedule([]Slot{g, g, g, g}, 8, false)
	if got := startAll(s); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("started=%v, want [0 1]", got)
	}
	s.Settle(1) // the second finishes first: the third (not the fourth) starts
	if got := startAll(s); !slices.Equal(got, []int{2}) {
		t.Fatalf("started=%v, want [2]", got)
	}
}

// turnSpec is a random turn for the property test.
type turnSpec struct {
	Slots  []Slot
	Cap    int
	Serial bool
	Seed   uint64
}

func randomTurn(r *rand.Rand) turnSpec {
	n := r.IntN(12)
	ts := turnSpec{Cap: 1 + r.IntN(4), Serial: r.IntN(5) == 0, Seed: r.Uint64()}
	groups := []string{"g1", "g2"}
	for range n {
		var s Slot
		switch r.IntN(6) {
		case 0, 1:
			s.Class = P
		case 2:
			s.Class = E
		case 3:
			s.Class = B
		case 4:
			s.Class = E
			s.Group = groups[r.IntN(2)]
			s.GroupCap = 1 + r.IntN(3)
		case 5:
			s.Class = P
			s.Skip = true
		}
		ts.Slots = append(ts.Slots, s)
	}
	return ts
}

// checkTurn runs a turn, settling a random running call at each step, and
// checks the schedule's invariants at every start.
func checkTurn(t *testing.T, ts turnSpec) bool {
	t.Helper()
	r := rand.New(rand.NewPCG(ts.Seed, 1))
	s := NewSchedule(ts.Slots, ts.Cap, ts.Serial)
	running := map[int]bool{}
	settledCount := make([]int, len(ts.Slots))
	lastStarted := -1
	fail := func(format string, args ...any) bool {
		t.Errorf("turn %+v: "+format, append([]any{ts}, args...)...)
		return false
	}
	for steps := 0; !s.Done(); steps++ {
		if steps > 10*len(ts.Slots)+10 {
			return fail("schedule did not finish")
		}
		for {
			i, ok := s.Next()
			if !ok {
				break
			}
			sl := ts.Slots[i]
			if i <= lastStarted {
				return fail("call %d started after call %d: not in model order", i, lastStarted)
			}
			for j := lastStarted + 1; j < i; j++ {
				if !ts.Slots[j].Skip {
					return fail("call %d overtook call %d", i, j)
				}
			}
			lastStarted = i
			par := 0
			for j := range running {
				o := ts.Slots[j]
				if ts.Serial {
					return fail("call %d started beside %d with parallel_tool_calls=false", i, j)
				}
				if o.Class == E && o.Group == "" {
					return fail("call %d started while exclusive %d runs", i, j)
				}
				if o.Group != "" && o.Group != sl.Group {
					return fail("call %d started while group member %d runs", i, j)
				}
				if sl.Group != "" && o.Group != sl.Group {
					return fail("group member %d started beside non-member %d", i, j)
				}
				if sl.Class == E && sl.Group == "" {
					return fail("exclusive %d started beside %d", i, j)
				}
				if o.Class == P && o.Group == "" {
					par++
				}
			}
			s.Start(i)
			if sl.Class == B {
				// The foreground part of a background call settles at once.
				s.Settle(i)
				settledCount[i]++
				continue
			}
			running[i] = true
			if sl.Class == P && par+1 > ts.Cap {
				return fail("cap %d exceeded by call %d", ts.Cap, i)
			}
			if sl.Group != "" {
				n := 0
				for j := range running {
					if ts.Slots[j].Group == sl.Group {
						n++
					}
				}
				if n > sl.GroupCap {
					return fail("group %s cap %d exceeded", sl.Group, sl.GroupCap)
				}
			}
		}
		if len(running) == 0 {
			if !s.Done() {
				return fail("nothing runs but the schedule is not done")
			}
			break
		}
		keys := make([]int, 0, len(running))
		for k := range running {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		k := keys[r.IntN(len(keys))]
		delete(running, k)
		s.Settle(k)
		s.Settle(k) // settling twice is a no-op
		settledCount[k]++
	}
	for i, n := range settledCount {
		if !ts.Slots[i].Skip && n != 1 {
			return fail("call %d settled %d times, want once", i, n)
		}
	}
	return true
}

func TestSchedulePropertyInvariants(t *testing.T) {
	prop := func(seed uint64) bool {
		return checkTurn(t, randomTurn(rand.New(rand.NewPCG(seed, 0))))
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// TestScheduleAppendIsTheWholeTurn: calls appended in batches while earlier
// ones run are admitted by the same rules (the invariants of checkTurn hold
// at every start), and a schedule that received its calls in batches before
// any started runs the same waves as one built with them all.
func TestScheduleAppendIsTheWholeTurn(t *testing.T) {
	prop := func(seed uint64) bool {
		r := rand.New(rand.NewPCG(seed, 2))
		ts := randomTurn(r)
		// Batches: cut the slots at random places.
		var cuts []int
		for i := 1; i < len(ts.Slots); i++ {
			if r.IntN(3) == 0 {
				cuts = append(cuts, i)
			}
		}
		cuts = append(cuts, len(ts.Slots))
		whole := NewSchedule(slices.Clone(ts.Slots), ts.Cap, ts.Serial)
		parts := NewSchedule(nil, ts.Cap, ts.Serial)
		from := 0
		for _, c := range cuts {
			parts.Append(slices.Clone(ts.Slots[from:c]))
			from = c
		}
		if len(ts.Slots) > 0 && !slices.EqualFunc(waves(whole), waves(parts), slices.Equal[[]int]) {
			t.Errorf("turn %+v in batches %v runs other waves than whole", ts, cuts)
			return false
		}
		return checkStreamed(t, ts, cuts, r)
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 3000}); err != nil {
		t.Fatal(err)
	}
}

// checkStreamed runs a turn whose calls arrive in the batches cuts gives,
// a batch arriving at random between starts and settles, and checks that
// calls start in model order, never beside what they may not run beside,
// within the cap, and that each settles once.
func checkStreamed(t *testing.T, ts turnSpec, cuts []int, r *rand.Rand) bool {
	t.Helper()
	s := NewSchedule(nil, ts.Cap, ts.Serial)
	arrived, batch := 0, 0
	running := map[int]bool{}
	lastStarted := -1
	fail := func(format string, args ...any) bool {
		t.Errorf("turn %+v in batches %v: "+format, append([]any{ts, cuts}, args...)...)
		return false
	}
	for steps := 0; ; steps++ {
		if steps > 20*len(ts.Slots)+20 {
			return fail("schedule did not finish")
		}
		if batch < len(cuts) && (len(running) == 0 || r.IntN(2) == 0) {
			s.Append(slices.Clone(ts.Slots[arrived:cuts[batch]]))
			arrived = cuts[batch]
			batch++
		}
		for {
			i, ok := s.Next()
			if !ok {
				break
			}
			if i >= arrived {
				return fail("call %d started before it arrived (%d arrived)", i, arrived)
			}
			sl := ts.Slots[i]
			for j := lastStarted + 1; j < i; j++ {
				if !ts.Slots[j].Skip {
					return fail("call %d overtook call %d", i, j)
				}
			}
			lastStarted = i
			par := 0
			for j := range running {
				o := ts.Slots[j]
				switch {
				case ts.Serial:
					return fail("call %d started beside %d with parallel_tool_calls=false", i, j)
				case o.Class == E && o.Group == "", sl.Class == E && sl.Group == "":
					return fail("call %d started beside %d, one of them exclusive", i, j)
				case o.Group != sl.Group && (o.Group != "" || sl.Group != ""):
					return fail("call %d started beside %d across a group", i, j)
				case o.Class == P && o.Group == "":
					par++
				}
			}
			s.Start(i)
			if sl.Class == B {
				s.Settle(i)
				continue
			}
			running[i] = true
			if sl.Class == P && par+1 > ts.Cap {
				return fail("cap %d exceeded by call %d", ts.Cap, i)
			}
		}
		if len(running) == 0 {
			if batch < len(cuts) {
				continue
			}
			if !s.Done() {
				return fail("nothing runs, every batch arrived, but the schedule is not done")
			}
			return true
		}
		keys := make([]int, 0, len(running))
		for k := range running {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		k := keys[r.IntN(len(keys))]
		delete(running, k)
		s.Settle(k)
	}
}
