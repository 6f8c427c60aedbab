package workspace

import (
	"container/list"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrInvalidOption is wrapped by the error NewCache returns for an option
// out of range.
var ErrInvalidOption = errors.New("workspace: invalid option")

// Defaults of a Cache.
const (
	// DefaultMaxIdle bounds the handles a Cache keeps open while no call
	// uses them: one descriptor each. Handles in use are bounded by the
	// calls running, not by this.
	DefaultMaxIdle = 256
	// DefaultIdleTimeout is how long a handle no call uses stays open.
	DefaultIdleTimeout = 30 * time.Second
)

// CacheOption configures a Cache (NewCache).
type CacheOption func(*Cache) error

// WithMaxIdle bounds the handles kept open while unused (default
// DefaultMaxIdle); past it the least recently used is closed. 0 keeps none:
// a handle is shared only by calls that overlap, as if every call opened
// its workspace afresh. A negative n is refused.
func WithMaxIdle(n int) CacheOption {
	return func(c *Cache) error {
		if n < 0 {
			return fmt.Errorf("%w: max idle handles %d: use 0 or more", ErrInvalidOption, n)
		}
		c.maxIdle = n
		return nil
	}
}

// WithIdleTimeout sets how long an unused handle stays open (default
// DefaultIdleTimeout). d must be positive.
func WithIdleTimeout(d time.Duration) CacheOption {
	return func(c *Cache) error {
		if d <= 0 {
			return fmt.Errorf("%w: idle timeout %s: use a positive duration", ErrInvalidOption, d)
		}
		c.idleTimeout = d
		return nil
	}
}

// Cache keeps one verified workspace handle per key (the node uses one key
// per session), shared by every call that uses it, so a call does not open
// and verify the workspace again (docs/performance.md, "Issue 14, third
// round").
//
// Open gives a lease: a *Dir whose Close releases it. The handle is opened
// by Open (the full walk without following a link, and the os.Root checked
// to be the directory walked to) the first time, together with a descriptor
// of the tenant's root from which the name was found to lead, link-free, to
// that directory. At every later lease the name is walked again from that
// descriptor without following a link (the parents opened O_PATH|O_NOFOLLOW
// one by one, the last component fstatat'd with AT_SYMLINK_NOFOLLOW) and
// must reach the very directory the handle holds (same device and inode): a
// workspace (or a parent of it) replaced by a symbolic link, by another
// directory, or deleted, is seen at the next call, which then gets what a
// fresh Open gives (the same *NameError, or the new directory). For a name
// of one component the check is one fstatat, not the verification's walk
// from "/", os.Root, fstat of it and symbolic-link evaluation of the path.
// The tenant's root is the node's own (no session reaches it), so it is not
// checked again while a handle holds it.
//
// A handle is dropped when the key's workspace name or tenant root differs
// from the handle's, when Drop or Forget names it, when it has been unused
// for the idle timeout (checked whenever the Cache is used), or when more
// than the maximum are unused (least recently used first). A dropped
// handle's descriptor is closed once its last lease is released; leases
// given before a drop keep working in the directory they verified, as a
// Dir from Open does after its path changes.
//
// A Cache is safe for concurrent use.
type Cache struct {
	maxIdle     int
	idleTimeout time.Duration
	now         func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
	// idle holds the entries without a lease, the most recently released
	// at the front.
	idle list.List
	// gen counts drops: an Open that began its verification before a drop
	// does not install what it verified (it may predate a rewind).
	gen    uint64
	closed bool
}

// entry is one shared handle.
type entry struct {
	cache            *Cache
	key              string
	tenantRoot, name string
	dir              *Dir // owns the workspace's descriptor
	tenantFD         int  // the tenant's root, the check's starting point
	refs             int
	gone             bool          // no longer in entries: close at refs 0
	elem             *list.Element // in idle, when refs is 0 and not gone
	idleSince        time.Time
}

// NewCache returns an empty Cache.
func NewCache(opts ...CacheOption) (*Cache, error) {
	c := &Cache{maxIdle: DefaultMaxIdle, idleTimeout: DefaultIdleTimeout, now: time.Now, entries: map[string]*entry{}}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Open returns a lease of key's handle on the workspace name under
// tenantRoot, opening and verifying it as Open does when the Cache holds
// none for that name, or when the name no longer leads, without a symbolic
// link, to the directory the held one verified. The caller closes the
// lease. The error is Open's.
func (c *Cache) Open(key, tenantRoot, name string) (*Dir, error) {
	tenantRoot = filepath.Clean(tenantRoot)
	c.mu.Lock()
	c.sweep()
	e := c.entries[key]
	if e != nil && (e.tenantRoot != tenantRoot || e.name != name) {
		// Another workspace under the same key: never hand the old one.
		c.drop(e)
		e = nil
	}
	if e != nil {
		c.take(e)
	}
	gen, closed := c.gen, c.closed
	c.mu.Unlock()
	if e != nil {
		// Outside the lock: the walk is the cost a lease keeps.
		if leadsFrom(e.tenantFD, name, e.dir.dev, e.dir.ino) {
			return e.lease(), nil
		}
		c.mu.Lock()
		if c.entries[key] == e {
			c.drop(e)
		}
		c.mu.Unlock()
		c.release(e)
	}
	// The tenant's root first: the Dir opened after it must be what the
	// name leads to from it, or the pair is not kept.
	tfd, terr := openPath(unix.AT_FDCWD, tenantRoot)
	d, err := Open(tenantRoot, name)
	if terr == nil && (err != nil || closed || !leadsFrom(tfd, name, d.dev, d.ino)) {
		unix.Close(tfd)
		terr = ErrNameLink
	}
	if err != nil || terr != nil {
		return d, err // unshared: its Close closes it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.gen != gen {
		unix.Close(tfd)
		return d, nil
	}
	if cur := c.entries[key]; cur != nil {
		if cur.tenantRoot == tenantRoot && cur.name == name && cur.dir.dev == d.dev && cur.dir.ino == d.ino {
			// Another call verified the same directory meanwhile.
			d.Close()
			unix.Close(tfd)
			c.take(cur)
			return cur.lease(), nil
		}
		c.drop(cur)
	}
	e = &entry{cache: c, key: key, tenantRoot: tenantRoot, name: name, dir: d, tenantFD: tfd}
	c.entries[key] = e
	c.take(e)
	return e.lease(), nil
}

// Drop forgets key's handle: the next Open of key verifies afresh. Leases
// out keep theirs until released.
func (c *Cache) Drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if e := c.entries[key]; e != nil {
		c.drop(e)
	}
}

// Forget drops every handle on the workspace name under tenantRoot or on a
// workspace nested below it (name/...), whatever its key: for the node to
// call where it changes a workspace's directories itself (a rewind, a
// workspace's creation).
func (c *Cache) Forget(tenantRoot, name string) {
	tenantRoot = filepath.Clean(tenantRoot)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, e := range c.entries {
		if e.tenantRoot == tenantRoot && (e.name == name || strings.HasPrefix(e.name, name+"/")) {
			c.drop(e)
		}
	}
}

// Len reports how many handles the Cache holds open and how many of them
// no call uses.
func (c *Cache) Len() (handles, idle int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.idle.Len()
}

// Close drops every handle (closing those without a lease) and makes later
// Opens unshared: each then opens afresh and its Close closes it.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.gen++
	for _, e := range c.entries {
		c.drop(e)
	}
	return nil
}

