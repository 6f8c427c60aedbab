package replay

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
)

// problemsText renders problems one per line, for failure messages.
func problemsText(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

// firstFailure returns the first problem that is not a warning.
func firstFailure(t *testing.T, ps []Problem) Problem {
	t.Helper()
	i := slices.IndexFunc(ps, func(p Problem) bool { return !p.Warning })
	if i < 0 {
		t.Fatalf("no problem found; problems:\n%s", problemsText(ps))
	}
	return ps[i]
}

// TestChainNamesTheTamperedEvent tampers with a sound chained log the ways
// someone with access to the store could, without recomputing the chain,
// and checks that the first problem names the event and what was expected.
func TestChainNamesTheTamperedEvent(t *testing.T) {
	completed := func(e []events.Event) int { return index(e, events.TypeToolCallCompleted, 1) } // seq 6
	for _, tc := range []struct {
		name    string
		edit    func([]events.Event) []events.Event
		seq     uint64   // the problem is reported at this event
		want    []string // held by the first failure
		noOther bool     // the structural checks find nothing: only the chain does
	}{
		{
			name: "a result's text changed",
			edit: func(e []events.Event) []events.Event {
				i := completed(e)
				e[i].Data = events.Payload(events.ToolCallCompleted{CallRef: ref("t1", "a", 0), Attempt: 1,
					Content: []events.Part{{Type: "text", Text: "rewritten"}}})
				return e
			},
			seq: 7, want: []string{"seq 6 (ToolCallCompleted) was changed after this event was written", "recorded its hash as"}, noOther: true,
		},
		{
			name: "the first event changed",
			edit: func(e []events.Event) []events.Event {
				e[0].Data = events.Payload(events.SessionOpened{Workspace: "elsewhere"})
				return e
			},
			seq: 2, want: []string{"seq 1 (SessionOpened) was changed"}, noOther: true,
		},
		{
			name: "an envelope's time changed",
			edit: func(e []events.Event) []events.Event {
				e[3].Time = e[3].Time.Add(1)
				return e
			},
			seq: 5, want: []string{"seq 4 (ToolCallRequested) was changed"}, noOther: true,
		},
		{
			name: "an event's link changed",
			edit: func(e []events.Event) []events.Event {
				e[5].Prev = strings.Repeat("ab", 32)
				return e
			},
			seq: 6, want: []string{"seq 5 (ToolCallStarted) and this event (ToolCallCompleted) were both changed after they were written, or this event alone, its link included"}, noOther: true,
		},
		{
			name: "an event dropped",
			edit: func(e []events.Event) []events.Event { return slices.Delete(e, 6, 7) },
			seq:  8, want: []string{"seq 7, stored between seq 6 and this one, was dropped"},
		},
		{
			name: "two events dropped",
			edit: func(e []events.Event) []events.Event { return slices.Delete(e, 6, 8) },
			seq:  9, want: []string{"seq 7 to 8, stored between seq 6 and this one, was dropped"},
		},
		{
			name: "an event dropped and the rest renumbered",
			edit: func(e []events.Event) []events.Event { return without(e, 2) },
			seq:  3, want: []string{"links from here to seq 18 all fail", "an event before this one is dropped and the later ones renumbered"},
		},
		{
			name: "an event inserted",
			edit: func(e []events.Event) []events.Event {
				// A forged event chained to the one before it, as a
				// careful forger would.
				forged := events.Event{ID: "F1", Tenant: tenant, Session: session, Seq: 7, Time: e[5].Time, Type: events.TypeWorkStateUpdated,
					Causation: e[4].ID, Data: json.RawMessage(`{"turn":"t1","call":"a","index":0,"kind":"plan","value":"forged"}`)}
				forged.Prev, _ = events.Hash(e[5])
				e = slices.Insert(e, 6, forged)
				for i := 7; i < len(e); i++ {
					e[i].Seq++
				}
				return e
			},
			seq: 8, want: []string{"is chained to seq 6 (ToolCallCompleted), not to seq 7 stored before it: the events from seq 7 to seq 7 were inserted"},
		},
		{
			name: "two events swapped",
			edit: func(e []events.Event) []events.Event {
				e[6], e[7] = e[7], e[6]
				return e
			},
			seq: 8, want: []string{"ResultCommitted is chained to seq 7 (ResultCommitted), which is stored after it: the log was reordered"},
		},
		{
			name: "an unchained event among chained ones",
			edit: func(e []events.Event) []events.Event {
				e[4].Prev = ""
				return e
			},
			seq: 5, want: []string{"ToolCallStarted carries no hash link, but the events before it are chained"},
		},
		{
			name: "the log of another session",
			edit: func(e []events.Event) []events.Event {
				e[0].Prev = events.Genesis(tenant, "S2")
				return e
			},
			seq: 1, want: []string{"the first event stored does not carry the genesis link of tenant acme session S1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := VerifyLog(tenant, session, tc.edit(chain(goodLog())), VerifyOptions{})
			p := firstFailure(t, r.Problems)
			if p.Seq != tc.seq {
				t.Fatalf("first failure is at seq %d, want %d:\n%s", p.Seq, tc.seq, problemsText(r.Problems))
			}
			for _, w := range tc.want {
				if !strings.Contains(p.Message, w) {
					t.Fatalf("first failure %q does not say %q; problems:\n%s", p, w, problemsText(r.Problems))
				}
			}
			if !strings.Contains(p.Message, "chain expects") && !strings.Contains(p.Message, "hashes to") && !strings.Contains(p.Message, "no hash link") && !strings.Contains(p.Message, "recorded its hash") {
				t.Fatalf("first failure %q does not say what the chain expected", p)
			}
			if tc.noOther {
				for _, q := range r.Problems {
					if !q.Warning && q != p {
						t.Fatalf("the chain alone should find this, but also: %s\n%s", q, problemsText(r.Problems))
					}
				}
			}
		})
	}
}

func TestChainSoundAndUnchained(t *testing.T) {
	r := VerifyLog(tenant, session, chain(goodLog()), VerifyOptions{})
	if len(r.Problems) != 0 || r.Unchained != 0 || len(r.Head) != events.HashLen || r.HeadSeq != 19 {
		t.Fatalf("sound chained log: %+v\n%s", r, problemsText(r.Problems))
	}

	// An old log: every check passes, with one warning.
	r = VerifyLog(tenant, session, goodLog(), VerifyOptions{})
	if Failed(r.Problems) || len(r.Problems) != 1 || !strings.Contains(r.Problems[0].String(), "warning: the log is unchained: none of its 19 events") || r.Unchained != 19 {
		t.Fatalf("unchained log: %+v\n%s", r, problemsText(r.Problems))
	}
	if r := VerifyLog(tenant, session, goodLog(), VerifyOptions{RequireChain: true}); !Failed(r.Problems) {
		t.Fatalf("RequireChain passed an unchained log: %s", problemsText(r.Problems))
	}

	// An old session that a chaining node carried on: the chain starts at
	// the first new event, linked to the last old one.
	evs := goodLog()
	tail := chain(slices.Clone(evs))
	for i := 9; i < len(evs); i++ {
		evs[i] = tail[i]
	}
	h8, _ := events.Hash(evs[8])
	evs[9].Prev = h8
	evs = rechainFrom(evs, 10)
	r = VerifyLog(tenant, session, evs, VerifyOptions{})
	if Failed(r.Problems) || r.Unchained != 9 || len(r.Problems) != 1 || !strings.Contains(r.Problems[0].String(), "warning: seq 10: events seq 1 to 9 carry no hash link") {
		t.Fatalf("partly chained log: %+v\n%s", r, problemsText(r.Problems))
	}
	// ... and a change to the last old event shows.
	evs[8].Time = evs[8].Time.Add(1)
	if p := firstFailure(t, VerifyLog(tenant, session, evs, VerifyOptions{}).Problems); p.Seq != 10 || !strings.Contains(p.Message, "seq 9 (TurnCompleted) was changed") {
		t.Fatalf("change to the last unchained event: %s", p)
	}
}

// rechainFrom recomputes the links of evs[i:] from evs[i-1].
func rechainFrom(evs []events.Event, i int) []events.Event {
	for ; i < len(evs); i++ {
		evs[i].Prev, _ = events.Hash(evs[i-1])
	}
	return evs
}

func TestChainManyBrokenLinksAreSummed(t *testing.T) {
	evs := goodLog()
	evs = append(evs, goodLog()...)
	evs = chain(renumber(append(evs, goodLog()...))) // 57 events
	for i := 0; i < len(evs)-1; i += 2 {
		evs[i].Time = evs[i].Time.Add(1) // breaks the link of the event after it
	}
	ps := VerifyLog(tenant, session, evs, VerifyOptions{}).Problems
	n := 0
	for _, p := range ps {
		if strings.Contains(p.Message, "was changed after this event was written") {
			n++
		}
	}
	last := ps[len(ps)-1]
	if n != maxChainProblems || !strings.Contains(last.Message, "the chain breaks 8 more times (28 in all)") {
		t.Fatalf("%d changes reported, last %q:\n%s", n, last, problemsText(ps))
	}
}

// signed appends a HeadSigned of the log's last event, as the session
// actor records one.
func signed(evs []events.Event, key ed25519.PrivateKey, reason string) []events.Event {
	last := evs[len(evs)-1]
	h, _ := events.Hash(last)
	p := events.SignHead(key, tenant, session, last.Seq, h, reason, "alice")
	ev := events.Event{ID: "SIG" + last.ID, Tenant: tenant, Session: session, Seq: last.Seq + 1, Time: last.Time,
		Type: events.TypeHeadSigned, Prev: h, Data: events.Payload(p)}
	return append(evs, ev)
}

func TestSignatures(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	good := func() []events.Event {
		evs := chain(goodLog())
		evs = signed(evs, key, events.SignRequested)
		return evs
	}
	keys := VerifyOptions{Keys: []ed25519.PublicKey{pub}}

	r := VerifyLog(tenant, session, good(), keys)
	if len(r.Problems) != 0 || r.Signed != 19 || r.Signatures != 1 || r.SignedReason != events.SignRequested {
		t.Fatalf("signed log: %+v\n%s", r, problemsText(r.Problems))
	}
	// Without a key the signature is reported, not checked.
	r = VerifyLog(tenant, session, good(), VerifyOptions{})
	if len(r.Problems) != 0 || r.Signed != 0 || r.Signatures != 1 {
		t.Fatalf("signed log without a key: %+v\n%s", r, problemsText(r.Problems))
	}
	// Another key: the signature proves nothing, and nothing is signed.
	r = VerifyLog(tenant, session, good(), VerifyOptions{Keys: []ed25519.PublicKey{otherPub}})
	if !Failed(r.Problems) || !strings.Contains(problemsText(r.Problems), "was made with key "+events.KeyID(pub)+", which is not a key given") ||
		!strings.Contains(problemsText(r.Problems), "no signature in the log verifies with the given key") {
		t.Fatalf("wrong key: %s", problemsText(r.Problems))
	}
	// A signature forged by someone with another key, under the right key id.
	evs := good()
	p := events.SignHead(otherKey, tenant, session, 19, evs[19].Prev, events.SignRequested, "mallory")
	p.Key = events.KeyID(pub)
	evs[19].Data = events.Payload(p)
	if r := VerifyLog(tenant, session, evs, keys); !strings.Contains(problemsText(r.Problems), "seq 20: the signature of seq 19 does not verify") {
		t.Fatalf("forged signature: %s", problemsText(r.Problems))
	}
	// The log rewritten consistently after it was signed: the chain holds,
	// the signature does not.
	evs = good()
	evs[5].Data = events.Payload(events.ToolCallCompleted{CallRef: ref("t1", "a", 0), Attempt: 1, Content: []events.Part{{Type: "text", Text: "rewritten"}}})
	evs = rechainFrom(evs, 6)
	r = VerifyLog(tenant, session, evs, keys)
	if p := firstFailure(t, r.Problems); p.Seq != 20 || !strings.Contains(p.Message, "the signature is of seq 19 with hash") || !strings.Contains(p.Message, "seq 19 was changed, or the chain before it was rewritten") {
		t.Fatalf("rewritten chain: %s", problemsText(r.Problems))
	}
	// The signed head itself changed.
	evs = good()
	evs[18].Data = events.Payload(events.TurnCompleted{Turn: "t2x"})
	if r := VerifyLog(tenant, session, evs, keys); !Failed(r.Problems) {
		t.Fatalf("changed head passed: %s", problemsText(r.Problems))
	}
	// Events after the signature are covered by the chain only: a warning.
	evs = good()
	extra := events.Event{ID: "X1", Tenant: tenant, Session: session, Seq: 21, Time: evs[19].Time, Type: events.TypeSessionClosed, Data: json.RawMessage(`{}`)}
	extra.Prev, _ = events.Hash(evs[19])
	r = VerifyLog(tenant, session, append(evs, extra), keys)
	if Failed(r.Problems) || !strings.Contains(problemsText(r.Problems), "seq 21 to 21 come after the last signed event (seq 19)") {
		t.Fatalf("unsigned tail: %s", problemsText(r.Problems))
	}
	// Signed at close, with another signature earlier: both verify.
	evs = signed(append(good(), extra), key, events.SignClosed)
	r = VerifyLog(tenant, session, evs, keys)
	if len(r.Problems) != 0 || r.Signed != 21 || r.SignedReason != events.SignClosed || !r.Closed || r.Signatures != 2 {
		t.Fatalf("signed at close: %+v\n%s", r, problemsText(r.Problems))
	}
	// No signature at all, with a key given.
	if r := VerifyLog(tenant, session, chain(goodLog()), keys); !Failed(r.Problems) {
		t.Fatalf("unsigned log passed with a key given: %s", problemsText(r.Problems))
	}
	// A signature naming an event that is not there.
	evs = good()
	p = events.SignHead(key, tenant, session, 40, evs[19].Prev, events.SignRequested, "")
	evs[19].Data = events.Payload(p)
	if r := VerifyLog(tenant, session, evs, keys); !strings.Contains(problemsText(r.Problems), "the signature names seq 40, which is not stored before it") {
		t.Fatalf("signature of a missing event: %s", problemsText(r.Problems))
	}
	// A signature of another session's head does not verify here.
	evs = good()
	p = events.SignHead(key, tenant, "S2", 19, evs[19].Prev, events.SignRequested, "")
	evs[19].Data = events.Payload(p)
	if r := VerifyLog(tenant, session, evs, keys); !strings.Contains(problemsText(r.Problems), "does not verify") {
		t.Fatalf("another session's signature: %s", problemsText(r.Problems))
	}
}
