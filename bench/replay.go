package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
)

// sessionEvents is the length of the sessions replay folds and reads.
const sessionEvents = 100

// synthSession builds a session of n realistic events from the probe:
// SessionOpened, then one-call turns exactly as the node wrote the probe's
// (fresh ids, the turn id replaced), the last turn cut short where n ends
// (a session with a call in flight).
func synthSession(p *probe, session string, n int) ([]events.Event, error) {
	var tr events.TurnReceived
	if err := json.Unmarshal(p.writes[0].Data, &tr); err != nil || tr.Turn == "" {
		return nil, fmt.Errorf("probe: first write is not a TurnReceived: %s", p.writes[0].Type)
	}
	old := []byte(tr.Turn)
	evs := make([]events.Event, 0, n)
	ev := p.opened
	ev.ID, ev.Session, ev.Seq = ulid.Make().String(), session, 1
	evs = append(evs, ev)
	for len(evs) < n {
		turn := []byte(ulid.Make().String())
		for _, w := range p.writes {
			if len(evs) == n {
				break
			}
			ev := w
			ev.ID, ev.Session, ev.Seq = ulid.Make().String(), session, uint64(len(evs)+1)
			ev.Data = bytes.ReplaceAll(w.Data, old, turn)
			evs = append(evs, ev)
		}
	}
	// Linked as the session actor links them (docs/events.md, "The hash
	// chain"): a read checks the links of a session's snapshot.
	if err := events.Link(evs); err != nil {
		return nil, err
	}
	return evs, nil
}

