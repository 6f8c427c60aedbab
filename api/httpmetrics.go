package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/callsheet/callsheet/internal/opsmetrics"
)

// reqInfo is what the metrics learn about a request while it is served:
// the tenant, once authenticated (handle sets it).
type reqInfo struct{ tenant string }

type reqInfoKey struct{}

// measure starts timing r. The returned writer records the status; done,
// given the request as it was finally served, counts it in
// callsheet_http_requests_total and callsheet_http_request_duration_seconds
// under the pattern of the route that served it (Request.Pattern, which
// ServeMux sets), its method and its status class.
func measure(ops *opsmetrics.Set, w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, func(*http.Request)) {
	if ops == nil {
		return w, r, func(*http.Request) {}
	}
	start := time.Now()
	info := &reqInfo{}
	r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info))
	sw := &statusWriter{ResponseWriter: w}
	return sw, r, func(r *http.Request) {
		route := opsmetrics.RouteUnmatched
		if r.Pattern != "" {
			route = r.Pattern
			if _, path, ok := strings.Cut(route, " "); ok {
				route = path // "POST /v1/sessions" → "/v1/sessions"; the method is a label of its own
			}
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK // nothing written: net/http answers 200
		}
		ops.HTTPRequest(route, method(r.Method), status, info.tenant, time.Since(start))
	}
}

// method bounds the method label to the methods the API serves.
func method(m string) string {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead, http.MethodOptions, http.MethodPatch:
		return m
	}
	return "other"
}

// setTenant records the authenticated tenant of r for its metrics.
func setTenant(r *http.Request, tenant string) {
	if info, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
		info.tenant = tenant
	}
}

// statusWriter records the first status written. Unwrap gives
// http.ResponseController the connection's own writer (flushes of event
// streams, deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes a flush through, for handlers that assert http.Flusher.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
