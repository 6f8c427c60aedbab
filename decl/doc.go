// Package decl is the vocabulary of a call's three declarations
// (docs/spec.md §1): its Effect on the world, its Replay policy and its
// concurrency Class. It is their one owner: the tool contract (package
// tool), the events that record a call (package events), the config and
// every decision use these types and lists, and nothing else spells them
// out. It imports nothing.
package decl
