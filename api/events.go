package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/callsheet/callsheet/events"
)

// EventItem is one event as GET /v1/sessions/{s}/events shows it: the whole
// stored envelope (sequence, id, type, time, tenant, session, causation, the
// hash chain's prev) and
// the payload as data, so a tenant's auditor can check the log through the
// API as cmd/callsheet-replay --verify checks it directly (docs/spec.md §8). A call's
// events carry data.call (the model's call id) and, for attempts,
// data.attempt.
type EventItem struct {
	Seq       uint64          `json:"seq"`
	ID        string          `json:"id"`
	Type      events.Type     `json:"type"`
	Time      time.Time       `json:"time"`
	Tenant    string          `json:"tenant"`
	Session   string          `json:"session"`
	Causation string          `json:"causation,omitempty"`
	Prev      string          `json:"prev,omitempty"`
	Data      json.RawMessage `json:"data"`
}

func itemOf(ev events.Event) EventItem {
	return EventItem{Seq: ev.Seq, ID: ev.ID, Type: ev.Type, Time: ev.Time, Tenant: ev.Tenant, Session: ev.Session, Causation: ev.Causation, Prev: ev.Prev, Data: ev.Data}
}

// getEvents streams a session's events after ?after=N (default 0, or the
// SSE Last-Event-ID header): as Server-Sent Events when the client accepts
// text/event-stream, else as NDJSON. ?follow=true (the default) stays live
// until the client goes away; follow=false sends what is recorded and ends.
// Every event is flushed as it is written. A tenant holds at most
// event_streams.max_per_tenant followed streams on this node at once; one
// more is refused with 429 too_many_streams.
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request, tenant string) error {
	sse := acceptsEventStream(r.Header.Get("Accept"))
	after, err := afterParam(r, sse)
	if err != nil {
		return err
	}
	follow, err := boolParam(r, "follow", true)
	if err != nil {
		return err
	}
	if follow {
		release, err := s.holdStream(tenant)
		if err != nil {
			return err
		}
		defer release()
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.streams, cancel)()
	session := r.PathValue("s")
	rc := http.NewResponseController(w)
	begin := func() error {
		h := w.Header()
		if sse {
			h.Set("Content-Type", "text/event-stream")
		} else {
			h.Set("Content-Type", "application/x-ndjson")
		}
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no") // no proxy buffering of a live stream
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		return rc.Flush()
	}
	// emit writes one event; an error means the client went away, or the
	// event does not encode (logged): either way the stream ends.
	emit := func(ev events.Event) error {
		b, err := json.Marshal(itemOf(ev))
		if err != nil {
			s.log.Error("an event does not encode", "seq", ev.Seq, "tenant", tenant, "session", session, "err", err)
			return err
		}
		if sse {
			_, err = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b)
		} else {
			_, err = w.Write(append(b, '\n'))
		}
		if err == nil {
			err = rc.Flush()
		}
		return err
	}
	if !follow {
		// What is recorded, read in bounded batches as it is written out:
		// an error before the first event is the answer, after it ends the
		// stream.
		begun := false
		err := s.node.ScanEvents(ctx, tenant, session, after, func(ev events.Event) error {
			if !begun {
				begun = true
				if err := begin(); err != nil {
					return err
				}
			}
			return emit(ev)
		})
		switch {
		case !begun && err != nil:
			return err
		case !begun:
			_ = begin()
		case err != nil && ctx.Err() == nil:
			s.log.Warn("an event stream ended early", "tenant", tenant, "session", session, "err", err)
		}
		return nil
	}
	ch, err := s.node.Events(ctx, tenant, session, after, true)
	if err != nil {
		return err
	}
	// From here on the answer has begun: failures end the stream, they
	// cannot become an error answer.
	if err := begin(); err != nil {
		return nil
	}
	var tick <-chan time.Time
	if sse {
		t := time.NewTicker(s.keepAlive)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return nil
			}
			if emit(ev) != nil {
				return nil
			}
		case <-tick:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// streamLimit counts the live (followed) event streams of each tenant on
// this node against event_streams.max_per_tenant: each holds a JetStream
// consumer and two goroutines until its client goes away, so one tenant
// must not be able to hold them without bound. Safe for concurrent use.
type streamLimit struct {
	max  int
	mu   sync.Mutex
	live map[string]int
}

// holdStream takes one of tenant's live-stream places, or refuses with 429
// too_many_streams naming the limit. The returned func gives it back.
func (s *Server) holdStream(tenant string) (release func(), err error) {
	l := &s.streamLimit
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live[tenant] >= l.max {
		streams := "streams"
		if l.live[tenant] == 1 {
			streams = "stream"
		}
		return nil, errorf(http.StatusTooManyRequests, CodeTooManyStreams, fmt.Sprintf(
			"tenant %q already holds %d live event %s on this node, its limit (event_streams.max_per_tenant = %d): "+
				"close one, read with follow=false, or raise the limit", tenant, l.live[tenant], streams, l.max))
	}
	if l.live == nil {
		l.live = map[string]int{}
	}
	l.live[tenant]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.live[tenant]--; l.live[tenant] <= 0 {
			delete(l.live, tenant)
		}
	}, nil
}

// afterParam reads ?after=N; for SSE without it, a reconnecting client's
// Last-Event-ID resumes after the last event it saw.
func afterParam(r *http.Request, sse bool) (uint64, error) {
	v := r.URL.Query().Get("after")
	name := "query parameter after"
	if v == "" && sse {
		v, name = strings.TrimSpace(r.Header.Get("Last-Event-ID")), "Last-Event-ID header"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("%s=%q: use a non-negative event sequence number", name, v))
	}
	return n, nil
}

// acceptsEventStream reports whether an Accept header names
// text/event-stream (with a non-zero quality).
func acceptsEventStream(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || mt != "text/event-stream" {
			continue
		}
		if q, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(q, 64); err == nil && f == 0 {
				continue
			}
		}
		return true
	}
	return false
}
