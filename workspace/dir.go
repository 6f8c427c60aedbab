package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Owner is the uid and gid a new workspace's directories are given.
type Owner struct {
	UID, GID int
}

// Dir is an open workspace: an *os.Root on the workspace directory, so every
// operation through it stays beneath the directory (symbolic links are
// followed only while they stay inside; a directory swapped for a link
// mid-walk cannot lead out), and the directory's path for messages and for
// processes that need one. A Dir is got only from Open, Create or OpenDir,
// which verify the directory; there is no way to make one from a path
// without that check.
//
// When the node runs as root, every file and directory created through a
// Dir (WriteFile, MkdirAll) is given the uid and gid the workspace's root
// directory has then, so a sandboxed command running as the workspace's
// owner can change what the file tools wrote.
//
// A Dir is safe for concurrent use. Close releases its descriptor.
type Dir struct {
	root *os.Root
	// path is the workspace's absolute path as opened; real is path with
	// its symbolic links evaluated when it was opened ("" when that
	// failed). Both only serve to accept absolute paths from a model and
	// to strip them from messages: nothing is opened by them.
	path, real string
	// root is true when the node runs as root: only then are files given
	// the workspace's owner.
	asRoot bool
	// dev and ino identify the directory the root holds, as the walk
	// that verified it reached it (a Cache compares them with what the
	// name leads to at each use).
	dev, ino uint64
	// share, when set, makes this Dir a lease of a Cache's shared handle:
	// Close releases the lease instead of the descriptor (cache.go).
	share    *entry
	released atomic.Bool
}

// Open opens the existing workspace name under tenantRoot (an absolute
// directory the node owns, such as ROOT/TENANT). Each component of name is
// opened relative to the one before without following a symbolic link
// (openat with O_NOFOLLOW|O_DIRECTORY), so a name that passes through a
// link is refused even if the link stays inside tenantRoot; the os.Root the
// Dir holds is then checked to be that very directory (same device and
// inode), so a swap between the walk and the open is refused too.
//
// The error is a *NameError: wrapping ErrInvalidName (see ValidName),
// ErrNameLink, ErrNotDir, or an error matching fs.ErrNotExist when the
// workspace (or tenantRoot) does not exist.
func Open(tenantRoot, name string) (*Dir, error) {
	return open(tenantRoot, name, false, nil)
}

// Create is Open that first makes the missing directories of name, each
// with mode 0755 (less the umask) and, when owner is not nil, given to
// owner (which needs the node to run as root). tenantRoot itself is made
// with its parents if missing, mode 0700: the node's alone. Directories
// that exist are left as they are;
// a component that is a symbolic link is refused, as by Open, and nothing is
// created behind it.
func Create(tenantRoot, name string, owner *Owner) (*Dir, error) {
	return open(tenantRoot, name, true, owner)
}

func open(tenantRoot, name string, create bool, owner *Owner) (*Dir, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(tenantRoot) {
		return nil, &NameError{Name: name, Component: tenantRoot, Err: errors.New("the tenant's workspace root is not an absolute path")}
	}
	tenantRoot = filepath.Clean(tenantRoot)
	if create {
		// The tenant's root is the node's alone.
		if err := os.MkdirAll(tenantRoot, 0o700); err != nil {
			return nil, &NameError{Name: name, Component: "the tenant's workspace root", Err: err}
		}
	}
	// The tenant's root is the node's own; only its last component is
	// checked for a link (its parents are the operator's configuration).
	fd, err := openNoFollow(unix.AT_FDCWD, tenantRoot)
	if err != nil {
		return nil, nameErr(name, "the tenant's workspace root", unix.AT_FDCWD, tenantRoot, err)
	}
	comps := strings.Split(name, "/")
	for i, c := range comps {
		prefix := strings.Join(comps[:i+1], "/")
		next, err := openNoFollow(fd, c)
		if create && errors.Is(err, unix.ENOENT) {
			switch err = mkdirat(fd, c); {
			case err == nil && owner != nil:
				if err = unix.Fchownat(fd, c, owner.UID, owner.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					err = fmt.Errorf("giving it to uid %d, gid %d: %w", owner.UID, owner.GID, err)
				}
			case errors.Is(err, unix.EEXIST):
				err = nil // made meanwhile: the open below decides
			}
			if err == nil {
				next, err = openNoFollow(fd, c)
			}
		}
		if err != nil {
			err = nameErr(name, prefix, fd, c, err)
			unix.Close(fd)
			return nil, err
		}
		unix.Close(fd)
		fd = next
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &NameError{Name: name, Component: name, Err: err}
	}
	p := filepath.Join(tenantRoot, filepath.FromSlash(name))
	root, err := os.OpenRoot(p)
	if err == nil {
		var fi fs.FileInfo
		if fi, err = root.Stat("."); err == nil {
			if rs, ok := fi.Sys().(*syscall.Stat_t); !ok || uint64(rs.Dev) != uint64(st.Dev) || rs.Ino != st.Ino {
				err = ErrNameLink // the path now leads elsewhere: a component was swapped
			}
		}
		if err != nil {
			root.Close()
		}
	}
	if err != nil {
		if !errors.Is(err, ErrNameLink) {
			err = fmt.Errorf("%w: %w", ErrNameLink, err)
		}
		return nil, &NameError{Name: name, Component: name, Err: err}
	}
	d := newDir(root, p)
	d.dev, d.ino = uint64(st.Dev), st.Ino
	return d, nil
}

