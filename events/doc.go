// Package events defines callsheet's events: past-tense facts with a ULID id,
// tenant, session, per-session sequence, time and causation, the payload of
// each type, and the Log interface that stores them. It imports nothing of
// callsheet's; the JetStream implementation lives in events/natslog.
package events