// benchFold folds many sessions' events into transcripts and reports the
// events folded per second.
func benchFold(ctx context.Context, s *suite) ([]sample, error) {
	p, err := s.getProbe(ctx)
	if err != nil {
		return nil, err
	}
	nSessions := max(s.cfg.FoldEvents/sessionEvents, 1)
	sessions := make([][]events.Event, nSessions)
	total, calls := 0, 0
	for i := range sessions {
		if sessions[i], err = synthSession(p, fmt.Sprintf("s%d", i), sessionEvents); err != nil {
			return nil, err
		}
		total += len(sessions[i])
		for _, ev := range sessions[i] {
			if ev.Type == events.TypeTurnReceived {
				calls++
			}
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	runtime.GC()
	cpu0, cpuOK := threadCPU()
	start := time.Now()
	for i, evs := range sessions {
		tr, err := projections.Fold(evs[0].Session, evs)
		if err != nil {
			return nil, err
		}
		if i == 0 && len(tr.Turns) == 0 {
			return nil, errors.New("fold: a synthetic session gave no turns")
		}
	}
	took := time.Since(start)
	cpu1, _ := threadCPU()
	cond := fmt.Sprintf("projections.Fold over %d in-memory events: %d sessions of %d (one-call turns as the node writes them); target ≥ 1 M/s", total, nSessions, sessionEvents)
	out := []sample{{name: "replay/fold/rate", value: float64(total) / took.Seconds(), unit: "events/s", better: Higher, conditions: cond + "; wall clock"},
		// Per call too: a build that records a call in fewer events folds
		// fewer events a second for the same work.
		{name: "replay/fold/per-call", value: us(took / time.Duration(max(calls, 1))), unit: "µs", better: Lower,
			conditions: fmt.Sprintf("%s; wall clock per one-call turn folded (%d turns, %d events each)", cond, calls, len(p.writes))}}
	if cpuOK && cpu1 > cpu0 {
		out = append(out, sample{name: "replay/fold/rate-cpu", value: float64(total) / (cpu1 - cpu0).Seconds(), unit: "events/s", better: Higher,
			conditions: cond + "; per CPU second of the folding thread (GC workers excluded): what a core that is not shared gives"})
	}
	return out, nil
}

// benchReplayLog reads one session of 100 events back from the log and folds
// it, with its events spread evenly through a log of other sessions' events:
// first cfg.LogSizes[0] of them, then each larger size. The larger sizes'
// floor is the smallest size's time: a ratio near 1 means replay does not
// grow with the log.
func benchReplayLog(ctx context.Context, s *suite) ([]sample, error) {
	p, err := s.getProbe(ctx)
	if err != nil {
		return nil, err
	}
	var out []sample
	var small replayTimes
	for i, size := range s.cfg.LogSizes {
		t, err := replayOnce(ctx, s, p, size)
		if err != nil {
			return nil, fmt.Errorf("log of %s events: %w", human(size), err)
		}
		if i == 0 {
			small = t
		}
		base := fmt.Sprintf("natslog.Read (fresh Log, no cached position) + Fold of one %d-event session spread through %s events of %d other sessions; interval", sessionEvents, human(size), max(size/sessionEvents, 1))
		rows := []struct {
			suffix, cond string
			times, floor []float64
		}{
			{"", "; the session's snapshot in place (written by the first read)", t.warm, small.warm},
			{"-first", "; no snapshot of the session yet: the read that writes it", t.first, small.first},
			{"-cold", "; the server restarted before each read (no block in its memory); the session's snapshot kept as a node keeps it (Compact a second after its first batch not yet compacted, and once its writes stop)", t.cold, small.cold},
			{"-cold-nosnap", "; the server restarted before each read (no block in its memory); no snapshot of the session (what a session that never passivated had before issue 26)", t.coldNoSnap, small.coldNoSnap},
		}
		for _, r := range rows {
			cond, floor := base+r.cond, 0.0
			if i > 0 {
				floor = median(r.floor)
				cond += fmt.Sprintf("; floor: the same with %s other events", human(s.cfg.LogSizes[0]))
			}
			for _, v := range r.times {
				out = append(out, sample{name: "replay/log/session100-in-" + human(size) + r.suffix, value: v, unit: "ms", better: Lower, floor: floor, conditions: cond})
			}
		}
	}
	return out, nil
}

// replayTimes are one log size's replays in ms: warm with the snapshot the
// first reads wrote, first without a snapshot, cold after a restart with the
// snapshot kept current, and cold without a snapshot.
type replayTimes struct {
	warm, first, cold, coldNoSnap []float64
}

// replayOnce builds a log of size other events plus the target session on a
// fresh server, bringing the target's snapshot up to date as a node does
// (node.CompactMaxDelay after its first event not yet compacted, and once
// its writes stop), and times cfg.Runs replays of the target in each of
// replayTimes' conditions.
func replayOnce(ctx context.Context, s *suite, p *probe, size int) (replayTimes, error) {
	var rt replayTimes
	srv, err := startServer(config.DurabilityInterval)
	if err != nil {
		return rt, err
	}
	defer srv.close()
	writer, err := natslog.New(ctx, srv.js)
	if err != nil {
		return rt, err
	}
	defer writer.Close()
	target, err := synthSession(p, "target", sessionEvents)
	if err != nil {
		return rt, err
	}
	others := make([][]byte, len(p.writes))
	for i, ev := range p.writes {
		if others[i], err = events.Marshal(ev); err != nil {
			return rt, err
		}
	}
	subject := func(session string, t events.Type) string {
		base := floorPrefix + "." + tenant + "." + session
		if t == events.TypeToolCallRequested {
			return base + ".req." + floorClass
		}
		return base + ".log"
	}
	publish := func(subj string, data []byte) error {
		for {
			_, err := srv.js.PublishAsync(subj, data)
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return err
			}
		}
	}
	settle := func() error {
		select {
		case <-srv.js.PublishAsyncComplete():
			return nil
		case <-time.After(5 * time.Minute):
			return errors.New("async publishes did not complete in 5 minutes")
		}
	}
	// writeTarget appends the target's next event and compacts the session
	// as the node's compactor does: once CompactMaxDelay has passed since
	// its first event not yet compacted (the session keeps writing), and
	// once after its last (quiet for CompactQuiet), below.
	var pendingSince time.Time
	writeTarget := func(ev events.Event) error {
		b, err := events.Marshal(ev)
		if err != nil {
			return err
		}
		if err := publish(subject("target", ev.Type), b); err != nil {
			return err
		}
		if pendingSince.IsZero() {
			pendingSince = time.Now()
		}
		if time.Since(pendingSince) < node.CompactMaxDelay {
			return nil
		}
		if err := settle(); err != nil {
			return err
		}
		pendingSince = time.Time{}
		return writer.Compact(ctx, tenant, "target")
	}
	start := time.Now()
	nOthers := max(size/sessionEvents, 1)
	every := max(size/sessionEvents, 1)
	next := 0
	for j := range size {
		if j%every == 0 && next < len(target) {
			if err := writeTarget(target[next]); err != nil {
				return rt, err
			}
			next++
		}
		k := j % len(p.writes)
		if err := publish(subject(fmt.Sprintf("o%d", j%nOthers), p.writes[k].Type), others[k]); err != nil {
			return rt, err
		}
	}
	for ; next < len(target); next++ {
		if err := writeTarget(target[next]); err != nil {
			return rt, err
		}
	}
	if err := settle(); err != nil {
		return rt, err
	}
	if err := writer.Compact(ctx, tenant, "target"); err != nil {
		return rt, err
	}
	writer.Close()
	st, err := srv.js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		return rt, err
	}
	if got, want := st.CachedInfo().State.Msgs, uint64(size+sessionEvents); got != want {
		return rt, fmt.Errorf("log holds %d messages, want %d", got, want)
	}
	s.logf("replay/log: %s events stored in %s", human(size+sessionEvents), time.Since(start).Round(time.Millisecond))

	replay := func() (time.Duration, error) {
		l, err := natslog.New(ctx, srv.js)
		if err != nil {
			return 0, err
		}
		defer l.Close()
		start := time.Now()
		evs, err := l.Read(ctx, tenant, "target", 0)
		if err != nil {
			return 0, err
		}
		tr, err := projections.Fold("target", evs)
		took := time.Since(start)
		if err != nil {
			return 0, err
		}
		if len(evs) != sessionEvents || len(tr.Turns) == 0 {
			return 0, fmt.Errorf("replay read %d events (want %d) and %d turns", len(evs), sessionEvents, len(tr.Turns))
		}
		return took, nil
	}
	purge := func() error {
		snaps, err := srv.js.Stream(ctx, natslog.DefaultSnapshotStream)
		if err != nil {
			return err
		}
		return snaps.Purge(ctx)
	}
	// times runs cfg.Runs replays, each after before.
	times := func(before func() error) ([]float64, error) {
		out := make([]float64, s.cfg.Runs)
		for i := range out {
			if before != nil {
				if err := before(); err != nil {
					return nil, err
				}
			}
			d, err := replay()
			if err != nil {
				return nil, err
			}
			out[i] = ms(d)
		}
		return out, nil
	}
	if rt.cold, err = times(srv.restart); err != nil {
		return rt, err
	}
	if rt.coldNoSnap, err = times(func() error {
		if err := purge(); err != nil {
			return err
		}
		return srv.restart()
	}); err != nil {
		return rt, err
	}
	if _, err := replay(); err != nil { // warm-up
		return rt, err
	}
	if rt.first, err = times(purge); err != nil {
		return rt, err
	}
	if rt.warm, err = times(nil); err != nil {
		return rt, err
	}
	return rt, nil
}

func human(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	default:
		return fmt.Sprint(n)
	}
}
