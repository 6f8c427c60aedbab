package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/projections"
)

// benchHash measures the hash chain's cost on the hot path: what
// events.Hash costs per event under the rule of new sessions (Chain2: the
// SHA-256 of the stored bytes, encoded again as the verifier reads them),
// with the old rule (Chain1: the canonical encoding of the envelope, then
// SHA-256) as the floor, for the events one no-op call writes (about 300
// bytes each) and for a 50 KB result. The events are read back, without
// the encoding Encode keeps, as replay --verify and a node loading a
// session hash them; the session actor hashes what it mints from the bytes
// it already holds.
func benchHash(ctx context.Context, s *suite) ([]sample, error) {
	p, err := s.getProbe(ctx)
	if err != nil {
		return nil, err
	}
	small := append([]events.Event{p.opened}, p.writes...)
	avg := 0
	for _, ev := range small {
		b, _ := events.Marshal(ev)
		avg += len(b)
	}
	avg /= len(small)
	big := p.writes[len(p.writes)-1]
	text := strings.Repeat("a line of a tool's output, with \"quotes\", tabs\tand <html> & such\n", 50_000/60+1)[:50_000]
	big.Type = events.TypeToolCallCompleted
	big.Data = events.Payload(events.ToolCallCompleted{CallRef: events.CallRef{Turn: "t", Call: "c"}, Attempt: 1, Content: []events.Part{{Type: "text", Text: text}}})
	bigSize := len(mustMarshal(big))
	measure := func(chain events.Chain, evs []events.Event, n int) (wall, cpu time.Duration, err error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		runtime.GC()
		cpu0, cpuOK := threadCPU()
		start := time.Now()
		for i := range n {
			if _, err := chain.Hash(evs[i%len(evs)]); err != nil {
				return 0, 0, err
			}
		}
		wall = time.Since(start)
		if cpu1, _ := threadCPU(); cpuOK && cpu1 > cpu0 {
			cpu = cpu1 - cpu0
		}
		return wall, cpu, nil
	}
	var out []sample
	for _, c := range []struct {
		name string
		evs  []events.Event
		n    int
		cond string
	}{
		{"chain/hash/small", small, 200_000, fmt.Sprintf("events.Hash of the %d events a no-op call writes (%d B stored on average)", len(small), avg)},
		{"chain/hash/50KB", []events.Event{big}, 2_000, fmt.Sprintf("events.Hash of a ToolCallCompleted holding 50,000 B of text (%d B stored; a quote, a tab and an HTML character every 66 B)", bigSize)},
	} {
		wall1, cpu1, err := measure(events.Chain1, c.evs, c.n)
		if err != nil {
			return nil, err
		}
		wall2, cpu2, err := measure(events.Chain2, c.evs, c.n)
		if err != nil {
			return nil, err
		}
		per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(c.n) }
		cond := c.cond + ", read back (no kept encoding), by the rule of new sessions (callsheet-chain-2: SHA-256 of the stored bytes); floor: the old rule (callsheet-chain-1: the canonical encoding, then SHA-256)"
		out = append(out, sample{name: c.name, value: per(wall2), unit: "ns/event", better: Lower, floor: per(wall1), conditions: cond + "; wall clock"})
		if cpu1 > 0 && cpu2 > 0 {
			out = append(out, sample{name: c.name + "-cpu", value: per(cpu2), unit: "ns/event", better: Lower, floor: per(cpu1),
				conditions: cond + "; CPU time of the hashing thread: what it costs a core that is not shared"})
		}
	}
	return out, nil
}

func mustMarshal(ev events.Event) []byte {
	b, _ := events.Marshal(ev)
	return b
}

// benchSearch files cfg.SearchSessions sessions of one tenant in the search
// index (spread over 30 days, with 1 to 3 of 6 tools and every outcome),
// then times the queries GET /v1/sessions answers: the newest page of 50,
// the same filtered by a tool, by an outcome, by both, within one day, and
// 20 pages deep through the cursors. The floor of each is the same query on
// an index of a tenth as many sessions: a ratio near 1 means a page does
// not cost more as the log grows.
func benchSearch(ctx context.Context, s *suite) ([]sample, error) {
	var out []sample
	small, err := searchOnce(ctx, s, max(s.cfg.SearchSessions/10, 100))
	if err != nil {
		return nil, err
	}
	large, err := searchOnce(ctx, s, s.cfg.SearchSessions)
	if err != nil {
		return nil, err
	}
	for _, r := range large {
		floor := 0.0
		for _, f := range small {
			if f.name == r.name {
				floor = f.value
			}
		}
		r.floor = floor
		r.conditions += fmt.Sprintf("; floor: the same on %s sessions", human(max(s.cfg.SearchSessions/10, 100)))
		out = append(out, r)
	}
	return out, nil
}