// OpenDir opens the directory at path (made absolute) as a workspace,
// following any symbolic links in path itself: for a directory an operator
// names (cmd/callsheet-replay --rewind --workspace DIR) or a test's temporary one,
// never for a name a session chose (use Open). Inside it, the Dir confines
// every operation as Open's does.
func OpenDir(dir string) (*Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, err
	}
	fi, err := root.Stat(".")
	if err != nil {
		root.Close()
		return nil, err
	}
	var dev, ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		dev, ino = uint64(st.Dev), st.Ino
	}
	d := newDir(root, abs)
	d.dev, d.ino = dev, ino
	return d, nil
}

func newDir(root *os.Root, p string) *Dir {
	d := &Dir{root: root, path: p, asRoot: os.Geteuid() == 0}
	if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
		d.real = real
	}
	return d
}

// Owner returns the uid and gid of the workspace's root directory now.
func (d *Dir) Owner() (uid, gid int, err error) {
	fi, err := d.root.Stat(".")
	if err != nil {
		return -1, -1, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1, fmt.Errorf("workspace: no owner for %s", d.path)
	}
	return int(st.Uid), int(st.Gid), nil
}

// chownTo says whom a file created now must be given: the workspace's
// owner, when the node runs as root and that owner is not the node's own
// ids (only root can give files away; giving them to its own ids changes
// nothing).
func (d *Dir) chownTo() (uid, gid int, ok bool) {
	if !d.asRoot {
		return 0, 0, false
	}
	uid, gid, err := d.Owner()
	if err != nil || uid == os.Geteuid() && gid == os.Getegid() {
		return 0, 0, false
	}
	return uid, gid, true
}

// Adopt gives the workspace and everything in it to uid and gid (lchown:
// symbolic links themselves, never what they lead to; through the Dir's
// root, so nothing outside is touched), the workspace's root directory
// last, so that files created meanwhile already go to the new owner's. A
// workspace made for one owner (the single sandbox uid of an older
// release) is so handed to another (its tenant's own uid). Only root can.
func (d *Dir) Adopt(uid, gid int) error {
	var errs []error
	fs.WalkDir(d.root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		if p == "." {
			return nil
		}
		if err := d.root.Lchown(p, uid, gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		return nil
	})
	if err := d.root.Lchown(".", uid, gid); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("workspace: give %s to uid %d: %w", d.path, uid, errors.Join(errs...))
	}
	return nil
}

// openNoFollow opens the directory name relative to dirfd without following
// a final symbolic link.
func openNoFollow(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func mkdirat(dirfd int, name string) error {
	for {
		if err := unix.Mkdirat(dirfd, name, 0o755); err != unix.EINTR {
			return err
		}
	}
}

// nameErr words the failure to open component c (relative to dirfd) of
// name, whose prefix up to c is prefix.
func nameErr(name, prefix string, dirfd int, c string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return &NameError{Name: name, Component: prefix, Err: ErrNameLink}
		}
		if errors.Is(err, unix.ENOTDIR) {
			return &NameError{Name: name, Component: prefix, Err: ErrNotDir}
		}
	}
	return &NameError{Name: name, Component: prefix, Err: err}
}

// Path returns the workspace's absolute path, as opened. It is for messages
// and for processes that need a working directory; files are reached
// through the Dir, never by this path.
func (d *Dir) Path() string { return d.path }

