// Package security holds the security suite: tests that attack the
// boundaries of docs/spec.md §10 the way a hostile model would, against
// real node processes (internal/testnode), real files, real symlinks and
// real sockets. Each attack class has its own file; docs/security.md names
// the boundary each one checks and what enforces it.
//
// The package has no non-test code.
package security