// take counts a lease of e. c.mu is held.
func (c *Cache) take(e *entry) {
	if e.elem != nil {
		c.idle.Remove(e.elem)
		e.elem = nil
	}
	e.refs++
}

// drop removes e from the Cache, closing it if no lease holds it. c.mu is
// held.
func (c *Cache) drop(e *entry) {
	if e.gone {
		return
	}
	e.gone = true
	delete(c.entries, e.key)
	if e.elem != nil {
		c.idle.Remove(e.elem)
		e.elem = nil
	}
	if e.refs == 0 {
		e.close()
	}
}

// release ends one lease of e.
func (c *Cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.refs--; e.refs > 0 {
		return
	}
	if e.gone || c.closed || c.maxIdle == 0 {
		if !e.gone {
			e.gone = true
			delete(c.entries, e.key)
		}
		e.close()
		return
	}
	e.idleSince = c.now()
	e.elem = c.idle.PushFront(e)
	for c.idle.Len() > c.maxIdle {
		c.drop(c.idle.Back().Value.(*entry))
	}
	c.sweep()
}

// sweep drops the handles unused for the idle timeout. c.mu is held.
func (c *Cache) sweep() {
	now := c.now()
	for el := c.idle.Back(); el != nil; el = c.idle.Back() {
		e := el.Value.(*entry)
		if now.Sub(e.idleSince) < c.idleTimeout {
			return
		}
		c.drop(e)
	}
}

// close closes e's descriptors (its last lease is released, or none is out).
func (e *entry) close() {
	e.dir.root.Close()
	unix.Close(e.tenantFD)
}

// lease returns a Dir sharing e's descriptor whose Close releases it.
func (e *entry) lease() *Dir {
	d := e.dir
	return &Dir{root: d.root, path: d.path, real: d.real, asRoot: d.asRoot, dev: d.dev, ino: d.ino, share: e}
}

// leadsFrom reports whether name, walked from the directory tfd one
// component at a time without following a symbolic link, reaches the
// directory dev/ino. The parents are opened O_PATH (no read permission
// needed, nothing but a reference); a component that is a link either fails
// to open as a directory or is a descriptor nothing can be opened under,
// and the last is looked at with AT_SYMLINK_NOFOLLOW, so a link's own inode
// is what is compared.
func leadsFrom(tfd int, name string, dev, ino uint64) bool {
	fd, last := tfd, name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		last = name[i+1:]
		for rest := name[:i]; ; {
			c, after, more := strings.Cut(rest, "/")
			next, err := openPath(fd, c)
			if fd != tfd {
				unix.Close(fd)
			}
			if err != nil {
				return false
			}
			fd = next
			if !more {
				break
			}
			rest = after
		}
		defer unix.Close(fd)
	}
	var st unix.Stat_t
	for {
		err := unix.Fstatat(fd, last, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.EINTR {
			continue
		}
		return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && uint64(st.Dev) == dev && st.Ino == ino
	}
}

// openPath opens the directory name relative to dirfd as an O_PATH
// reference, without following a final symbolic link.
func openPath(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
