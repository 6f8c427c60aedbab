package core

import "github.com/callsheet/callsheet/tool"

// Slot is how the schedule sees one admitted call: its concurrency class and,
// for a self-concurrency group, the group name and cap.
type Slot struct {
	Class tool.Concurrency
	// Group is the tool name when the call belongs to a self-concurrency
	// group (an exclusive tool whose cap is ≥ 2); empty otherwise.
	Group string
	// GroupCap is the group's cap, read when the call was planned.
	GroupCap int
	// Skip marks a call that never runs (blocked): it is settled from the
	// start and is no barrier to anything.
	Skip bool
	// Pending marks a call waiting for approval: it cannot start (and holds
	// back every later call) until Release or Drop.
	Pending bool
}

// Schedule decides which calls of one turn may start. It is pure: the caller
// asks CanStart for the next call in model order, marks it with Start, and
// reports Settle when its outcome is final. Calls start in model order: a call
// that must wait holds back every later call, so no call overtakes another.
// A Schedule is not safe for concurrent use.
type Schedule struct {
	slots  []Slot
	cap    int
	serial bool

	next    int // first call in model order not yet started
	started []bool
	settled []bool

	running        int            // running calls of any class (background excluded)
	runningExcl    int            // running exclusive, non-group calls
	runningPar     int            // running parallel-safe calls
	runningByGroup map[string]int // running members per group; nil until a group's call starts
}

// NewSchedule returns the schedule of a turn. cap is the parallel-safe cap
// (concurrency.tool_calls, at least 1); serial is parallel_tool_calls=false:
// every call then runs alone, in model order.
func NewSchedule(slots []Slot, cap int, serial bool) *Schedule {
	if cap < 1 {
		cap = 1
	}
	s := &Schedule{
		slots:   slots,
		cap:     cap,
		serial:  serial,
		started: make([]bool, len(slots)),
		settled: make([]bool, len(slots)),
	}
	for i, sl := range slots {
		if sl.Skip {
			s.started[i], s.settled[i] = true, true
		}
	}
	s.advance()
	return s
}

// Append adds calls after the last one, as a streamed turn's batches
// arrive (docs/spec.md §8): they are admitted by the same rules as if the
// turn had held them from the start, so a parallel-safe call starts at once
// when nothing before it holds it back, and nothing overtakes a call that
// waits.
func (s *Schedule) Append(slots []Slot) {
	if len(s.slots) == 0 {
		s.slots = slots
	} else {
		s.slots = append(s.slots[:len(s.slots):len(s.slots)], slots...)
	}
	for _, sl := range slots {
		s.started = append(s.started, sl.Skip)
		s.settled = append(s.settled, sl.Skip)
	}
	s.advance()
}

// advance moves next past calls that already started (skipped ones).
func (s *Schedule) advance() {
	for s.next < len(s.slots) && s.started[s.next] {
		s.next++
	}
}

// Next returns the index of the next call in model order that has not
// started, and whether it may start now.
func (s *Schedule) Next() (int, bool) {
	if s.next >= len(s.slots) {
		return -1, false
	}
	return s.next, s.canStart(s.next)
}

func (s *Schedule) canStart(i int) bool {
	sl := s.slots[i]
	if sl.Pending {
		return false
	}
	if s.serial {
		return s.running == 0
	}
	switch {
	case sl.Class == tool.ConcurrencyIsolatedBackground:
		// Off the foreground path, but still behind any barrier.
		return s.runningExcl == 0 && s.groupsRunning() == 0
	case sl.Group != "":
		n := s.runningByGroup[sl.Group]
		return s.running == n && n < max(sl.GroupCap, 1)
	case sl.Class == tool.ConcurrencyParallelSafe:
		return s.runningExcl == 0 && s.groupsRunning() == 0 && s.runningPar < s.cap
	default: // exclusive
		return s.running == 0
	}
}

func (s *Schedule) groupsRunning() int {
	n := 0
	for _, c := range s.runningByGroup {
		n += c
	}
	return n
}

// Start marks call i as started. It must be the call Next returned; Start
// does not check CanStart, so a rebuild from the log can replay what ran.
func (s *Schedule) Start(i int) {
	if s.started[i] {
		return
	}
	s.started[i] = true
	sl := s.slots[i]
	switch {
	case s.serial && sl.Class != tool.ConcurrencyIsolatedBackground:
		s.running++
		s.runningExcl++
	case sl.Class == tool.ConcurrencyIsolatedBackground:
		// Not counted: its foreground part settles at once.
	case sl.Group != "":
		s.running++
		if s.runningByGroup == nil {
			s.runningByGroup = map[string]int{}
		}
		s.runningByGroup[sl.Group]++
	case sl.Class == tool.ConcurrencyParallelSafe:
		s.running++
		s.runningPar++
	default:
		s.running++
		s.runningExcl++
	}
	s.advance()
}

// Settle marks call i's outcome final, releasing its slot. Settling twice,
// or a call that never started, is a no-op.
func (s *Schedule) Settle(i int) {
	if !s.started[i] || s.settled[i] {
		return
	}
	s.settled[i] = true
	sl := s.slots[i]
	switch {
	case s.serial && sl.Class != tool.ConcurrencyIsolatedBackground:
		s.running--
		s.runningExcl--
	case sl.Class == tool.ConcurrencyIsolatedBackground:
	case sl.Group != "":
		s.running--
		s.runningByGroup[sl.Group]--
	case sl.Class == tool.ConcurrencyParallelSafe:
		s.running--
		s.runningPar--
	default:
		s.running--
		s.runningExcl--
	}
}

// Release lets a pending call start (its approval was granted).
func (s *Schedule) Release(i int) { s.slots[i].Pending = false }

// Drop settles call i without running it (a cancelled call that had not
// started). A started call is settled as usual.
func (s *Schedule) Drop(i int) {
	if s.started[i] {
		s.Settle(i)
		return
	}
	s.started[i], s.settled[i] = true, true
	s.advance()
}

// Settled reports whether call i's outcome is final.
func (s *Schedule) Settled(i int) bool { return s.settled[i] }

// Started reports whether call i has started (or was skipped).
func (s *Schedule) Started(i int) bool { return s.started[i] }

// Done reports whether every call has settled.
func (s *Schedule) Done() bool {
	for _, ok := range s.settled {
		if !ok {
			return false
		}
	}
	return true
}

// Running returns how many foreground calls are running.
func (s *Schedule) Running() int { return s.running }
