package workspace

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrOutside is matched (errors.Is) by every error that refuses a path
// because it leaves the workspace: lexically (a ".." climbing out, an
// absolute path elsewhere) or through a symbolic link. The error itself is
// an *OutsideError naming the path.
var ErrOutside error = permanentError("workspace: path is outside the workspace")

// ErrInvalidPath is wrapped by the error returned for a path that is not a
// usable path at all: empty, or holding a NUL byte.
var ErrInvalidPath error = permanentError("workspace: invalid path")

// ErrInvalidName is wrapped by the *NameError returned for a workspace name
// that is not a relative path of plain components (see ValidName).
var ErrInvalidName = errors.New("workspace: invalid workspace name")

// ErrNameLink is wrapped by the *NameError returned when a component of a
// workspace name is a symbolic link (or was swapped for something else
// while the workspace was being opened). A workspace name never passes
// through a link, not even one that stays inside the tenant's root, since
// such a link can lead into another session's workspace.
var ErrNameLink = errors.New("workspace: the workspace name passes through a symbolic link")

// ErrNotDir is wrapped by the *NameError returned when a component of a
// workspace name exists but is not a directory.
var ErrNotDir = errors.New("workspace: a component of the workspace name is not a directory")

// OutsideError is a path refused because it resolves outside the workspace.
// It matches ErrOutside. Path is the path as the caller gave it (workspace-
// relative or absolute); Link, when set, is the symbolic link (workspace-
// relative) through which it leaves, and Target where that link points.
type OutsideError struct {
	Path   string
	Link   string
	Target string
}

// Error says which path resolves outside the workspace, through which link,
// and what to do.
func (e *OutsideError) Error() string {
	via := ""
	if e.Link != "" {
		via = fmt.Sprintf(" (through the symbolic link %s -> %s)", e.Link, e.Target)
	}
	return fmt.Sprintf("path %q resolves outside the workspace%s; paths must stay inside the workspace (relative to it, or absolute under it)", e.Path, via)
}

// Is reports whether target is ErrOutside.
func (e *OutsideError) Is(target error) bool { return target == ErrOutside }

// Permanent reports true: the same path is refused again (tool.IsPermanent).
func (e *OutsideError) Permanent() bool { return true }

// NameError is a workspace name refused when a workspace is opened or
// created: Name as given, the component (a prefix of Name) where the
// problem is, and Err, one of ErrInvalidName, ErrNameLink, ErrNotDir, or an
// error matching fs.ErrNotExist or fs.ErrPermission.
type NameError struct {
	Name      string
	Component string
	Err       error
}

// Error says what is wrong with the name, where, and what to do.
func (e *NameError) Error() string {
	switch {
	case errors.Is(e.Err, ErrNameLink):
		return fmt.Sprintf("workspace %q: %s is a symbolic link (or was replaced while opening); a workspace name never passes through a symbolic link, so name a real directory", e.Name, e.Component)
	case errors.Is(e.Err, ErrNotDir):
		return fmt.Sprintf("workspace %q: %s is not a directory", e.Name, e.Component)
	case errors.Is(e.Err, ErrInvalidName):
		return fmt.Sprintf("workspace %q: %v", e.Name, e.Err)
	}
	return fmt.Sprintf("workspace %q: %s: %v", e.Name, e.Component, e.Err)
}

// Unwrap returns Err.
func (e *NameError) Unwrap() error { return e.Err }

// MaxNameBytes bounds a workspace name (the kernel's PATH_MAX is 4096; the
// tenant's root comes in front).
const MaxNameBytes = 1024

// ValidName checks a workspace name: one or more components separated by
// "/", each of ASCII letters, digits, '.', '_' and '-', none of them "." or
// "..", at most MaxNameBytes in all. It is pure (it looks at no file); the
// error is a *NameError wrapping ErrInvalidName.
func ValidName(name string) error {
	bad := func(why string) error {
		return &NameError{Name: name, Component: name, Err: fmt.Errorf("%w: %s; a workspace is a relative directory under the tenant's workspace root (letters, digits, '.', '_', '-', components separated by '/', no '.' or '..')", ErrInvalidName, why)}
	}
	switch {
	case name == "":
		return bad("the name is empty")
	case len(name) > MaxNameBytes:
		return bad(fmt.Sprintf("the name is %d bytes, more than %d", len(name), MaxNameBytes))
	}
	for c := range strings.SplitSeq(name, "/") {
		switch c {
		case "":
			return bad("it has an empty component (a leading, trailing or doubled '/')")
		case ".", "..":
			return bad(fmt.Sprintf("it has a %q component", c))
		}
		for i := 0; i < len(c); i++ {
			b := c[i]
			if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
				return bad(fmt.Sprintf("byte %q is not allowed", b))
			}
		}
	}
	return nil
}

// Rel returns p as a clean path relative to the workspace at root: p is
// relative to root, or absolute under it. "." is the workspace itself. It is
// pure: it looks at no file and follows no link, so it decides only what is
// lexically inside; operations then go through a Dir, which confines links.
// Use it to put a model's path into the form recorded for mutated and
// touched paths and shown in messages.
//
// The error wraps ErrInvalidPath for an empty p or one holding a NUL byte,
// and is an *OutsideError (matching ErrOutside) for a ".." that climbs out
// or an absolute path elsewhere. root must be absolute and clean.
func Rel(root, p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%w: the path is empty; give a path relative to the workspace", ErrInvalidPath)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: path %q holds a NUL byte", ErrInvalidPath, p)
	}
	if filepath.IsAbs(p) {
		if rel, ok := within(root, filepath.Clean(p)); ok {
			return rel, nil
		}
		return "", &OutsideError{Path: p}
	}
	rel := filepath.Clean(p)
	if escapes(rel) {
		return "", &OutsideError{Path: p}
	}
	return rel, nil
}

// within reports whether the clean absolute path p is base or below it, and
// returns p relative to base.
func within(base, p string) (string, bool) {
	if base == "" {
		return "", false
	}
	rel, err := filepath.Rel(base, p)
	if err != nil || escapes(rel) || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// escapes reports whether the clean relative path rel climbs above its base.
func escapes(rel string) bool {
	return rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
