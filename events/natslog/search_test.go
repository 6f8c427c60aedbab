package natslog_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/projections"
)

// synthetic builds a summary the way the fold would: calls of tools, and
// results of (tool, outcome).
func synthetic(tenant, session string, opened time.Time, called []string, ended map[string][]events.Outcome) *projections.Summary {
	evs := []events.Event{{ID: session + "-1", Tenant: tenant, Session: session, Seq: 1, Time: opened, Type: events.TypeSessionOpened, Data: events.Payload(events.SessionOpened{Workspace: "w"})}}
	var calls []events.CallSpec
	for i, c := range called {
		calls = append(calls, events.CallSpec{ID: fmt.Sprint(i), Name: c})
	}
	evs = append(evs, events.Event{ID: session + "-2", Tenant: tenant, Session: session, Seq: 2, Time: opened, Type: events.TypeTurnReceived, Data: events.Payload(events.TurnReceived{Turn: "t", Calls: calls})})
	for _, tool := range slices.Sorted(mapsKeys(ended)) {
		for _, o := range ended[tool] {
			evs = append(evs, events.Event{ID: fmt.Sprintf("%s-%d", session, len(evs)+1), Tenant: tenant, Session: session, Seq: uint64(len(evs) + 1), Time: opened,
				Type: events.TypeResultCommitted, Data: events.Payload(events.ResultCommitted{Result: events.Result{Name: tool, Outcome: o}})})
		}
	}
	return projections.FoldSummary(tenant, session, evs)
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// matches is the oracle: what Find must answer, by brute force.
func matches(s *projections.Summary, q natslog.Query) bool {
	if (!q.Since.IsZero() && s.Opened.Before(q.Since)) || (!q.Until.IsZero() && !s.Opened.Before(q.Until)) {
		return false
	}
	switch {
	case q.Tool != "" && q.Outcome != "":
		return slices.Contains(s.Ended[q.Tool], events.Outcome(q.Outcome))
	case q.Tool != "":
		return slices.Contains(s.Tools, q.Tool)
	case q.Outcome != "":
		return s.Outcomes[events.Outcome(q.Outcome)] > 0
	}
	return true
}

// TestSearchFindsExactlyWhatMatches files 300 sessions of two tenants over
// 40 days, with tools (some not key tokens) and outcomes drawn at random,
// and checks hundreds of queries, every filter alone and combined, page by
// page through their cursors, against a brute-force filter of the same
// sessions: exactly the matching sessions of the tenant, each once, newest
// first.
func TestSearchFindsExactlyWhatMatches(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	// Thousands of pages: more than ctxT's 30 s on a loaded machine with
	// the race detector.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	x, err := l.Search(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 11))
	tools := []string{"read", "write", "shell", "mcp__fs__read", "weird tool.name", "all", strings.Repeat("x", 120)}
	outcomes := []events.Outcome{events.OutcomeOK, events.OutcomeError, events.OutcomeBlocked, events.OutcomeIndeterminate}
	base := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var all []*projections.Summary
	for i := range 300 {
		tenant := "acme"
		if i%5 == 0 {
			tenant = "globex"
		}
		opened := base.Add(time.Duration(r.Int64N(int64(40 * 24 * time.Hour))))
		// ULID-like ids: they sort by time.
		id := fmt.Sprintf("01%013d%011d", opened.UnixMilli(), i)
		var called []string
		ended := map[string][]events.Outcome{}
		for range r.IntN(4) {
			tool := tools[r.IntN(len(tools))]
			called = append(called, tool)
			if r.IntN(4) > 0 {
				o := outcomes[r.IntN(len(outcomes))]
				if !slices.Contains(ended[tool], o) {
					ended[tool] = append(ended[tool], o)
				}
			}
		}
		s := synthetic(tenant, id, opened, called, ended)
		if _, err := x.Put(ctx, s, 0); err != nil {
			t.Fatal(err)
		}
		all = append(all, s)
	}
	order := func(a, b *projections.Summary) int { // newest first: day, then id
		da, db := a.Opened.UTC().Format("20060102"), b.Opened.UTC().Format("20060102")
		if da != db {
			return strings.Compare(db, da)
		}
		return strings.Compare(b.Session, a.Session)
	}
	var queries []natslog.Query
	for _, tool := range append([]string{"", "nope"}, tools...) {
		for _, o := range []string{"", "ok", "error", "blocked", "indeterminate"} {
			queries = append(queries, natslog.Query{Tool: tool, Outcome: o})
		}
	}
	for range 60 {
		a := base.Add(time.Duration(r.Int64N(int64(40 * 24 * time.Hour))))
		b := a.Add(time.Duration(r.Int64N(int64(10 * 24 * time.Hour))))
		q := natslog.Query{Since: a, Until: b}
		switch r.IntN(3) {
		case 0:
			q.Since = time.Time{}
		case 1:
			q.Until = time.Time{}
		}
		if r.IntN(2) == 0 {
			q.Tool = tools[r.IntN(len(tools))]
		}
		if r.IntN(2) == 0 {
			q.Outcome = string(outcomes[r.IntN(len(outcomes))])
		}
		queries = append(queries, q)
	}
	total := 0
	defer func() { t.Logf("%d queries, %d sessions matched in all", len(queries), total) }()
	for qi, q := range queries {
		for _, tenant := range []string{"acme", "globex"} {
			var want []string
			for _, s := range slices.SortedFunc(slices.Values(all), order) {
				if s.Tenant == tenant && matches(s, q) {
					want = append(want, s.Session)
				}
			}
			limit := []int{3, 7, 20, 50, 1000}[qi%5]
			q := q
			q.Limit = limit
			var got []string
			pages := 0
			for {
				p, err := x.Find(ctx, tenant, q)
				if err != nil {
					t.Fatalf("query %+v: %v", q, err)
				}
				pages++
				if len(p.Sessions) > limit {
					t.Fatalf("a page of %d for limit %d", len(p.Sessions), limit)
				}
				for _, s := range p.Sessions {
					if s.Tenant != tenant {
						t.Fatalf("tenant %s got a session of %s", tenant, s.Tenant)
					}
					got = append(got, s.Session)
				}
				if p.Next == "" {
					break
				}
				if len(p.Sessions) != limit {
					t.Fatalf("a page of %d with a next cursor, for limit %d", len(p.Sessions), limit)
				}
				q.Cursor = p.Next
			}
			total += len(want)
			if !slices.Equal(got, want) {
				t.Fatalf("tenant %s query %+v (limit %d, %d pages):\n got %v\nwant %v", tenant, q, limit, pages, got, want)
			}
		}
	}
}

func TestSearchRefusesBadQueries(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	x, err := l.Search(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	page, err := x.Find(ctx, "acme", natslog.Query{Tool: "read", Limit: 1})
	if err != nil || len(page.Sessions) != 0 || page.Next != "" {
		t.Fatalf("empty index: %+v %v", page, err)
	}
	for _, tc := range []struct {
		q    natslog.Query
		want string
	}{
		{natslog.Query{Outcome: "fine"}, `outcome "fine"`},
		{natslog.Query{Limit: 1001}, "limit 1001"},
		{natslog.Query{Limit: -1}, "limit -1"},
		{natslog.Query{Since: now, Until: now.Add(-time.Hour)}, "is not before until"},
		{natslog.Query{Cursor: "garbage"}, "is not one this listing gave"},
		{natslog.Query{Tool: "read", Cursor: natslog.EncodeCursor(natslog.Query{Tool: "write"}, "20261201", "S")}, "other filters"},
	} {
		if _, err := x.Find(ctx, "acme", tc.q); !errors.Is(err, natslog.ErrBadQuery) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Find(%+v): %v, want ErrBadQuery holding %q", tc.q, err, tc.want)
		}
	}
	if _, err := x.Find(ctx, "bad tenant", natslog.Query{}); !errors.Is(err, natslog.ErrInvalidID) {
		t.Errorf("bad tenant: %v", err)
	}
}

// TestSearchPutKeepsTheNewest: two writers of one session's summary (a
// session handed from one node to another): the newer fold stays.
func TestSearchPutKeepsTheNewest(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	x, _ := l.Search(ctx)
	opened := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	old := synthetic("acme", "S1", opened, []string{"read"}, nil)
	newer := synthetic("acme", "S1", opened, []string{"read", "write"}, map[string][]events.Outcome{"write": {events.OutcomeOK}})
	rev, err := x.Put(ctx, newer, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Put(ctx, old, 0); !errors.Is(err, natslog.ErrStaleSummary) {
		t.Fatalf("an older summary over a newer one: %v, want ErrStaleSummary", err)
	}
	got, grev, ok, err := x.Stored(ctx, "acme", "S1", time.Time{})
	if err != nil || !ok || grev != rev || got.Seq != newer.Seq || !slices.Equal(got.Tools, []string{"read", "write"}) {
		t.Fatalf("stored %+v rev %d (want %d) %v", got, grev, rev, err)
	}
	seqs, err := x.Indexed(ctx)
	if err != nil || seqs["acme/S1"] != newer.Seq {
		t.Fatalf("Indexed: %v %v", seqs, err)
	}
}

func FuzzDecodeCursor(f *testing.F) {
	q := natslog.Query{Tool: "read", Outcome: "ok"}
	f.Add(natslog.EncodeCursor(q, "20261201", "01M8RDSQD675M1XNKSSJ11QT3D"))
	f.Add("")
	f.Add("eyJ2IjoxfQ")
	f.Add("!!!")
	f.Fuzz(func(t *testing.T, s string) {
		d, id, err := natslog.DecodeCursor(q, s)
		if err != nil {
			if !errors.Is(err, natslog.ErrBadQuery) {
				t.Fatalf("error does not wrap ErrBadQuery: %v", err)
			}
			return
		}
		if len(d) != 8 || natslog.ValidateIDs("t", id) != nil {
			t.Fatalf("accepted a cursor at day %q session %q", d, id)
		}
		// A cursor it accepts re-encodes to one it accepts the same.
		d2, id2, err := natslog.DecodeCursor(q, natslog.EncodeCursor(q, d, id))
		if err != nil || d2 != d || id2 != id {
			t.Fatalf("round trip: %q %q → %q %q %v", d, id, d2, id2, err)
		}
	})
}
