package core

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testenv"
)

// TestCompletedTurnsHoldLittle: a session's state keeps, for each turn it
// completed, what a later decision or a view of the turn can still need
// (its calls, its plan, each call's state in one value), not a copy of what
// was only on the way to them: a live session's actor holds its state for
// as long as the session works, so what a turn leaves there is paid for
// every turn (docs/performance.md, "CPU per call").
func TestCompletedTurnsHoldLittle(t *testing.T) {
	h := newHarness(t)
	run := func(from, n int) {
		for i := range n {
			h.log = h.log[:0] // the harness's record, not the session's state
			h.turn(fmt.Sprintf("turn-%06d", from+i), true, call("c1", "read", `{"path":"notes/today.md"}`))
			r := h.requested()
			if len(r) != 1 {
				t.Fatalf("turn %d: %d requests, want 1", from+i, len(r))
			}
			h.claimAndFinish(r[0], Outcome{OK: true, Content: []events.Part{{Type: "text", Text: "ok"}}}, Retry{})
			if tr, ok := h.s.Turn(fmt.Sprintf("turn-%06d", from+i)); !ok || !tr.Completed {
				t.Fatalf("turn %d did not complete", from+i)
			}
		}
		h.log = nil
	}
	run(0, 200)
	before := testenv.LiveHeap()
	const n = 4000
	run(200, n)
	after := testenv.LiveHeap()
	runtime.KeepAlive(h.s)
	per := (float64(after) - float64(before)) / n
	t.Logf("a completed one-call turn holds %.0f B of the session's state", per)
	if per > 1800 {
		t.Fatalf("a completed one-call turn holds %.0f B of the session's state, want at most 1,800", per)
	}
}
