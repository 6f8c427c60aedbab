package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/signing"
)

// checkpointNode runs a node with the given checkpoint cadence (interval
// negative: none) and a session of three turns, left open.
func checkpointNode(t *testing.T, interval time.Duration, every int) (*node.Node, string, string) {
	t.Helper()
	dir := t.TempDir()
	n, err := node.New(context.Background(), node.Options{DataDir: dir, CheckpointInterval: interval, CheckpointEvents: every})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := n.OpenSession(ctx, config.DefaultTenant, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for i, calls := range [][]events.CallSpec{
		{{ID: "w", Name: "write", Arguments: json.RawMessage(`{"path":"notes.md","content":"the original text\n"}`)}},
		{{ID: "r1", Name: "read", Arguments: json.RawMessage(`{"path":"notes.md"}`)}, {ID: "r2", Name: "read", Arguments: json.RawMessage(`{"path":"notes.md"}`)}},
		{{ID: "g", Name: "glob", Arguments: json.RawMessage(`{"pattern":"*.md"}`)}},
	} {
		if _, err := n.SubmitTurn(ctx, config.DefaultTenant, info.Session, fmt.Sprintf("t%d", i+1), calls, true); err != nil {
			t.Fatal(err)
		}
	}
	return n, info.Session, dir
}

// checkpointed waits until the checkpoint store holds the session's head
// at seq, and returns it.
func (s *store) checkpointed(tenant, session string, seq uint64) events.Checkpoint {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cps, err := natslog.OpenCheckpoints(ctx, s.js)
	if err != nil {
		s.t.Fatal(err)
	}
	for {
		cp, ok, err := cps.Get(ctx, tenant, session)
		if err != nil {
			s.t.Fatal(err)
		}
		if ok && cp.Seq >= seq {
			return cp
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("no checkpoint of seq %d of %s (latest: %+v, %v)", seq, session, cp, ok)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lastSeq returns the seq of the session's last stored event.
func (s *store) lastSeq(tenant, session string) uint64 {
	s.t.Helper()
	ms, _ := s.messages(tenant, session)
	evs := eventsOf(s.t, ms[len(ms)-1])
	n, _ := evs[len(evs)-1]["seq"].(json.Number).Int64()
	return uint64(n)
}

// cutFrom deletes the session's messages from the one holding the nth event
// of typ on, as someone with the node's NATS credentials could, and returns
// the seq of the first event removed and of the last one.
func (s *store) cutFrom(tenant, session string, typ events.Type, nth int) (first, last uint64) {
	s.t.Helper()
	last = s.lastSeq(tenant, session)
	orig, _ := s.messages(tenant, session)
	i, _, _ := find(s.t, orig, typ, nth)
	evs := eventsOf(s.t, orig[i])
	n, _ := evs[0]["seq"].(json.Number).Int64()
	s.rewrite(tenant, session, func(ms []stored) []stored { return ms[:i] })
	return uint64(n), last
}

// TestCutTailCaught deletes the last events of a session from a real node's
// store with the node's NATS credentials: of an open session (its last
// turn) and of a closed, signed one (its last turn, SessionClosed and the
// HeadSigned of the close). Without checkpoints, what is left verifies "ok,
// 0 warnings" (the control: as it did before checkpoints); with them,
// --verify says the log was cut and which events are missing, and a
// witness file kept away from NATS still says so after the checkpoint
// store's entry is purged too; so does the outside verifier with the
// witness.
func TestCutTailCaught(t *testing.T) {
	t.Run("without checkpoints, a cut tail verifies", func(t *testing.T) {
		n, sess, _ := checkpointNode(t, -1, 0)
		st := openStore(t, n)
		first, last := st.cutFrom(config.DefaultTenant, sess, events.TypeTurnReceived, 3)
		out, err := verifyNATS(t, n, sess)
		if err != nil || !strings.Contains(out, ": ok, 0 warnings") {
			t.Fatalf("control: the cut session (seq %d to %d removed) did not verify as before: %v\n%s", first, last, err, out)
		}
		t.Logf("control, seq %d to %d removed:\n%s", first, last, out)
	})

	for _, closed := range []bool{false, true} {
		name := "open session"
		if closed {
			name = "closed, signed session"
		}
		t.Run(name, func(t *testing.T) {
			n, sess, data := checkpointNode(t, 50*time.Millisecond, 0)
			pub := signing.PublicKeyPath(signing.DefaultKeyPath(data))
			witness := filepath.Join(t.TempDir(), "witness.ndjson")
			stopWitness := startWitness(t, "--witness", witness, "--nats", n.ClientURL(), "--nats-creds", n.NATSCredentials(), "--pubkey", pub)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if closed {
				if err := n.CloseSession(ctx, config.DefaultTenant, sess, "done"); err != nil {
					t.Fatal(err)
				}
			}
			st := openStore(t, n)
			head := st.lastSeq(config.DefaultTenant, sess)
			cp := st.checkpointed(config.DefaultTenant, sess, head)
			if cp.Closed != closed {
				t.Fatalf("checkpoint %+v: closed %v, want %v", cp, cp.Closed, closed)
			}
			waitWitnessed(t, witness, sess, head)
			stopWitness()
			out, err := verifyNATS(t, n, sess, "--pubkey", pub)
			if err != nil || !strings.Contains(out, ": ok, 0 warnings") || !strings.Contains(out, fmt.Sprintf("holds the head (seq %d)", head)) {
				t.Fatalf("the untouched session: %v\n%s", err, out)
			}
			// The export, before the cut, for the outside verifier.
			export := filepath.Join(t.TempDir(), "session.ndjson")
			b, err := run(t, "--session", sess, "--nats", n.ClientURL(), "--nats-creds", n.NATSCredentials(), "--export")
			if err != nil {
				t.Fatal(err)
			}

			first, last := st.cutFrom(config.DefaultTenant, sess, events.TypeTurnReceived, 3)
			want := fmt.Sprintf("the log was cut: the checkpoint in %s, signed by node %s", storeName, cp.Node)
			want2 := fmt.Sprintf("holds the head at seq %d (hash %s), and the log ends at seq %d: seq %d to %d were removed", last, cp.Hash, first-1, first, last)
			out, err = verifyNATS(t, n, sess, "--pubkey", pub)
			if !errors.Is(err, ErrVerifyFailed) || !strings.Contains(out, want) || !strings.Contains(out, want2) {
				t.Fatalf("the cut session (seq %d to %d removed): %v\n%s\nwant %q and %q", first, last, err, out, want, want2)
			}
			if closed && !strings.Contains(out, "the session's close among them") {
				t.Fatalf("the cut closed session: the report does not say its close went:\n%s", out)
			}
			t.Logf("seq %d to %d removed:\n%s", first, last, out)

			// The attacker purges the checkpoint too: the witness, away
			// from NATS, still holds the head.
			kv, err := st.js.KeyValue(ctx, natslog.DefaultCheckpointBucket)
			if err != nil {
				t.Fatal(err)
			}
			if err := kv.Purge(ctx, config.DefaultTenant+"."+sess); err != nil {
				t.Fatal(err)
			}
			out, err = verifyNATS(t, n, sess, "--pubkey", pub)
			if !errors.Is(err, ErrVerifyFailed) && !strings.Contains(out, "checkpoints: none found") {
				t.Fatalf("after the purge, the store's verify: %v\n%s", err, out)
			}
			out, err = verifyNATS(t, n, sess, "--pubkey", pub, "--witness", witness)
			if !errors.Is(err, ErrVerifyFailed) || !strings.Contains(out, "the log was cut: the checkpoint in the witness "+witness) || !strings.Contains(out, want2) {
				t.Fatalf("the cut session with the witness: %v\n%s", err, out)
			}

			// The export cut as the store was, checked from outside.
			lines := strings.SplitAfter(b, "\n")
			cutExport := filepath.Join(t.TempDir(), "cut.ndjson")
			if err := os.WriteFile(cutExport, []byte(strings.Join(lines[:first-1], "")), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(export, []byte(b), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := testnode.Outsider(t, "--pubkey", pub, "--witness", witness, export); err != nil {
				t.Fatalf("the outside verifier refuses the whole export: %v\n%s", err, out)
			}
			out, err = testnode.Outsider(t, "--pubkey", pub, "--witness", witness, cutExport)
			if err == nil || !strings.Contains(out, fmt.Sprintf("the export was cut: the witness holds a head signed at seq %d", last)) {
				t.Fatalf("the outside verifier passes the cut export: %v\n%s", err, out)
			}
		})
	}
}

// TestCheckpointWindowReported: with checkpoints every 5 events and an
// interval no test waits for, the events after the latest checkpoint are
// reported as the window a cut would go unseen in.
func TestCheckpointWindowReported(t *testing.T) {
	n, sess, _ := checkpointNode(t, time.Hour, 5)
	st := openStore(t, n)
	// Where the last checkpoint falls depends on how the turns' events were
	// batched: wait until the checkpoints have caught up (fewer than 5
	// events after the latest), and if the head itself is checkpointed,
	// add one event (a signature), which makes none due.
	head := st.lastSeq(config.DefaultTenant, sess)
	cp := st.checkpointed(config.DefaultTenant, sess, head-min(head, 4))
	if cp.Seq == head {
		if _, err := n.SignSession(context.Background(), config.DefaultTenant, sess, "alice"); err != nil {
			t.Fatal(err)
		}
		head = st.lastSeq(config.DefaultTenant, sess)
		if head != cp.Seq+1 {
			t.Fatalf("head %d after the checkpoint of seq %d, want one event more", head, cp.Seq)
		}
	}
	out, err := verifyNATS(t, n, sess)
	want := fmt.Sprintf("seq %d to %d", cp.Seq+1, head)
	if err != nil || !strings.Contains(out, want) || !strings.Contains(out, "come after the latest checkpoint") ||
		!strings.Contains(out, fmt.Sprintf("the %d events after it are covered by none", head-cp.Seq)) {
		t.Fatalf("verify: %v\n%s\nwant %q", err, out, want)
	}
}

// startWitness runs replay --witness ARGS until the returned func stops it.
func startWitness(t *testing.T, args ...string) (stop func()) {
	t.Helper()
	m := NewMain()
	m.Stdout, m.Stderr = &strings.Builder{}, &strings.Builder{}
	if err := m.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replay --witness: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitWitnessed waits until the witness file holds the session's head at
// seq.
func waitWitnessed(t *testing.T, path, session string, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if cps, err := readWitness(path); err == nil {
			for _, cp := range cps {
				if cp.Session == session && cp.Seq >= seq {
					return
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("the witness %s holds no head at seq %d of %s:\n%s", path, seq, session, b)
}
