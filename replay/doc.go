// Package replay holds the pure parts of cmd/replay: Verify, which checks a
// session's log for integrity (sequence, envelope, causation, ordered
// commit, claims and attempts), and Markdown, which renders a transcript for
// people. Both work on values already read from the log; nothing here does
// I/O, so the same events always give the same report and the same text.
package replay
