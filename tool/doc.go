// Package tool is callsheet's tool contract (docs/spec.md §1): the declarations every
// tool carries (effect, replay, concurrency, labels, self-concurrency,
// timeout, escalation, mutated and touched paths, classify, deferred), the
// result parts a tool returns, the typed constructor that turns a Go function
// over an argument struct into a tool with a generated JSON Schema and strict
// validation, and the registry that refuses a tool breaking a rule.
//
// Arguments go through NormalizeArguments (an object, or a string holding
// one, as providers send them) and a validator from CompileSchema (unknown
// fields, wrong JSON types and missing required fields refused, no coercion)
// before any tool code runs; both report an *ArgumentError whose problems name
// their JSON path, for the model to fix. RedactError masks obvious secrets in
// error text the model will see.
//
// A call's arguments are validated when it is planned and again when it runs
// (docs/performance.md, "CPU per call"): a typed tool keeps a small
// bounded memo of the arguments it has validated, keyed by their exact bytes,
// so the run only decodes what the validation prepared (argsMemo says why it
// can admit nothing that did not validate). Arguments are parsed in one pass
// (fastParseArguments, with encoding/json's token decoder for the rest and
// for every message), and jsonschema-go's pass is skipped where the
// checker's own walk decides the schema alone (walkCovers); differential
// fuzz tests hold each shortcut to the full path.
//
// It imports nothing of callsheet's.
package tool
