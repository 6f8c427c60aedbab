package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrOutside is wrapped by the error Resolve returns for a path that leaves
// the workspace, lexically or through a symbolic link.
var ErrOutside error = permanentError("workspace: path is outside the workspace")

// ErrInvalidPath is wrapped by the error Resolve returns for a path that is
// not a usable path at all: empty, or holding a NUL byte.
var ErrInvalidPath error = permanentError("workspace: invalid path")

// ErrBadRoot is wrapped by the error Resolve returns when the root itself is
// unusable: empty, holding a NUL byte, or with links that cannot be
// evaluated (a loop, a directory that cannot be read).
var ErrBadRoot = errors.New("workspace: invalid workspace root")

// maxLinks bounds how many symbolic links Resolve follows for one path, like
// the kernel's MAXSYMLINKS (40 on Linux); a cycle ends here.
const maxLinks = 40

// Resolve confines p to the workspace root and returns its absolute form abs
// and its workspace-relative form rel (both cleaned; rel is "." for the root
// itself, and abs is always filepath.Join(root, rel) with root made absolute).
//
// p is relative to root, or absolute inside root (inside either root as
// given or root with its own symbolic links evaluated, so a workspace under a
// linked /tmp still accepts its real path). Resolve refuses, with an error
// wrapping ErrOutside that names p:
//   - a ".." that climbs out of root ("a/../b" is fine, "../b" is not);
//   - an absolute path outside root;
//   - a path whose existing components, the last one included, lead outside
//     the real root through symbolic links; a dangling link is followed as
//     far as it goes, so a link to a file that does not exist yet outside the
//     workspace is refused too. Both abs and p as written are checked, so a
//     ".." after a link ("up/../x" with up -> ..) cannot climb out either.
//
// An empty p, or one holding a NUL byte, is refused with ErrInvalidPath.
// Resolve follows links the way the kernel would (component by component, a
// ".." after a link applies to the link's target), reads directory entries
// and links but no file contents, and writes nothing. It is safe for
// concurrent use; see the package comment for what a check at one moment
// cannot promise.
func Resolve(root, p string) (abs string, rel string, err error) {
	if p == "" {
		return "", "", fmt.Errorf("%w: the path is empty; give a path relative to the workspace", ErrInvalidPath)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", "", fmt.Errorf("%w: path %q holds a NUL byte", ErrInvalidPath, p)
	}
	if root == "" || strings.IndexByte(root, 0) >= 0 {
		return "", "", fmt.Errorf("%w: %q", ErrBadRoot, root)
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: %w", ErrBadRoot, root, err)
	}
	realRoot, err := realPath(root)
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: %w", ErrBadRoot, root, err)
	}

	outside := func() error {
		return fmt.Errorf("%w: %q resolves outside %s; paths must stay inside the workspace (relative to it, or absolute under it)", ErrOutside, p, root)
	}

	// Lexical containment first: where the caller will operate.
	if filepath.IsAbs(p) {
		c := filepath.Clean(p)
		var ok bool
		if rel, ok = within(root, c); !ok {
			if rel, ok = within(realRoot, c); !ok {
				return "", "", outside()
			}
		}
	} else {
		var ok bool
		if rel, ok = within(root, filepath.Join(root, p)); !ok {
			return "", "", outside()
		}
	}
	abs = filepath.Join(root, rel)

	// Then what the kernel would reach, every link along the way evaluated:
	// both for abs, where callers operate, and for p as written, which can
	// differ when a ".." follows a link ("up/../x" with up -> ..) and must not
	// mean something outside either.
	raw := p
	if !filepath.IsAbs(raw) {
		raw = root + string(filepath.Separator) + p
	}
	for _, q := range []string{abs, raw} {
		real, err := realPath(q)
		if err != nil {
			return "", "", fmt.Errorf("workspace: resolve %q: %w", p, err)
		}
		if _, ok := within(realRoot, real); !ok {
			return "", "", outside()
		}
	}
	return abs, rel, nil
}

// within reports whether the clean absolute path p is base or below it, and
// returns p relative to base.
func within(base, p string) (string, bool) {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return "", false
	}
	if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// realPath evaluates the symbolic links of the absolute path p like
// filepath.EvalSymlinks, except that a path whose tail does not exist is not
// an error: from the first missing component on, the rest is joined
// lexically. A dangling link is followed to its (missing) target. Because
// the prefix it has built is always a real directory, a ".." after a link
// climbs from the link's target, as the kernel does.
func realPath(p string) (string, error) {
	queue := splitPath(p)
	cur := string(filepath.Separator)
	missing := false
	links := 0
	for len(queue) > 0 {
		comp := queue[0]
		queue = queue[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, comp)
		if missing {
			cur = next
			continue
		}
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			// Nothing below a missing entry (or below a file) exists; the
			// kernel would fail there too.
			missing = true
			cur = next
			continue
		case err != nil:
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		links++
		if links > maxLinks {
			return "", fmt.Errorf("too many levels of symbolic links at %s", next)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = string(filepath.Separator)
		}
		queue = append(splitPath(target), queue...)
	}
	return cur, nil
}

// splitPath returns the components of p; empty ones (from a leading or
// doubled separator) are dropped by realPath's loop.
func splitPath(p string) []string {
	return strings.Split(p, string(filepath.Separator))
}
