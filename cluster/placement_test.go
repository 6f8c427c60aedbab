package cluster

import (
	"fmt"
	"slices"
	"testing"
	"testing/quick"
)

// fleetView is a view of self among live nodes; reachable are those that
// advertise an API.
func fleetView(self string, closing bool, live, reachable []string) View {
	return View{Self: self, Closing: closing, Live: func() []string { return live }, Shared: false,
		Alive:     func(n string) bool { return slices.Contains(live, n) },
		Reachable: func(n string) bool { return slices.Contains(live, n) && slices.Contains(reachable, n) }}
}

// heirOf is the node the rendezvous picks for session s among nodes.
func heirOf(s string, nodes ...string) string { return rendezvous("t", s, nodes, "", true) }

// sessionFor finds a session id whose rendezvous among nodes is want.
func sessionFor(t *testing.T, want string, nodes ...string) string {
	t.Helper()
	for i := range 1000 {
		if s := fmt.Sprint("s", i); heirOf(s, nodes...) == want {
			return s
		}
	}
	t.Fatalf("no session goes to %s among %v", want, nodes)
	return ""
}

func TestRoute(t *testing.T) {
	all := []string{"a", "b", "c"}
	toB := sessionFor(t, "b", all...)       // among a, b, c: b
	toBNotA := sessionFor(t, "b", "b", "c") // among b, c (a excluded): b
	toCNotA := sessionFor(t, "c", "b", "c") // among b, c (a excluded): c
	toAAll := sessionFor(t, "a", all...)    // among a, b, c: a
	owner := func(n string, released bool, ws string) Owner {
		return Owner{Node: n, Released: released, WorkspaceNode: ws}
	}
	shared := func(v View) View { v.Shared = true; return v }
	for _, c := range []struct {
		name string
		q    Question
		v    View
		s    Session
		want Decision
	}{
		// Own: the log names the owner.
		{"own: no lease, nothing", Own, fleetView("a", false, []string{"b"}, nil), Session{Owner: owner("", false, "")}, Decision{}},
		{"own: closing, nothing", Own, fleetView("a", true, all, nil), Session{Owner: owner("", false, "")}, Decision{}},
		{"own: never owned, take", Own, shared(fleetView("a", false, all, nil)), Session{}, Decision{Here: true}},
		{"own: a live owner keeps it", Own, shared(fleetView("a", false, all, nil)), Session{Owner: owner("b", false, "")}, Decision{Node: "b"}},
		{"own: a released one is taken", Own, shared(fleetView("a", false, all, nil)), Session{Owner: owner("b", true, "")}, Decision{Here: true}},
		{"own: a lost owner's is taken", Own, shared(fleetView("a", false, []string{"a", "c"}, nil)), Session{Owner: owner("b", false, "")}, Decision{Here: true}},
		{"own: an earlier process of this name", Own, shared(fleetView("a", false, all, nil)), Session{Owner: owner("a", false, "")}, Decision{Here: true}},
		{"own: the live workspace node's", Own, fleetView("a", false, all, nil), Session{Owner: owner("b", true, "c")}, Decision{Node: "c"}},
		{"own: the workspace is here", Own, fleetView("a", false, all, nil), Session{Owner: owner("b", true, "a")}, Decision{Here: true}},
		{"own: the workspace node is lost", Own, fleetView("a", false, []string{"a", "b"}, nil), Session{Owner: owner("b", true, "c")}, Decision{Here: true, WorkspaceAway: "c"}},
		{"own: shared workspaces ignore the workspace node", Own, shared(fleetView("a", false, all, nil)), Session{Owner: owner("b", true, "c")}, Decision{Here: true}},

		// Serve: the owners index is a hint.
		{"serve: not in the index", Serve, fleetView("a", false, all, all), Session{}, Decision{Here: true}},
		{"serve: the actor is here", Serve, fleetView("a", false, all, all), Session{Known: true, Owner: owner("b", false, ""), Here: true}, Decision{Here: true}},
		{"serve: a live owner's", Serve, fleetView("a", false, all, all), Session{Known: true, Owner: owner("b", false, "")}, Decision{Node: "b"}},
		{"serve: a live owner without an API: here", Serve, fleetView("a", false, all, []string{"c"}), Session{Known: true, Owner: owner("b", false, "")}, Decision{Here: true}},
		{"serve: this node's own", Serve, fleetView("a", false, all, all), Session{Known: true, Owner: owner("a", false, "b")}, Decision{Here: true}},
		{"serve: a lost owner's, the workspace node's", Serve, fleetView("a", false, []string{"a", "c"}, []string{"c"}), Session{Known: true, Owner: owner("b", false, "c")}, Decision{Node: "c"}},
		{"serve: a released one, the workspace node's", Serve, fleetView("a", false, all, all), Session{Known: true, Owner: owner("b", true, "c")}, Decision{Node: "c"}},
		{"serve: a released one, shared: here", Serve, shared(fleetView("a", false, all, all)), Session{Known: true, Owner: owner("b", true, "c")}, Decision{Here: true}},
		{"serve: a lost owner's, shared: here", Serve, shared(fleetView("a", false, []string{"a", "c"}, all)), Session{Known: true, Owner: owner("b", false, "")}, Decision{Here: true}},
		{"serve: closing sends it to the heir among the others", Serve, shared(fleetView("a", true, all, all)), Session{Tenant: "t", ID: toBNotA, Known: true, Owner: owner("a", false, ""), Here: true}, Decision{Node: "b"}},
		{"serve: released here sends it to the heir", Serve, shared(fleetView("a", false, all, all)), Session{Tenant: "t", ID: toCNotA, Known: true, Owner: owner("a", true, ""), Here: true}, Decision{Node: "c"}},
		{"serve: released here, the workspace node wins", Serve, fleetView("a", false, all, all), Session{Tenant: "t", ID: toBNotA, Known: true, Owner: owner("a", true, "c")}, Decision{Node: "c"}},
		{"serve: closing, nobody reachable: here", Serve, shared(fleetView("a", true, all, nil)), Session{Known: true, Owner: owner("a", false, "")}, Decision{Here: true}},

		// Adopt: eager takeovers.
		{"adopt: no lease, nothing", Adopt, shared(fleetView("a", false, []string{"b"}, nil)), Session{Tenant: "t", ID: toAAll}, Decision{}},
		{"adopt: closing, nothing", Adopt, shared(fleetView("a", true, all, nil)), Session{Tenant: "t", ID: toAAll}, Decision{}},
		{"adopt: this name's, from an earlier process", Adopt, shared(fleetView("a", false, all, nil)), Session{Tenant: "t", ID: toB, Known: true, Owner: owner("a", false, "")}, Decision{Here: true}},
		{"adopt: released by an earlier process of this name", Adopt, shared(fleetView("a", false, all, nil)), Session{Tenant: "t", ID: toB, Known: true, Owner: owner("a", true, "")}, Decision{Here: true}},
		{"adopt: released by this process: the heir's", Adopt, shared(fleetView("a", false, all, nil)), Session{Tenant: "t", ID: toB, Known: true, Owner: owner("a", true, ""), Mine: true}, Decision{}},
		{"adopt: a live owner's, not", Adopt, shared(fleetView("a", false, all, nil)), Session{Tenant: "t", ID: toAAll, Known: true, Owner: owner("b", false, "")}, Decision{}},
		{"adopt: a lost owner's, the heir is here", Adopt, shared(fleetView("a", false, []string{"a", "c"}, nil)), Session{Tenant: "t", ID: sessionFor(t, "a", "a", "c"), Known: true, Owner: owner("b", false, "")}, Decision{Here: true}},
		{"adopt: a lost owner's, the heir is another", Adopt, shared(fleetView("a", false, []string{"a", "c"}, nil)), Session{Tenant: "t", ID: sessionFor(t, "c", "a", "c"), Known: true, Owner: owner("b", false, "")}, Decision{}},
		{"adopt: released by another: it is no heir", Adopt, shared(fleetView("c", false, all, nil)), Session{Tenant: "t", ID: toCNotA, Known: true, Owner: owner("a", true, "")}, Decision{Here: true}},
		{"adopt: the live workspace node is the heir", Adopt, fleetView("a", false, all, nil), Session{Tenant: "t", ID: toAAll, Known: true, Owner: owner("b", true, "c")}, Decision{}},
		{"adopt: backstop takes what the lost node still holds", Adopt, shared(fleetView("a", false, []string{"a", "c"}, nil)), Session{Tenant: "t", ID: sessionFor(t, "c", "a", "c"), Known: true, Owner: owner("b", false, ""), Lost: "b"}, Decision{Here: true}},
		{"adopt: backstop leaves what moved on", Adopt, shared(fleetView("a", false, []string{"a", "c"}, nil)), Session{Tenant: "t", ID: toAAll, Known: true, Owner: owner("c", false, ""), Lost: "b"}, Decision{}},
		{"adopt: backstop leaves a node that came back", Adopt, shared(fleetView("a", false, all, nil)), Session{Tenant: "t", ID: toAAll, Known: true, Owner: owner("b", false, ""), Lost: "b"}, Decision{}},
	} {
		if got := Route(c.q, c.v, c.s); got != c.want {
			t.Errorf("%s: Route=%+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestRendezvousAgrees: every node with the same view picks the same heir,
// a live workspace node wins, and removing a node moves only its sessions.
func TestRendezvousAgrees(t *testing.T) {
	f := func(session string, n uint8) bool {
		nodes := []string{"a", "b", "c", "d", "e"}[:2+int(n)%4]
		heir := rendezvous("t", session, nodes, "", true)
		shuffled := slices.Clone(nodes)
		slices.Reverse(shuffled)
		if rendezvous("t", session, shuffled, "", true) != heir {
			return false
		}
		if rendezvous("t", session, nodes, nodes[0], false) != nodes[0] {
			return false
		}
		// Another node lost: the heir stays unless it was the one lost.
		for _, lost := range nodes {
			rest := slices.DeleteFunc(slices.Clone(nodes), func(s string) bool { return s == lost })
			if got := rendezvous("t", session, rest, "", true); lost != heir && got != heir {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
	if got := rendezvous("t", "s", nil, "", true); got != "" {
		t.Fatalf("rendezvous of no nodes = %q", got)
	}
}
