package replay

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

// checkpointOf signs evs[i] as the node's checkpointer does.
func checkpointOf(t *testing.T, key ed25519.PrivateKey, evs []events.Event, i int) Checkpoint {
	t.Helper()
	h, err := events.Hash(evs[i])
	if err != nil {
		t.Fatal(err)
	}
	cp := events.SignCheckpoint(key, events.Checkpoint{Chain: events.Chain2, Tenant: tenant, Session: session, Seq: evs[i].Seq, Hash: h,
		Time: evs[i].Time, Signed: evs[i].Time.Add(time.Second), Node: "n1", IntervalMS: 1000, Every: 256})
	return Checkpoint{Checkpoint: cp, From: "the test"}
}

// TestCheckpoints checks a log against checkpoints kept outside it: one
// beyond its last event says it was cut and which events went; one whose
// event hashes otherwise now, or signed by another key, or of another rule,
// is a problem; the events after the latest are the window a cut goes
// unseen in; another session's checkpoint is no concern of this log's.
func TestCheckpoints(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	full := chain(goodLog())
	n := len(full)
	for _, tc := range []struct {
		name    string
		evs     []events.Event
		cps     func() []Checkpoint
		fail    []string // in a problem
		warn    []string // in a warning
		covered uint64
	}{
		{name: "the head checkpointed", evs: full, cps: func() []Checkpoint { return []Checkpoint{checkpointOf(t, key, full, n-1)} }, covered: uint64(n)},
		{name: "the tail cut after the checkpoint", evs: full[:n-3],
			cps:  func() []Checkpoint { return []Checkpoint{checkpointOf(t, key, full, n-1)} },
			fail: []string{"the log was cut: the checkpoint in the test, signed by node n1", "and the log ends at seq", "were removed"}},
		{name: "an earlier checkpoint and a later one beyond the end", evs: full[:n-3],
			cps: func() []Checkpoint {
				return []Checkpoint{checkpointOf(t, key, full, 3), checkpointOf(t, key, full, n-1)}
			},
			fail: []string{"the log was cut"}, covered: 4},
		{name: "events after the latest checkpoint", evs: full,
			cps:  func() []Checkpoint { return []Checkpoint{checkpointOf(t, key, full, n-4)} },
			warn: []string{"come after the latest checkpoint", "a cut of them would not show"}, covered: uint64(n - 3)},
		{name: "the checkpointed event changed", evs: func() []events.Event {
			e := chain(goodLog())
			e[n-4].Time = e[n-4].Time.Add(time.Millisecond)
			return e
		}(),
			cps:  func() []Checkpoint { return []Checkpoint{checkpointOf(t, key, full, n-4)} },
			fail: []string{"was changed, or the log before it rewritten, after the checkpoint in the test"}},
		{name: "signed by another key", evs: full,
			cps:  func() []Checkpoint { return []Checkpoint{checkpointOf(t, otherKey, full, n-1)} },
			fail: []string{"which is not a key given to check it"}},
		{name: "a forged signature", evs: full[:n-3],
			cps: func() []Checkpoint {
				cp := checkpointOf(t, key, full, n-1)
				cp.Seq++
				return []Checkpoint{cp}
			},
			fail: []string{"does not verify"}},
		{name: "another rule", evs: full,
			cps: func() []Checkpoint {
				cp := checkpointOf(t, key, full, n-1)
				cp.Chain = events.Chain1
				return []Checkpoint{cp}
			},
			fail: []string{"names the chain rule callsheet-chain-1, but the log is linked by callsheet-chain-2"}},
		{name: "another session's", evs: full[:n-3],
			cps: func() []Checkpoint {
				cp := checkpointOf(t, key, full, n-1)
				cp.Session = "other"
				return []Checkpoint{cp}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := VerifyLog(tenant, session, tc.evs, VerifyOptions{Keys: []ed25519.PublicKey{pub}, Checkpoints: tc.cps()})
			text := problemsText(r.Problems)
			for _, w := range tc.fail {
				if !strings.Contains(text, w) || !Failed(r.Problems) {
					t.Fatalf("want a problem holding %q:\n%s", w, text)
				}
			}
			for _, w := range tc.warn {
				if !strings.Contains(text, "warning: ") || !strings.Contains(text, w) {
					t.Fatalf("want a warning holding %q:\n%s", w, text)
				}
			}
			if len(tc.fail) == 0 && Failed(r.Problems) && tc.name != "another session's" {
				t.Fatalf("problems:\n%s", text)
			}
			if r.Checkpointed != tc.covered {
				t.Fatalf("Checkpointed = %d, want %d", r.Checkpointed, tc.covered)
			}
		})
	}
}