// Root returns the os.Root every operation on the workspace goes through.
// Reading, renaming and removing through it are confined; to create files
// or directories use WriteFile and MkdirAll, which also give them the
// workspace's owner.
func (d *Dir) Root() *os.Root { return d.root }

// Handle opens the workspace directory itself, through the root: a
// descriptor of the verified directory, for a child process that must start
// in it (passed in exec.Cmd.ExtraFiles, or named /proc/self/fd/N as a
// working directory or a bind mount's source) rather than wherever the
// workspace's path leads by then, which for a nested workspace its parent's
// session can change. The caller closes it.
func (d *Dir) Handle() (*os.File, error) { return d.root.Open(".") }

// Close releases the Dir's descriptor; operations after Close fail. For a
// Dir got from a Cache, Close releases this lease of the session's shared
// handle instead (once: a second Close does nothing), and the descriptor is
// closed when its last lease is released after the Cache dropped it; the
// caller must not use the Dir after Close either way.
func (d *Dir) Close() error {
	if d.share != nil {
		if d.released.CompareAndSwap(false, true) {
			d.share.cache.release(d.share)
		}
		return nil
	}
	return d.root.Close()
}

// Rel is the package's Rel for this workspace: an absolute p may be under
// the workspace's path as opened or under its real path.
func (d *Dir) Rel(p string) (string, error) {
	rel, err := Rel(d.path, p)
	if err != nil && d.real != "" && filepath.IsAbs(p) {
		if r, ok := within(d.real, filepath.Clean(p)); ok {
			return r, nil
		}
	}
	return rel, err
}

// Resolve confines p to the workspace and returns its workspace-relative
// form rel (lexical, as Rel gives it: the name to record and show) and real,
// the same file with every symbolic link along it replaced by its target,
// as the workspace is now: a workspace-relative path without links, to
// operate on (write through a link; hand a path to a process). A link to an
// absolute path inside the workspace is followed too; a dangling link is
// followed as far as it goes.
//
// The links are read through the Dir's os.Root, and callers operate on real
// through it again, so a link swapped in after Resolve returns still cannot
// lead out: at worst it names another file of the workspace. The error is
// an *OutsideError (matching ErrOutside) naming p and the link that leaves,
// wraps ErrInvalidPath, or says a link loops.
func (d *Dir) Resolve(p string) (rel, real string, err error) {
	if rel, err = d.Rel(p); err != nil {
		return "", "", err
	}
	real, err = d.follow(p, rel)
	return rel, real, err
}

// maxLinks bounds how many symbolic links Resolve follows for one path, like
// the kernel's MAXSYMLINKS (40 on Linux); a cycle ends here.
const maxLinks = 40

// follow is Resolve's walk: component by component from the workspace root,
// each link replaced by its target, ".." applied to the resolved prefix (as
// the kernel does after a link).
func (d *Dir) follow(p, rel string) (string, error) {
	queue := strings.Split(filepath.ToSlash(rel), "/")
	var cur []string // resolved components: no links among them
	missing := false
	links := 0
	var link, target string // the last link followed, to name in an error
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return "", &OutsideError{Path: p, Link: link, Target: target}
			}
			cur = cur[:len(cur)-1]
			continue
		}
		next := append(cur[:len(cur):len(cur)], c)
		if missing {
			cur = next
			continue
		}
		name := strings.Join(next, "/")
		fi, err := d.root.Lstat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			// Nothing below a missing entry, or below a file, exists.
			missing = true
			cur = next
			continue
		case Escaped(err):
			return "", &OutsideError{Path: p}
		case err != nil:
			return "", fmt.Errorf("resolve %s: %w", rel, unwrapPath(err))
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("resolve %s: too many levels of symbolic links at %s", rel, name)
		}
		if target, err = d.root.Readlink(name); err != nil {
			return "", fmt.Errorf("resolve %s: %w", rel, unwrapPath(err))
		}
		link = name
		if filepath.IsAbs(target) {
			r, err := d.Rel(target)
			if err != nil {
				return "", &OutsideError{Path: p, Link: link, Target: target}
			}
			cur, queue = nil, append(strings.Split(filepath.ToSlash(r), "/"), queue...)
			continue
		}
		queue = append(strings.Split(target, "/"), queue...)
	}
	if len(cur) == 0 {
		return ".", nil
	}
	return filepath.FromSlash(strings.Join(cur, "/")), nil
}

