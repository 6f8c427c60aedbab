package core_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
)

// TestSessionKeepsItsChainRule: a session carries on by the rule its first
// event names (events.ChainOf), so a session opened before Chain2 is linked
// by Chain1 for life, its signatures name Chain1, and a new session by
// Chain2.
func TestSessionKeepsItsChainRule(t *testing.T) {
	for _, chain := range []events.Chain{events.Chain1, events.Chain2} {
		t.Run(string(chain), func(t *testing.T) {
			at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			evs := []events.Event{
				{ID: "e1", Tenant: "acme", Session: "s1", Seq: 1, Time: at, Type: events.TypeSessionOpened, Data: json.RawMessage(`{"workspace":"w"}`)},
				{ID: "e2", Tenant: "acme", Session: "s1", Seq: 2, Time: at, Type: events.TypeSessionClosed, Data: json.RawMessage(`{"reason":"n = 12345678901234567891 \ud800"}`)},
			}
			if err := chain.Link(evs); err != nil {
				t.Fatal(err)
			}
			s := core.NewSession("acme", "s1")
			if s.Chain() != events.ChainVersion {
				t.Fatalf("a new session is chained by %s, want %s", s.Chain(), events.ChainVersion)
			}
			if g, _ := s.Head(); g != events.ChainVersion.Genesis("acme", "s1") {
				t.Fatalf("a new session's first link %s is not the %s genesis link", g, events.ChainVersion)
			}
			for _, ev := range evs {
				if err := s.Apply(ev); err != nil {
					t.Fatal(err)
				}
			}
			if s.Chain() != chain {
				t.Fatalf("the session is chained by %s, want %s", s.Chain(), chain)
			}
			want, _ := chain.Hash(evs[1])
			if h, err := s.Head(); err != nil || h != want {
				t.Fatalf("Head = %s (%v), want the %s hash %s", h, err, chain, want)
			}
			drafts, err := core.Sign(s, events.SignRequested, "")
			if err != nil || len(drafts) != 1 || drafts[0].Payload.(events.HeadSigned).Hash != want {
				t.Fatalf("Sign = %+v, %v; want a signature of %s", drafts, err, want)
			}
		})
	}
}
