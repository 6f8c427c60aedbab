package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/replay"
)

// DefaultTimelineCoalesce is how long a live timeline page gathers events
// after the first before it sends them as one update: a turn's burst of
// events becomes a few updates (each redraws the turns it changed), at the
// price of that much delay.
const DefaultTimelineCoalesce = 100 * time.Millisecond

// getTimeline serves the session's timeline page (docs/audit.md): the page
// replay.Timeline renders from the session's audit fold (arguments and
// outputs cut to replay.TimelineClip bytes, with links to the whole), the
// same bytes cmd/callsheet-replay --format html prints for the same log.
//
// With ?live=1 the answer stays open while the session runs: the page so far
// is sent at once, then each new event's changes as a chunk that the page's
// own script swaps in (replay.TimelineUpdate), until the session closes, the
// client goes away or the server shuts down; then the page is ended. The
// page is streamed rather than fetching its updates, because a browser's
// EventSource or script cannot send the tenant's bearer token, and the page
// must not hold the token: whatever sent the first request with its
// Authorization header (a client, a proxy that adds it) receives the
// updates on the same response. A closed session's page is complete at
// once.
func (s *Server) getTimeline(w http.ResponseWriter, r *http.Request, tenant string) error {
	live, err := boolParam(r, "live", false)
	if err != nil {
		return err
	}
	live = live && r.Method != http.MethodHead // a HEAD gets the headers, not a page that never ends
	session := r.PathValue("s")
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.streams, cancel)()
	// The log is read in bounded batches and folded as it comes, each value
	// kept to replay.TimelineClip bytes: the page and what it is drawn from
	// grow with the session's calls, not their sizes.
	f := replay.NewTimelineFolder(tenant, session)
	if err := s.node.ScanEvents(ctx, tenant, session, 0, func(ev events.Event) error { f.Apply(ev); return nil }); err != nil {
		return err
	}
	f.Changes()
	a := f.Audit()

	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", replay.TimelinePolicy())
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if !live || a.Closed != nil {
		_, _ = w.Write(replay.Timeline(a))
		return nil
	}
	// A live page holds a watch like a followed event stream, so it takes
	// one of the tenant's stream places (event_streams.max_per_tenant).
	release, err := s.holdStream(tenant)
	if err != nil {
		return err
	}
	defer release()
	watch, err := s.node.Events(ctx, tenant, session, a.Last.Seq, true)
	if err != nil {
		return err
	}
	h.Set("X-Accel-Buffering", "no") // no proxy buffering of a live page
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(b []byte) bool {
		_, err := w.Write(b)
		return err == nil && rc.Flush() == nil
	}
	// From here on the answer has begun: failures end the page, they cannot
	// become an error answer.
	if !send(replay.TimelineStart(a)) {
		return nil
	}
	defer func() { send(replay.TimelineEnd(f.Audit())) }()
	tick := time.NewTicker(s.keepAlive)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-watch:
			if !ok {
				return nil
			}
			f.Apply(ev)
			open := gather(ctx, f, watch, DefaultTimelineCoalesce)
			if !send(replay.TimelineUpdate(f.Audit(), f.Changes())) || !open || f.Audit().Closed != nil {
				return nil
			}
		case <-tick.C:
			if _, err := io.WriteString(w, replay.TimelineKeepAlive); err != nil || rc.Flush() != nil {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// gather folds the events that arrive on watch within d, so a burst
// becomes one update. It reports false once watch is closed.
func gather(ctx context.Context, f *projections.AuditFolder, watch <-chan events.Event, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-watch:
			if !ok {
				return false
			}
			f.Apply(ev)
		case <-t.C:
			return true
		case <-ctx.Done():
			return true
		}
	}
}

// getArguments answers a call's arguments whole, as the model sent them
// (the turn's TurnReceived, or a streamed turn's CallsAdded), or with ?as=run as they were run (its first
// ToolCallRequested): the timeline page shows only their first bytes and
// links here. The log is read in bounded batches up to the event.
func (s *Server) getArguments(w http.ResponseWriter, r *http.Request, tenant string) error {
	session, turn, call := r.PathValue("s"), r.PathValue("t"), r.PathValue("call")
	asRun := false
	switch as := r.URL.Query().Get("as"); as {
	case "", "sent":
	case "run":
		asRun = true
	default:
		return errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("query parameter as=%q: use sent (the default) or run", as))
	}
	var found json.RawMessage
	errFound := errors.New("found")
	err := s.node.ScanEvents(r.Context(), tenant, session, 0, func(ev events.Event) error {
		switch {
		case !asRun && (ev.Type == events.TypeTurnReceived || ev.Type == events.TypeCallsAdded):
			// A posted turn's calls, or a streamed turn's batch.
			p, err := events.Decode(ev)
			var calls []events.CallSpec
			switch p := p.(type) {
			case *events.TurnReceived:
				if p.Turn == turn {
					calls = p.Calls
				}
			case *events.CallsAdded:
				if p.Turn == turn {
					calls = p.Calls
				}
			}
			for _, c := range calls {
				if err == nil && c.ID == call {
					found = c.Arguments
					return errFound
				}
			}
		case asRun && ev.Type == events.TypeToolCallRequested:
			p, err := events.Decode(ev)
			if rq, ok := p.(*events.ToolCallRequested); err == nil && ok && rq.Turn == turn && rq.Call == call {
				found = rq.Arguments
				return errFound
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return err
	}
	if found == nil {
		return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no call %q in turn %q of session %s (as %s)", call, turn, session, map[bool]string{false: "sent", true: "run"}[asRun]))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(found)
	return nil
}
