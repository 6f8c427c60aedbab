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

// TestCapSlotFreesWithItsNode: n1 runs a call of hold_cap (a fleet cap of
// one, a 60 s timeout) that would run for 30 s, and is then killed -9, or
// stopped (SIGSTOP) for good; a call of the same tool posted to n2 runs
// within the lease, not at n1's call's deadline, and only once n1's call
// ended: its process group was killed by n1's reaper (at once when n1 died,
// before the slot could lapse when n1 stopped), so the cap held throughout.
func TestCapSlotFreesWithItsNode(t *testing.T) {
	bin := nodeBinary(t)
	w := newWorld(t, bin, true, nil, "")
	n1, n2 := w.f.Proc("n1"), w.f.Proc("n2")
	for _, c := range []struct {
		name string
		down func(*testnode.Proc) error
	}{
		{"killed", func(p *testnode.Proc) error { p.Kill(); return nil }},
		{"stopped", func(p *testnode.Proc) error { return p.Pause() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			victim, survivor := w.open(n1), w.open(n2)
			if owner, _, _ := w.status(victim); owner != "n1" {
				t.Fatalf("the session opened on n1 is owned by %q", owner)
			}
			go post(n1, victim, "the victim's call", `{"id": "t1", "calls": [{"id": "c1", "name": "hold_cap", "arguments": {"secs": 30, "tag": "`+c.name+`-victim"}}]}`)
			victimFile := filepath.Join(w.counters, "hold-"+c.name+"-victim")
			for end := time.Now().Add(30 * time.Second); ; {
				if _, err := os.Stat(victimFile); err == nil {
					break
				}
				if time.Now().After(end) {
					t.Fatal("the victim's call did not start on n1 within 30 s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(1500 * time.Millisecond) // a few of the slot's renewals
			down := time.Now()
			if c.name == "stopped" {
				w.mu.Lock()
				w.paused["n1"] = true
				w.mu.Unlock()
			}
			if err := c.down(n1); err != nil {
				t.Fatal(err)
			}
			a := post(n2, survivor, "the survivor's call", `{"id": "t1", "calls": [{"id": "c1", "name": "hold_cap", "arguments": {"secs": 0, "tag": "`+c.name+`-survivor"}}]}`)
			var tv turnAnswer
			if a.err != nil || a.code != 200 || json.Unmarshal(a.body, &tv) != nil || len(tv.Results) != 1 || tv.Results[0].Outcome != "ok" {
				t.Fatalf("the survivor's call: %d %v %s", a.code, a.err, a.body)
			}
			started := stamp(t, filepath.Join(w.counters, "hold-"+c.name+"-survivor"))
			ended := stamp(t, victimFile+".alive")
			t.Logf("n1 %s at %s; its call last ran %s after; n2's call started %s after (lease %s, the victim's deadline 60 s)",
				c.name, down.Format("15:04:05.000"), ended.Sub(down).Round(time.Millisecond), started.Sub(down).Round(time.Millisecond), leaseTTL())
			if !ended.Before(started) {
				t.Fatalf("n2's call started at %s while n1's still ran (until %s): the cap of one was exceeded",
					started.Format("15:04:05.000"), ended.Format("15:04:05.000"))
			}
			// The old hold lasted the victim's deadline plus CapGrace (65 s).
			if took := started.Sub(down); took > 30*time.Second {
				t.Fatalf("n2's call waited %s for n1's slot, past half the victim's deadline", took)
			}
		})
		if t.Failed() {
			return
		}
		if c.name == "killed" {
			w.f.Restart(t, "n1")
			w.waitNodes(3)
			n1 = w.f.Proc("n1")
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
