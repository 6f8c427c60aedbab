// Package projections holds pure folds over a session's events: the
// transcript (Fold: turns, results in call order, retry notices), byte-
// identical live or replayed, and the audit model (FoldAudit, AuditFolder:
// every call's attempts with their requested, claimed, started and ended
// times, blocks, approvals and their deciders, retries, checkpoints,
// truncations, notices, answers, work state, rewinds and the close), which
// the timeline page and the Markdown of docs/audit.md draw. The transcript
// fold refuses an event it cannot place; the audit fold never fails, and
// shows such an event (an unknown type from a newer node, say) as a Mark.
// Nothing here does I/O or reads a clock.
package projections
