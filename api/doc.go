// Package api serves the HTTP API of docs/spec.md §8 over a *node.Node: sessions,
// turns, live events (Server-Sent Events or NDJSON), transcripts, the
// timeline page (live while the session runs), full outputs, the tool
// definitions a model is given, health and metrics.
//
// Every error is answered as {"error": {"code", "message"}} with a 4xx or
// 5xx status: the node's errors by their code (node.Code), mapped to a
// status in one table (statuses, errors.go); the API's own (a body it
// cannot decode, a token it does not know) as *Error. With tenants configured every call but /healthz needs
// "Authorization: Bearer <token>" and sees only its tenant; without them the
// API serves the single tenant config.DefaultTenant. A token also names a
// principal (LocalPrincipal without tenants), which is what approvals and
// answers record as who decided: never a name in the body or a header
// (docs/spec.md §10 "Provenance").
//
// The package decides nothing about tools or sessions: it decodes requests,
// authenticates the tenant, calls the node and encodes its answers. The
// transcript it serves is projections.Marshal of node.Transcript, the same
// bytes cmd/callsheet-replay prints for the same log; so is its timeline page.
package api
