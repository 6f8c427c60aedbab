// Package schema validates JSON values against JSON Schema (draft 2020-12
// and draft-07), as the official JSON Schema Test Suite reads those drafts,
// within bounds no schema can exceed: it is the one validator of every
// tool's arguments (typed Go tools, command tools, harness tools, MCP
// tools; see tool.CompileSchema).
//
// Compile checks a document's depth and size (DefaultMaxDepth,
// DefaultMaxNodes) before decoding it, resolves every "$ref",
// "$dynamicRef", "$id", "$anchor" and "$dynamicAnchor" within the document
// (another document is never fetched: such a reference is refused), and
// refuses references that lead back to a schema without descending into
// the value (validation would never end). Validate takes at most
// DefaultMaxSteps steps and nests at most DefaultMaxEvalDepth schemas; it
// remembers each verdict of a schema reached along several edges per
// (schema, value), so that allOf of two references nested n deep costs n
// steps per value, not 2^n, and past either bound it stops and says so.
//
// Numbers are compared exactly as written, never through float64: an
// instance's decimal against a bound's decimal, multipleOf by integer
// arithmetic on the digits, and a hostile exponent (1e999999999) costs
// only its digits.
//
// Options.CloseObjects adds callsheet's strict default (docs/spec.md §1):
// an object schema listing "properties" and nothing about other members
// refuses the members nothing in it evaluated.
//
// It imports nothing of callsheet's.
package schema
