// Package projections holds pure folds over a session's events: the
// transcript (turns, results in call order, retry notices), and the ledgers
// built from the same log. The same events always give byte-identical output,
// live or replayed; nothing here does I/O.
package projections
