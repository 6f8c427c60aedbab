package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

// owned returns a harness whose session node a owns (epoch 1), with a
// workspace-free tool beside read and write.
func owned(t *testing.T) *harness {
	h := newHarness(t)
	free := mustTool(t, "fetch", tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe})
	free.WorkspaceFree = true
	h.tools["fetch"] = free
	h.apply([]Draft{TakeOwnership(h.s, "a", "a1", "")})
	return h
}

func (h *harness) requestsOf(ref events.CallRef) []events.ToolCallRequested {
	var out []events.ToolCallRequested
	for _, r := range h.requested() {
		if r.CallRef == ref {
			out = append(out, r)
		}
	}
	return out
}

// TestRequestsGoToTheOwner checks that a call is requested from the
// session's owner (only the owner runs its calls, docs/spec.md §7), and that
// a new owner requests again, once, every attempt the earlier owner
// requested that nobody claimed, while a claimed one is settled by Recover.
func TestRequestsGoToTheOwner(t *testing.T) {
	h := owned(t)
	h.turn("t1", true, call("r", "read", `{"path":"x"}`), call("f", "fetch", `{"path":"y"}`))
	reqs := h.requested()
	if len(reqs) != 2 || reqs[0].Node != "a" || reqs[1].Node != "a" {
		t.Fatalf("requests %+v, want two addressed to node a", reqs)
	}
	if !reqs[1].WorkspaceFree || reqs[0].WorkspaceFree {
		t.Fatalf("workspace_free on requests: %v %v, want false for read, true for fetch", reqs[0].WorkspaceFree, reqs[1].WorkspaceFree)
	}
	// a claims the first and dies; b takes over.
	d, err := Claim(h.s, reqs[0].CallRef, 1, "a")
	if err != nil {
		t.Fatal(err)
	}
	h.apply(d)
	h.apply([]Draft{TakeOwnership(h.s, "b", "b1", "")})
	if h.s.Owner != "b" || h.s.Epoch != 2 || Owns(h.s, "a", "a1") || !Owns(h.s, "b", "b1") {
		t.Fatalf("owner %s epoch %d after b took it, want b at 2", h.s.Owner, h.s.Epoch)
	}
	h.apply(Recover(h.s, Retry{MaxAttempts: 3}))
	h.drive()
	h.apply(RetryDue(h.s, reqs[0].CallRef, 2))
	f := h.requestsOf(reqs[1].CallRef)
	if len(f) != 2 || f[1].Node != "b" || f[1].Attempt != 1 {
		t.Fatalf("requests of the unclaimed call: %+v, want a's then b's, same attempt", f)
	}
	r := h.requestsOf(reqs[0].CallRef)
	if len(r) != 2 || r[1].Attempt != 2 || r[1].Node != "b" {
		t.Fatalf("requests of the claimed call: %+v, want a's attempt 1 then b's retry, attempt 2", r)
	}
	// Driving again decides nothing new: the reissue happens once.
	n := len(h.log)
	h.drive()
	if len(h.log) != n {
		t.Fatalf("a second drive decided %d more events", len(h.log)-n)
	}
	// Only b's request may be claimed for attempt 1 of the free call.
	reqID := func(ref events.CallRef, k int) string {
		seen := 0
		for _, ev := range h.log {
			if ev.Type != events.TypeToolCallRequested {
				continue
			}
			p, _ := events.Decode(ev)
			if p.(*events.ToolCallRequested).CallRef == ref {
				if seen == k {
					return ev.ID
				}
				seen++
			}
		}
		return ""
	}
	if err := CurrentRequest(h.s, reqs[1].CallRef, 1, reqID(reqs[1].CallRef, 0)); !errors.Is(err, ErrStaleClaim) {
		t.Fatalf("the earlier owner's request: err=%v, want %v", err, ErrStaleClaim)
	}
	if err := CurrentRequest(h.s, reqs[1].CallRef, 1, reqID(reqs[1].CallRef, 1)); err != nil {
		t.Fatalf("the new owner's request: %v", err)
	}
}