func searchOnce(ctx context.Context, s *suite, n int) ([]sample, error) {
	srv, err := startServer(config.DurabilityInterval)
	if err != nil {
		return nil, err
	}
	defer srv.close()
	l, err := natslog.New(ctx, srv.js)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	x, err := l.Search(ctx)
	if err != nil {
		return nil, err
	}
	tools := []string{"read", "write", "edit", "shell", "glob", "grep"}
	outcomes := []events.Outcome{events.OutcomeOK, events.OutcomeOK, events.OutcomeOK, events.OutcomeError, events.OutcomeBlocked, events.OutcomeIndeterminate}
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	start := time.Now()
	for i := range n {
		opened := end.Add(-time.Duration(n-i) * (30 * 24 * time.Hour / time.Duration(n)))
		sum := projections.NewSummary(tenant, fmt.Sprintf("01%013d%011d", opened.UnixMilli(), i))
		sum.Opened, sum.Seq, sum.Last, sum.Turns = opened, 10, opened, 1
		for k := range 1 + i%3 {
			tool := tools[(i+k*7)%len(tools)]
			sum.Tools = append(sum.Tools, tool)
			o := outcomes[(i/3+k)%len(outcomes)]
			sum.Outcomes[o]++
			if sum.Ended == nil {
				sum.Ended = map[string][]events.Outcome{}
			}
			sum.Ended[tool] = append(sum.Ended[tool], o)
			sum.Calls++
		}
		if _, err := x.Put(ctx, sum, 0); err != nil {
			return nil, err
		}
	}
	filing := time.Since(start)
	s.logf("search: filed %d sessions in %s", n, filing.Round(time.Millisecond))
	mid := end.Add(-15 * 24 * time.Hour)
	queries := []struct {
		name string
		q    natslog.Query
	}{
		{"newest", natslog.Query{}},
		{"tool", natslog.Query{Tool: "shell"}},
		{"outcome", natslog.Query{Outcome: "indeterminate"}},
		{"tool+outcome", natslog.Query{Tool: "write", Outcome: "blocked"}},
		{"one-day", natslog.Query{Since: mid, Until: mid.Add(24 * time.Hour)}},
	}
	if _, err := x.Find(ctx, tenant, natslog.Query{}); err != nil { // warm-up
		return nil, err
	}
	var out []sample
	cond := fmt.Sprintf("natslog.Search.Find, a page of 50 of one tenant's %s sessions over 30 days (1-3 of 6 tools each, every outcome); interval; median of 5", human(n))
	for _, qc := range queries {
		var times []float64
		scanned := 0
		for range 5 {
			t0 := time.Now()
			p, err := x.Find(ctx, tenant, qc.q)
			if err != nil {
				return nil, err
			}
			times = append(times, float64(time.Since(t0).Microseconds())/1000)
			scanned = p.Scanned
		}
		out = append(out, sample{name: "search/" + qc.name, value: median(times), unit: "ms", better: Lower, conditions: fmt.Sprintf("%s; %d keys read", cond, scanned)})
	}
	// Twenty pages deep.
	q := natslog.Query{Tool: "read"}
	t0 := time.Now()
	for range 20 {
		p, err := x.Find(ctx, tenant, q)
		if err != nil {
			return nil, err
		}
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	out = append(out, sample{name: "search/tool-20-pages", value: float64(time.Since(t0).Microseconds()) / 1000 / 20, unit: "ms/page", better: Lower, conditions: cond + "; tool=read, pages 1 to 20 through their cursors"})
	out = append(out, sample{name: "search/file", value: float64(filing.Microseconds()) / float64(n), unit: "µs/session", better: Lower, conditions: fmt.Sprintf("natslog.Search.Put of a new session's summary and markers, %s sessions one after another; interval", human(n))})
	return out, nil
}
