// Package native translates between callsheet turns and the model
// providers' own JSON shapes (docs/spec.md §8, "Provider-native turns"):
// Decode reads the tool calls out of an OpenAI Chat Completion, an OpenAI
// Responses object or an Anthropic Messages response (whole, or just its
// assistant part), and Answer renders a turn's committed results as what
// the harness appends to its conversation: OpenAI Chat messages, Responses
// input items, or an Anthropic user message.
//
// It is pure: no I/O, no clock, no ids. The HTTP API (package api) reads
// the body, refuses duplicate keys, calls the node and writes what this
// package renders.
package native