// TestWorkspaceAwayBlocksOnlyWhatNeedsIt checks docs/spec.md §7: when the
// owner cannot reach the session's workspace (its node was lost), calls that
// need it are blocked as unavailable naming the node, a lost safe call that
// needs it is not retried, and calls that need no workspace carry on.
func TestWorkspaceAwayBlocksOnlyWhatNeedsIt(t *testing.T) {
	h := owned(t)
	h.turn("t1", false, call("w", "write", `{"path":"y"}`), call("r", "read", `{"path":"x"}`), call("f", "fetch", `{"path":"z"}`))
	// Serial turn: only the write is requested; a claims it and is lost.
	w := h.requested()[0]
	d, _ := Claim(h.s, w.CallRef, 1, "a")
	h.apply(d)
	h.apply([]Draft{TakeOwnership(h.s, "b", "b1", "a")})
	h.apply(Recover(h.s, Retry{MaxAttempts: 3}))
	h.drive()
	// read needs the workspace: blocked; fetch does not: requested from b.
	f := h.requestsOf(events.CallRef{Turn: "t1", Call: "f", Index: 2})
	if len(f) != 1 || f[0].Node != "b" {
		t.Fatalf("fetch requests %+v, want one from b", f)
	}
	h.claimAndFinish(f[0], Outcome{OK: true}, Retry{})
	c := h.committed()
	if len(c) != 3 {
		t.Fatalf("%d results committed, want 3", len(c))
	}
	if c[0].Result.Outcome != events.OutcomeIndeterminate {
		t.Fatalf("lost never write: %s, want indeterminate", c[0].Result.Outcome)
	}
	if r := c[1].Result; r.Outcome != events.OutcomeBlocked || r.Block != events.BlockUnavailable || !strings.Contains(r.Content[0].Text, "node a") {
		t.Fatalf("read without its workspace: %+v, want blocked/unavailable naming node a", r)
	}
	if c[2].Result.Outcome != events.OutcomeOK {
		t.Fatalf("fetch: %s, want ok", c[2].Result.Outcome)
	}
	// A new turn: the pre-phase blocks what needs the workspace.
	h.turn("t2", true, call("r2", "read", `{"path":"x"}`), call("f2", "fetch", `{"path":"z"}`))
	if got := h.s.turns["t2"].Plan[0]; got.Blocked != events.BlockUnavailable || !strings.Contains(got.Reason, "node a") {
		t.Fatalf("plan of read: %+v, want blocked unavailable naming node a", got)
	}
	if got := h.s.turns["t2"].Plan[1]; got.Blocked != "" {
		t.Fatalf("plan of fetch: %+v, want admitted", got)
	}
	// The workspace's node is back and takes the session: it runs again.
	h.apply([]Draft{TakeOwnership(h.s, "a", "a2", "")})
	if h.s.WorkspaceAway != "" {
		t.Fatalf("workspace away %q after its node took the session back", h.s.WorkspaceAway)
	}
}

// TestSafeCallLostWithoutWorkspaceIsNotRetried checks that a safe call that
// needs the workspace, lost with its node, ends as an error naming the node
// instead of being retried where the workspace is not.
func TestSafeCallLostWithoutWorkspaceIsNotRetried(t *testing.T) {
	h := owned(t)
	h.tools["check"] = mustTool(t, "check", tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplaySafe})
	h.turn("t1", true, call("c", "check", `{"path":"x"}`))
	r := h.requested()[0]
	d, _ := Claim(h.s, r.CallRef, 1, "a")
	h.apply(d)
	h.apply([]Draft{TakeOwnership(h.s, "b", "b1", "a")})
	h.apply(Recover(h.s, Retry{MaxAttempts: 3}))
	h.drive()
	c := h.committed()
	if len(c) != 1 || c[0].Result.Outcome != events.OutcomeError || !strings.Contains(c[0].Result.Content[0].Text, "node a") {
		t.Fatalf("committed %+v, want one error naming node a", c)
	}
	if n := len(h.requestsOf(r.CallRef)); n != 1 {
		t.Fatalf("%d requests, want the first only (no retry)", n)
	}
}

// TestOwnershipEpochsCountUp checks that the fold refuses an OwnershipTaken
// that does not follow the last epoch, and that a release ends ownership.
func TestOwnershipEpochsCountUp(t *testing.T) {
	h := owned(t)
	bad := events.Event{ID: "x", Tenant: "default", Session: "s1", Seq: h.s.Seq + 1, Type: events.TypeOwnershipTaken,
		Data: events.Payload(events.OwnershipTaken{Node: "b", Epoch: 5})}
	if err := h.s.Apply(bad); err == nil {
		t.Fatal("an OwnershipTaken at epoch 5 after epoch 1 applied, want an error")
	}
	h.apply(Release(h.s))
	if !h.s.Released || Owns(h.s, "a", "a1") {
		t.Fatalf("after release: released=%v owns=%v, want released and not owned", h.s.Released, Owns(h.s, "a", "a1"))
	}
	if d := Release(h.s); len(d) != 0 {
		t.Fatalf("releasing a released session decided %v", d)
	}
	// Nothing is reissued while released: the next owner does it.
	h.turn("t1", true, call("r", "read", `{"path":"x"}`))
	n := len(h.requested())
	h.apply([]Draft{TakeOwnership(h.s, "b", "b1", "")})
	h.drive()
	if got := h.requested(); len(got) != n+1 || got[n].Node != "b" {
		t.Fatalf("requests after b took the released session: %+v", got)
	}
}

// TestReissueMemoHidesNothing checks that the memo which spares reissue its
// walk through every turn never hides a request to reissue: after each new
// owner it finds the earlier owner's unclaimed requests again, and once they
// are reissued it agrees with a fresh walk.
func TestReissueMemoHidesNothing(t *testing.T) {
	h := owned(t)
	h.turn("t1", true, call("r", "read", `{"path":"x"}`), call("f", "fetch", `{"path":"y"}`))
	walk := func() int { // reissue without the memo
		memo := h.s.reissueClear
		h.s.reissueClear = 0
		n := len(reissue(h.s))
		h.s.reissueClear = memo
		return n
	}
	for _, owner := range []string{"b", "c", "d"} {
		if n := len(reissue(h.s)); n != 0 || walk() != 0 {
			t.Fatalf("before %s takes over: %d to reissue (a fresh walk: %d), want 0", owner, n, walk())
		}
		h.apply([]Draft{TakeOwnership(h.s, owner, owner+"1", "")})
		d := reissue(h.s)
		if len(d) != 2 {
			t.Fatalf("after %s took over: %d requests to reissue, want the 2 unclaimed ones", owner, len(d))
		}
		h.apply(d)
	}
}