// rootEscape is the error os.Root returns for a name that would leave the
// root (os.errPathEscapes, unexported), got once by asking a Root for "..".
var rootEscape = sync.OnceValue(func() error {
	r, err := os.OpenRoot(string(filepath.Separator))
	if err != nil {
		return nil
	}
	defer r.Close()
	_, err = r.Lstat("..")
	return unwrapPath(err)
})

// Escaped reports whether err is os.Root's refusal of a name that would
// leave the root (through "..", an absolute link, or a link that climbs
// out, as when a directory was swapped for a link mid-operation). Callers
// that operate through Root() map such an error to an *OutsideError.
func Escaped(err error) bool {
	if err == nil {
		return false
	}
	inner := unwrapPath(err)
	if e := rootEscape(); e != nil {
		return inner == e
	}
	return inner.Error() == "path escapes from parent"
}

// unwrapPath returns the error inside an *fs.PathError or *os.LinkError.
func unwrapPath(err error) error {
	for {
		var pe *fs.PathError
		var le *os.LinkError
		switch {
		case errors.As(err, &pe):
			err = pe.Err
		case errors.As(err, &le):
			err = le.Err
		default:
			return err
		}
	}
}

// MkdirAll makes the directory name (workspace-relative) and any missing
// parents, each with mode 0755 less the umask, through the Dir's root, and
// gives each one it made the workspace's owner. An existing directory is
// fine; an existing non-directory along the way is an error matching
// syscall.ENOTDIR.
func (d *Dir) MkdirAll(name string) error {
	name = filepath.ToSlash(filepath.Clean(name))
	if name == "." {
		return nil
	}
	comps := strings.Split(name, "/")
	for i := range comps {
		p := strings.Join(comps[:i+1], "/")
		err := d.Mkdir(p)
		switch {
		case err == nil:
			continue
		case errors.Is(err, fs.ErrExist):
			fi, serr := d.root.Stat(p)
			if serr != nil {
				return serr
			}
			if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR}
			}
			continue
		}
		return err
	}
	return nil
}

// Mkdir makes the one directory name (workspace-relative) with mode 0755
// less the umask, through the Dir's root, and gives it the workspace's
// owner. An existing entry is an error matching fs.ErrExist.
func (d *Dir) Mkdir(name string) error {
	if err := d.root.Mkdir(name, 0o755); err != nil {
		return err
	}
	return d.own(name)
}

// own gives the entry name the workspace's owner (without following a final
// link), when the node runs as root.
func (d *Dir) own(name string) error {
	uid, gid, ok := d.chownTo()
	if !ok {
		return nil
	}
	return d.root.Lchown(name, uid, gid)
}

// WriteFile replaces the file name (workspace-relative; a final symbolic
// link is replaced, not followed: resolve it first to write through it) with
// data, atomically: a temporary file in the same directory is written,
// given mode (exactly: the umask does not apply) and the workspace's owner,
// synced, and renamed over name, and the directory is synced. A reader, or
// a crash, sees the old content or the new, never a part. The parent
// directory must exist (MkdirAll). The temporary file is removed on failure.
func (d *Dir) WriteFile(name string, data []byte, mode fs.FileMode) (err error) {
	dir, base := filepath.Split(filepath.Clean(name))
	if dir == "" {
		dir = "."
	}
	var f *os.File
	var tmp string
	for range 10 {
		tmp = filepath.Join(dir, "."+base+".callsheet-"+randomSuffix()+".tmp")
		f, err = d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = d.root.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if uid, gid, ok := d.chownTo(); ok {
		if err = f.Chown(uid, gid); err != nil {
			return err
		}
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = d.root.Rename(tmp, name); err != nil {
		return err
	}
	// The rename is durable once the directory is synced. Failing to sync
	// it does not undo the write, so it is not reported.
	if df, derr := d.root.Open(dir); derr == nil {
		_ = df.Sync()
		df.Close()
	}
	return nil
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type ctxKey struct{}

// NewContext returns ctx carrying d, for the tools of the call it runs.
func NewContext(ctx context.Context, d *Dir) context.Context {
	return context.WithValue(ctx, ctxKey{}, d)
}

// FromContext returns the Dir ctx carries, if any.
func FromContext(ctx context.Context) (*Dir, bool) {
	d, ok := ctx.Value(ctxKey{}).(*Dir)
	return d, ok && d != nil
}
