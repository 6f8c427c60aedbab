package api

import (
	"context"
	"encoding/json"
	"net/http"
)

// getCheckpoints serves the token's tenant's checkpoints (docs/audit.md,
// "Checkpoints and the witness"): signed heads of its sessions, kept
// outside their logs, as NDJSON, one events.Checkpoint a line: the latest of
// each session (of ?session=S alone), then, with ?follow=true (the
// default), every new one until the client goes away. replay --verify --url
// reads a session's; replay --witness --url follows them into a file. A
// followed answer holds one of the tenant's live streams
// (event_streams.max_per_tenant), as a followed event stream does. A node
// that keeps no checkpoints answers 404.
func (s *Server) getCheckpoints(w http.ResponseWriter, r *http.Request, tenant string) error {
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
	ch, err := s.node.Checkpoints(ctx, tenant, r.URL.Query().Get("session"), follow)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return nil
	}
	for cp := range ch {
		b, err := json.Marshal(cp)
		if err != nil {
			return nil
		}
		if _, err := w.Write(append(b, '\n')); err != nil || rc.Flush() != nil {
			return nil // the client went away
		}
	}
	return nil
}
