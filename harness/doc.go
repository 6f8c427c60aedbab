// Package harness runs harness tools: tools a harness registers over the
// API (schema and declarations; what it leaves out is strictest) and runs
// in its own processes, in any language, as external workers that poll for
// tasks, heartbeat and report (docs/spec.md §7 "Harness tools and external
// workers", docs/workers.md).
//
// A harness tool is an ordinary tool.Tool (Spec.Tool) whose Run hands the
// call to a worker through the Hub and waits: validation, permission,
// scheduling, claims, timeouts, replay policy and the ordered commit stay
// the runtime's, untouched. The pool calls Run only after the call's claim
// is durable (a read-only, safe tool as its unclaimed path allows), so a
// never-replay task is handed out only once its claim is in the log.
//
// Everything between a waiting call and its worker goes over NATS (Hub):
// any node serves a poll, a heartbeat or a result, wherever the call
// waits; one that reaches the call's own node is served there without it. Registrations are kept in a KV bucket every node watches (Store),
// so every node and every restart knows them.
package harness
