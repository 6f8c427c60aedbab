package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/projections"
)

// TestHarnessFleet: harness tools across a fleet of three nodes: a tool
// registered on one node is known to all; a call of a session owned by n1,
// posted to n3, is polled for on n2 and completed through n3; a fleet-wide
// cap of 1 holds across sessions owned by different nodes (one task out at
// a time, the other handed out once the first is answered).
func TestHarnessFleet(t *testing.T) {
	fl := newFleet(t, 3, nil)
	n1, n2, n3 := fl[0], fl[1], fl[2]
	n1.must("PUT", "/v1/tools/lookup_order", spec(`, "concurrency": "parallel_safe", "fleet_cap": 1, "fleet_cap_scope": "tenant"`), http.StatusOK, nil)
	for _, fn := range fl {
		eventually(t, fn.name+" knows the tool", func() error {
			if _, b := fn.do("GET", "/v1/tools", ""); !strings.Contains(string(b), `"lookup_order"`) {
				return fmt.Errorf("%s: GET /v1/tools lacks lookup_order", fn.name)
			}
			return nil
		})
	}
	open := func(fn *fleetNode) string {
		var s sessionAnswer
		fn.must("POST", "/v1/sessions", `{}`, http.StatusCreated, &s)
		return s.Session
	}
	s1, s2 := open(n1), open(n2)
	call := `{"calls": [{"id": "a", "name": "lookup_order", "arguments": {"order": "A-1"}}]}`
	turn1 := n3.submitAsync(s1, call)
	turn2 := n3.submitAsync(s2, call)

	tasks := n2.pollTasks(10*time.Second, "lookup_order")
	if len(tasks) != 1 {
		t.Fatalf("first poll: %d tasks, want 1", len(tasks))
	}
	// The cap is 1: while that task is out, no other is handed out.
	if more := n1.pollTasks(1500*time.Millisecond, "lookup_order"); len(more) != 0 {
		t.Fatalf("a second task was handed out past the fleet cap of 1: %+v", more)
	}
	first := tasks[0]
	n3.must("POST", "/v1/tasks/"+first.Task+"/complete", complete("first"), http.StatusOK, nil)
	var second harness.Task
	eventually(t, "the second task is handed out", func() error {
		ts := n1.pollTasks(2*time.Second, "lookup_order")
		if len(ts) != 1 {
			return fmt.Errorf("%d tasks", len(ts))
		}
		second = ts[0]
		return nil
	})
	if second.Session == first.Session {
		t.Fatalf("the same session's task twice: %+v, %+v", first, second)
	}
	n2.must("POST", "/v1/tasks/"+second.Task+"/complete", complete("second"), http.StatusOK, nil)
	for _, st := range []struct{ session, turn string }{{s1, turn1}, {s2, turn2}} {
		var tr projections.Turn
		eventually(t, "turn "+st.turn+" completes", func() error {
			n3.must("GET", "/v1/sessions/"+st.session+"/turns/"+st.turn, "", http.StatusOK, &tr)
			if tr.Status != projections.StatusComplete {
				return fmt.Errorf("status %s", tr.Status)
			}
			return nil
		})
		if r := tr.Results[0]; r.Outcome != events.OutcomeOK {
			t.Fatalf("turn %s: %+v", st.turn, r)
		}
	}
	// A late complete through any node: 409.
	status, b := n1.do("POST", "/v1/tasks/"+first.Task+"/complete", complete("late"))
	wantError(t, status, b, 409, CodeConflict)
}
