package fleet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/internal/testnode"
)

// TestCapSlotFreesWithItsNode: a node runs a call of hold_cap (a fleet cap
// of one, a 60 s timeout) that would run for 30 s, and is then stopped
// (SIGSTOP, n1) or killed -9 (n3); a call of the same tool posted
// to n2 runs within the lease, not at the victim's call's deadline, and only
// once that call ended: its process group was killed by the victim's reaper
// (before the slot could lapse when the node stopped, at once when it died),
// so the cap held throughout.
func TestCapSlotFreesWithItsNode(t *testing.T) {
	bin := nodeBinary(t)
	w := newWorld(t, bin, true, nil, "")
	survivor := w.f.Proc("n2")
	// Each case loses a node of its own: n1 is stopped, then resumed; n3
	// is killed last, so no node is restarted.
	for _, c := range []struct {
		name, victim string
		down         func(*testnode.Proc) error
	}{
		{"stopped", "n1", func(p *testnode.Proc) error { return p.Pause() }},
		{"killed", "n3", func(p *testnode.Proc) error { p.Kill(); return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			victim := w.f.Proc(c.victim)
			vs, ss := w.open(t, victim), w.open(t, survivor)
			if owner, _, _ := w.status(vs); owner != c.victim {
				t.Fatalf("the session opened on %s is owned by %q", c.victim, owner)
			}
			go post(victim, vs, "the victim's call", `{"id": "t1", "calls": [{"id": "c1", "name": "hold_cap", "arguments": {"secs": 30, "tag": "`+c.name+`-victim"}}]}`)
			victimFile := filepath.Join(w.counters, "hold-"+c.name+"-victim")
			for end := time.Now().Add(30 * time.Second); ; {
				if _, err := os.Stat(victimFile); err == nil {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("the victim's call did not start on %s within 30 s", c.victim)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(1500 * time.Millisecond) // a few of the slot's renewals
			down := time.Now()
			w.mu.Lock()
			w.paused[c.victim] = true // out of the world's live nodes either way
			w.mu.Unlock()
			if err := c.down(victim); err != nil {
				t.Fatal(err)
			}
			a := post(survivor, ss, "the survivor's call", `{"id": "t1", "calls": [{"id": "c1", "name": "hold_cap", "arguments": {"secs": 0, "tag": "`+c.name+`-survivor"}}]}`)
			var tv turnAnswer
			if a.err != nil || a.code != 200 || json.Unmarshal(a.body, &tv) != nil || len(tv.Results) != 1 || tv.Results[0].Outcome != "ok" {
				t.Fatalf("the survivor's call: %d %v %s", a.code, a.err, a.body)
			}
			started := stamp(t, filepath.Join(w.counters, "hold-"+c.name+"-survivor"))
			ended := stamp(t, victimFile+".alive")
			t.Logf("%s %s at %s; its call last ran %s after; n2's call started %s after (lease %s, the victim's deadline 60 s)",
				c.victim, c.name, down.Format("15:04:05.000"), ended.Sub(down).Round(time.Millisecond), started.Sub(down).Round(time.Millisecond), leaseTTL())
			if !ended.Before(started) {
				t.Fatalf("n2's call started at %s while %s's still ran (until %s): the cap of one was exceeded",
					started.Format("15:04:05.000"), c.victim, ended.Format("15:04:05.000"))
			}
			// An unbound slot is held to the victim's deadline plus CapGrace (65 s).
			if took := started.Sub(down); took > 30*time.Second {
				t.Fatalf("n2's call waited %s for %s's slot, past half the victim's deadline", took, c.victim)
			}
		})
		if t.Failed() {
			return
		}
		if c.name == "stopped" {
			// The embedded cluster needs two of its three servers: n1
			// comes back before n3 goes.
			if err := w.f.Proc("n1").Resume(); err != nil {
				t.Fatal(err)
			}
			w.mu.Lock()
			w.paused["n1"] = false
			w.mu.Unlock()
			w.waitNodes(3)
			w.waitHealthy(w.js()) // its return re-elects leaders: wait for them
		}
	}
	// hold_cap never replays: the call its lost node's reaper killed was
	// settled by the node that took its session, and ran once.
	for _, c := range []string{"stopped", "killed"} {
		b, err := os.ReadFile(filepath.Join(w.counters, "hold-"+c+"-victim"))
		if n := strings.Count(string(b), "\n"); err != nil || n != 1 {
			t.Errorf("the %s node's capped call started %d times (%v), want once", c, n, err)
		}
	}
}

// stamp reads the first line of a hold_cap note: Unix nanoseconds.
func stamp(t *testing.T, path string) time.Time {
	t.Helper()
	var b []byte
	for end := time.Now().Add(10 * time.Second); ; {
		var err error
		if b, err = os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no note in %s: %v", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		t.Fatalf("note %s: %v", path, err)
	}
	return time.Unix(0, ns)
}

// leaseTTL is the fleet's lease TTL in this run.
func leaseTTL() time.Duration {
	if *lease > 0 {
		return *lease
	}
	return config.DefaultLeaseTTL
}
