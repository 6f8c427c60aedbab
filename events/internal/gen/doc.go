// Package gen writes events/payloads_json.go: for every payload type of
// package events and the struct types they hold, an encoder that appends the
// bytes json.Marshal writes for a value, and one that appends the canonical
// encoding (events/canon.go) of those bytes, both without reflection at run
// time (docs/events.md, "One encoding per event"; docs/performance.md,
// "CPU per call").
//
// It reflects over the types as encoding/json does (exported fields in
// declaration order, embedded structs inlined, json tags, omitempty, the
// shallower or the tagged of two fields of one name) and refuses, naming the
// field, anything it does not reproduce exactly (maps, interfaces, float32,
// the ",string" option, types with their own MarshalJSON or MarshalText but
// json.RawMessage), so a payload type that gains such a field fails
// generation rather than encoding differently. Run it with `go generate
// ./events`; the events tests fail while the file is stale.
package gen
