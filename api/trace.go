package api

import (
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// traceContext reads and writes the W3C traceparent and tracestate headers.
var traceContext = propagation.TraceContext{}

// traceParent returns r carrying, in its context, the remote span its
// traceparent header names (the harness's span of the request): the node
// makes the turn's span its child (docs/operations.md, "Traces"). A request
// without one, or with one that does not parse, is r itself. A call
// forwarded to another node of the fleet keeps the header as it came.
func traceParent(r *http.Request) *http.Request {
	if r.Header.Get("Traceparent") == "" {
		return r
	}
	return r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
}
