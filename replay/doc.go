// Package replay holds the pure parts of cmd/callsheet-replay and of the timeline
// route: Verify, which checks a session's log for integrity (sequence,
// envelope, causation, ordered commit, claims and attempts); Markdown and
// Timeline, which render a session's audit model (projections.FoldAudit)
// for people as text and as the self-contained timeline page of
// docs/audit.md (TimelineStart, TimelineUpdate and TimelineEnd stream the
// same page live); and Restore, which puts checkpointed files back. Verify
// and the renderers work on values already read from the log and do no
// I/O, so the same events always give the same report, text and page.
package replay
