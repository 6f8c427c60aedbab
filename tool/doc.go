// Package tool is callsheet's tool contract (SPEC §1): the declarations every
// tool carries (effect, replay, concurrency, labels, self-concurrency,
// timeout, escalation, mutated and touched paths, classify, deferred), the
// result parts a tool returns, the typed constructor that turns a Go function
// over an argument struct into a tool with a generated JSON Schema and strict
// validation, and the registry that refuses a tool breaking a rule. It imports
// nothing of callsheet's.
package tool
