package api

import (
	"context"
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
// replay.Timeline renders from the session's audit fold, the same bytes
// cmd/replay --format html prints for the same log.
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
	recorded, err := s.node.Events(ctx, tenant, session, 0, false)
	if err != nil {
		return err
	}
	f := projections.NewAuditFolder(tenant, session)
	for ev := range recorded {
		f.Apply(ev)
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
