package tools

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/tool"
)

// groupKiller is a fleet cap's lease as the reaper acts on it: it kills the
// group it is handed after a while, and notes when the tool released it.
type groupKiller struct {
	after time.Duration

	mu       sync.Mutex
	pgids    []int
	released []int
}

func (g *groupKiller) Hold(pgid int) func() {
	g.mu.Lock()
	g.pgids = append(g.pgids, pgid)
	g.mu.Unlock()
	time.AfterFunc(g.after, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	return func() {
		g.mu.Lock()
		g.released = append(g.released, pgid)
		g.mu.Unlock()
	}
}

// TestLeaseHoldsTheCallsWholeGroup: a shell call with a lease hands it one
// process group, and killing that group (as the reaper does when its slot
// is about to lapse) ends the whole call, a background child included, in
// the sandbox and out of it; the tool releases the group once it ended.
func TestLeaseHoldsTheCallsWholeGroup(t *testing.T) {
	needSandbox(t)
	for _, c := range []struct {
		name string
		opts ShellOptions
	}{{"sandboxed", ShellOptions{}}, {"unsandboxed", ShellOptions{Sandbox: ShellSandboxOff}}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			g := &groupKiller{after: 300 * time.Millisecond}
			start := time.Now()
			r, err := call(t, tool.WithLease(e.ctx, g), shellWith(t, c.opts), `{"command": "sleep 30 & sleep 30; echo never"}`)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("err=%v, want a result", err)
			}
			got := text(t, r)
			if strings.Contains(got, "never") || !strings.Contains(got, "137") {
				t.Fatalf("text=%q, want the call killed (137) before its end", got)
			}
			if took > 10*time.Second {
				t.Fatalf("the call ended %s after its group was killed: something of it ran on", took)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.pgids) != 1 || g.pgids[0] <= 1 || len(g.released) != 1 || g.released[0] != g.pgids[0] {
				t.Fatalf("held %v, released %v: want one group, held and released", g.pgids, g.released)
			}
		})
	}
}
