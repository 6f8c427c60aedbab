package node_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/replay"
)

var update = flag.Bool("update", false, "rewrite the golden event streams in projections/testdata")

// TestLiveTranscriptEqualsReplayed runs a session through every kind of
// outcome and checks that each live turn answer equals the same turn folded
// from the log. With -update it also writes the session's events and
// transcript as a golden stream for the projections tests.
func TestLiveTranscriptEqualsReplayed(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Timeouts.Tools = map[string]config.Duration{"mutate": config.Duration(100 * time.Millisecond)}
	tt := &testTools{}
	n := startNode(t, t.TempDir(), &cfg, tt)
	defer n.Close()
	s := openSession(t, n)
	var live []projections.Turn
	live = append(live, submit(t, n, s, "t1", nap("a", 30), nap("b", 10), mutate("c", 10), nap("d", 1)))
	live = append(live, submit(t, n, s, "t2",
		events.CallSpec{ID: "x", Name: "nope", Arguments: json.RawMessage(`{}`)},
		events.CallSpec{ID: "y", Name: "nap", Arguments: json.RawMessage(`"{\"ms\": 1,"`)},
		events.CallSpec{ID: "z", Name: "big", Arguments: json.RawMessage(`{"ms":0}`)},
	))
	// A never call that outlives its timeout is indeterminate ...
	live = append(live, submit(t, n, s, "t3", mutate("slow", 2000)))
	// ... and the next turn carries the retry notice.
	live = append(live, submit(t, n, s, "t4", nap("e", 1)))
	if r := live[2].Results[0]; r.Outcome != events.OutcomeIndeterminate {
		t.Fatalf("slow never call: outcome %s, want indeterminate", r.Outcome)
	}
	if len(live[3].Notices) != 1 || live[3].Notices[0].Call != "slow" || live[3].Notices[0].Tool != "mutate" {
		t.Fatalf("t4 notices=%+v, want one naming call slow of mutate", live[3].Notices)
	}

	tr, err := n.Transcript(context.Background(), "default", s)
	if err != nil {
		t.Fatal(err)
	}
	for i, turn := range live {
		a, _ := projections.Marshal(turn)
		b, _ := projections.Marshal(tr.Turns[i])
		if string(a) != string(b) {
			t.Fatalf("turn %s live:\n%s\nreplayed:\n%s", turn.Turn, a, b)
		}
	}
	// Every event the runtime derives names its cause, an earlier event;
	// the log verifies clean.
	evs := recorded(t, n, s)
	seen := map[string]bool{}
	for _, ev := range evs {
		switch ev.Type {
		case events.TypeSessionOpened, events.TypeTurnReceived, events.TypeOwnershipTaken:
			// caused by a request from outside, or by the node itself
		default:
			if ev.Causation == "" || !seen[ev.Causation] {
				t.Errorf("event %d (%s) has causation %q, want an earlier event", ev.Seq, ev.Type, ev.Causation)
			}
		}
		seen[ev.ID] = true
	}
	if ps := replay.Verify("default", s, evs); replay.Failed(ps) {
		t.Fatalf("verify: %v", ps)
	}
	if *update {
		dir := filepath.Join("..", "projections", "testdata")
		f, err := os.Create(filepath.Join(dir, "mixed.events.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		enc := json.NewEncoder(f)
		for _, ev := range recorded(t, n, s) {
			if err := enc.Encode(ev); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		b, _ := projections.Marshal(tr)
		if err := os.WriteFile(filepath.Join(dir, "mixed.transcript.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
