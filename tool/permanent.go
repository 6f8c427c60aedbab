package tool

import (
	"context"
	"errors"
	"io/fs"
	"syscall"
)

// IsPermanent reports whether err is a failure that trying again cannot
// fix, so the runtime settles it at once rather than retry it, even for a
// replay-safe tool (docs/spec.md §3). This is the one place that decides
// it. A failure is permanent when
//
//   - it wraps ErrPermanent (see Permanent), ErrInvalidArguments or
//     ErrNoRuntime;
//   - an error in its chain says so with a method Permanent() bool that
//     returns true: packages below this one (workspace) mark their errors
//     that way without importing it;
//   - it is a file system answer about the path itself, which a retry a
//     moment later gets again: the file does not exist (fs.ErrNotExist), a
//     name is too long (ENAMETOOLONG), a component is not a directory
//     (ENOTDIR), a directory is not a file (EISDIR), or links loop (ELOOP).
//
// A cancelled or expired context is never permanent: what it means is
// decided by the call's replay policy. IsPermanent(nil) is false.
func IsPermanent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrPermanent) || errors.Is(err, ErrInvalidArguments) || errors.Is(err, ErrNoRuntime) || errors.Is(err, fs.ErrNotExist) {
		return true
	}
	var marked interface{ Permanent() bool }
	if errors.As(err, &marked) && marked.Permanent() {
		return true
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENAMETOOLONG, syscall.ENOTDIR, syscall.EISDIR, syscall.ELOOP:
			return true
		}
	}
	return false
}
