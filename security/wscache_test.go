package security

// Attacks on the node's workspace handle cache (node/workspaces.go,
// workspace.Cache): a session's calls share one verified handle on its
// workspace, and each call checks that the workspace's name still leads,
// without a symbolic link, to the directory the handle holds. A hostile
// session that owns the parent of a nested workspace changes that directory
// under a cached handle; the nested session must see what a fresh open
// would (a refusal naming the link, or the new directory), never the old
// directory or anything outside, and a rewind that drops handles must not
// close one under a running call.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// TestWorkspaceCacheParentSwap: session C's workspace is w1/a/b and its
// handle is cached by a first call. The owner of w1 swaps a, a parent of
// C's workspace, for a link: first to a.real, C's very directory, then to
// a peer directory holding a b of its own. Each of C's calls is refused
// with an error naming the link (a workspace name never traverses one, even
// to the same directory), nothing of the peer is read or written, and once
// a is a directory again C's calls work in it.
func TestWorkspaceCacheParentSwap(t *testing.T) {
	p := node(t, nil)
	owner := mustOpen(t, p, "", "w1")
	shellOK(t, p, "", owner, "mkdir -p a/b peer/b && printf 'PEER-SECRET\\n' > peer/b/secret.txt")
	nested := mustOpen(t, p, "", "w1/a/b")
	turnAs(t, p, "", nested, []map[string]any{one("w0", "write", map[string]any{"path": "secret.txt", "content": "inside\n"})})
	peer := filepath.Join(wsDir(p, "default", "w1"), "peer")
	before := snapshot(t, peer)

	calls := func(round string) []map[string]any {
		return []map[string]any{
			one("r"+round, "read", map[string]any{"path": "secret.txt"}),
			one("l"+round, "read", map[string]any{"path": "."}),
			one("w"+round, "write", map[string]any{"path": "secret.txt", "content": "planted\n"}),
			one("n"+round, "write", map[string]any{"path": "new-" + round + ".txt", "content": "planted\n"}),
		}
	}
	for _, swap := range []struct{ name, command string }{
		{"a -> a.real (the same directory)", "mv a a.real && ln -s a.real a"},
		{"a -> peer", "rm a && ln -s peer a"},
	} {
		shellOK(t, p, "", owner, swap.command)
		tv := turnAs(t, p, "", nested, calls(strings.Fields(swap.name)[2]))
		for _, r := range tv.Results {
			if got := leaked(r, "PEER-SECRET"); len(got) > 0 {
				t.Errorf("%s: %s %s read the peer's file: %q", swap.name, r.ID, r.Name, text(r))
			}
			if r.Outcome == events.OutcomeOK {
				t.Errorf("%s: %s %s ran with a cached handle through the swapped parent: %s", swap.name, r.ID, r.Name, text(r))
			} else if !strings.Contains(text(r), "symbolic link") {
				t.Errorf("%s: %s %s: %q; want an error naming the symbolic link", swap.name, r.ID, r.Name, text(r))
			}
		}
		sameSnapshot(t, swap.name, peer, before)
	}
	shellOK(t, p, "", owner, "rm a && mv a.real a")
	tv := turnAs(t, p, "", nested, []map[string]any{one("back", "read", map[string]any{"path": "secret.txt"})})
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK || !strings.Contains(text(r), "inside") {
		t.Errorf("read once a is a directory again: %s %q", r.Outcome, text(r))
	}
}

// TestWorkspaceCacheReplacedDirectory: session B's workspace w1/sub is
// cached by a first call; the owner of w1 moves sub aside and makes a new,
// empty sub (then deletes that one and makes another). B's next calls work
// in the new directory: its old file is gone from its view, and what it
// writes lands at w1/sub, not in the directory moved aside (now the
// owner's) nor in a deleted one.
func TestWorkspaceCacheReplacedDirectory(t *testing.T) {
	p := node(t, nil)
	owner := mustOpen(t, p, "", "w1")
	shellOK(t, p, "", owner, "mkdir sub")
	nested := mustOpen(t, p, "", "w1/sub")
	turnAs(t, p, "", nested, []map[string]any{one("w0", "write", map[string]any{"path": "old.txt", "content": "B-OLD\n"})})
	w1 := wsDir(p, "default", "w1")

	for i, replace := range []string{"mv sub moved && mkdir sub", "rm -rf sub && mkdir sub"} {
		shellOK(t, p, "", owner, replace)
		name := fmt.Sprintf("new-%d.txt", i)
		tv := turnAs(t, p, "", nested, []map[string]any{
			one(fmt.Sprintf("r%d", i), "read", map[string]any{"path": "old.txt"}),
			one(fmt.Sprintf("w%d", i), "write", map[string]any{"path": name, "content": "B-NEW\n"}),
		})
		if r := tv.Results[0]; r.Outcome == events.OutcomeOK {
			t.Errorf("after %q, B still reads its old directory: %q", replace, text(r))
		}
		if r := tv.Results[1]; r.Outcome != events.OutcomeOK {
			t.Errorf("after %q, B's write failed: %s", replace, text(r))
		}
		if b, err := os.ReadFile(filepath.Join(w1, "sub", name)); err != nil || string(b) != "B-NEW\n" {
			t.Errorf("after %q, B's write is not at w1/sub/%s (%q, %v): it went to the old directory", replace, name, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(w1, "moved", "new-0.txt")); err == nil {
		t.Error("B's write landed in the directory the owner moved aside")
	}
}

// TestWorkspaceCacheRewindWhileCallsRun: the owner of w1 rewinds its
// workspace again and again (each rewind drops the handles of w1 and of the
// workspaces nested in it) while session B, on w1/sub, runs turns of reads
// and writes. A handle dropped under a running call must stay open until
// the call ends: every call of B succeeds. After the rewinds B sees what
// the rewind restored.
func TestWorkspaceCacheRewindWhileCallsRun(t *testing.T) {
	p := node(t, nil)
	owner := mustOpen(t, p, "", "w1")
	shellOK(t, p, "", owner, "mkdir sub")
	nested := mustOpen(t, p, "", "w1/sub")
	turnAs(t, p, "", nested, []map[string]any{one("w0", "write", map[string]any{"path": "b.txt", "content": "B\n"})})
	// f1 creates sub/f.txt (pre-image: absent), g1 replaces it: a rewind
	// to f1 removes it.
	turnAs(t, p, "", owner, []map[string]any{one("f1", "write", map[string]any{"path": "sub/f.txt", "content": "f1\n"})})
	turnAs(t, p, "", owner, []map[string]any{one("g1", "write", map[string]any{"path": "sub/f.txt", "content": "g1\n"})})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var failed, unanswered []string
	var turns atomic.Int64
	go func() {
		defer wg.Done()
		for round := 0; ; round++ {
			select {
			case <-stop:
				return
			default:
			}
			var calls []map[string]any
			for i := range 8 {
				calls = append(calls,
					one(fmt.Sprintf("r%d", i), "read", map[string]any{"path": "b.txt"}),
					one(fmt.Sprintf("l%d", i), "read", map[string]any{"path": "."}))
			}
			calls = append(calls, one("w", "write", map[string]any{"path": fmt.Sprintf("w-%d.txt", round), "content": "x\n"}))
			// Not turnAs: it may not fail the test from this goroutine.
			var tv projections.Turn
			code, err := p.Do("POST", "/v1/sessions/"+nested+"/turns", map[string]any{"calls": calls}, &tv)
			if err != nil || code != http.StatusOK || len(tv.Results) != len(calls) {
				// A turn the node could not take now (a 503 under load)
				// ran no call: nothing the cache did is judged by it.
				unanswered = append(unanswered, fmt.Sprintf("turn %d: %d %v", round, code, err))
				time.Sleep(10 * time.Millisecond)
				continue
			}
			turns.Add(1)
			for _, r := range tv.Results {
				if r.Outcome != events.OutcomeOK {
					failed = append(failed, fmt.Sprintf("turn %d: %s %s: %s", round, r.ID, r.Name, text(r)))
				}
			}
		}
	}()
	// At least 60 rewinds, and on until B ran 40 turns among them (at
	// most 600 rewinds: a loaded machine may favour the rewinds).
	codes := map[int]int{}
	for i := 0; i < 600 && (i < 60 || turns.Load() < 40); i++ {
		var raw []byte
		code, err := p.Do("POST", "/v1/sessions/"+owner+"/rewind", map[string]any{"call": "f1"}, &raw)
		if err != nil {
			t.Fatal(err)
		}
		if codes[code]++; code != http.StatusOK && codes[code] == 1 {
			t.Logf("a rewind answered %d: %s", code, raw)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("rewinds by status %v; %d turns of B ran meanwhile; not taken: %q", codes, turns.Load(), unanswered)
	if codes[http.StatusOK] == 0 {
		t.Fatalf("no rewind succeeded: %v", codes)
	}
	if turns.Load() == 0 {
		t.Fatal("no turn of B ran while the owner rewound")
	}
	if len(failed) > 0 {
		t.Errorf("%d calls of B failed while the owner rewound; first: %s", len(failed), failed[0])
	}
	if t.Failed() {
		t.Logf("the node's log:\n%s", p.Stderr())
	}
	tv := turnAs(t, p, "", nested, []map[string]any{one("after", "read", map[string]any{"path": "f.txt"})})
	if r := tv.Results[0]; r.Outcome == events.OutcomeOK {
		t.Errorf("after the rewind B still reads f.txt: %q", text(r))
	}
}

// TestWorkspaceCacheNestedRaceSwap: the owner of w1 keeps swapping d, the
// directory of session B's workspace w1/d, for a link outside (an atomic
// renameat2 exchange, racer) while B's turns read and write. No call of B
// may read or change anything outside; some are refused with an error
// naming the link (each call checks its cached handle) and some run.
func TestWorkspaceCacheNestedRaceSwap(t *testing.T) {
	p := node(t, nil)
	out, before := outsideDir(t, map[string]string{"secret.txt": "OUTSIDE-SECRET\n"})
	owner := mustOpen(t, p, "", "w1")
	shellOK(t, p, "", owner, "mkdir d")
	nested := mustOpen(t, p, "", "w1/d")
	turnAs(t, p, "", nested, []map[string]any{one("w0", "write", map[string]any{"path": "secret.txt", "content": "inside\n"})})
	racer(t, p, owner, wsDir(p, "default", "w1"), out)

	ran, refused := 0, 0
	var breached []string
	for round := range raceRounds / 2 {
		var calls []map[string]any
		for i := range 8 {
			calls = append(calls,
				one(fmt.Sprintf("r%d", i), "read", map[string]any{"path": "secret.txt"}),
				one(fmt.Sprintf("w%d", i), "write", map[string]any{"path": fmt.Sprintf("w-%d-%d.txt", round, i), "content": "planted\n"}))
		}
		tv := turnAs(t, p, "", nested, calls)
		for _, r := range tv.Results {
			if got := leaked(r, "OUTSIDE-SECRET"); len(got) > 0 {
				breached = append(breached, fmt.Sprintf("round %d: %s read outside: %q", round, r.ID, text(r)))
			}
			switch {
			case r.Outcome == events.OutcomeOK:
				ran++
			case strings.Contains(text(r), "symbolic link"):
				refused++
			}
		}
		if changed := diff(t, out, before); len(changed) > 0 {
			t.Fatalf("round %d: changed outside: %s", round, strings.Join(changed, "; "))
		}
	}
	t.Logf("%d calls ran, %d refused naming the link", ran, refused)
	if len(breached) > 0 {
		t.Errorf("B crossed the workspace boundary in %d calls; first: %s", len(breached), breached[0])
	}
	checkpointsOf(t, p, nested, before)
	if ran == 0 || refused == 0 {
		t.Errorf("%d calls ran and %d were refused: the race was not exercised, or a cached handle was used without the check", ran, refused)
	}
}
