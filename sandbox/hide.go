package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrCannotHide is wrapped by the error New (and Attach) return when a
// hidden path (Config.Hidden) cannot be kept out of every sandbox: a file
// with hard links the sandbox cannot know, one inside the workspace root
// (which sandboxes show), or one that cannot be resolved. The message names
// the path and what to do.
var ErrCannotHide = errors.New("sandbox: a path the sandbox must hide cannot be hidden")

// fileID is a file's identity: what it is, whatever names lead to it.
type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// hiddenSet is what the helper keeps out of a sandbox's view: every name of
// the hidden paths and their identities.
type hiddenSet struct {
	names []string
	ids   []fileID
}

// hidden resolves Config.Hidden as the host is now: each path as given, with
// its symbolic links resolved (a link is hidden with what it leads to: the
// Kubernetes ConfigMap layout makes --config a link through "..data"), and
// every other mount of the same file system that shows it (a bind mount of
// its directory elsewhere); and each one's device and inode, which the
// helper checks every entry it shows against. It is run when the sandbox is
// made and again for every run, so a link that now leads elsewhere (a
// ConfigMap updated in place) is followed. A path that does not exist is
// hidden by name, and resolved once it does.
func (s *Sandbox) hidden() (hiddenSet, error) {
	var hs hiddenSet
	if len(s.cfg.Hidden) == 0 {
		return hs, nil
	}
	mounts := nodeMounts.table()
	root := ""
	if s.cfg.WorkspaceRoot != "" {
		root = filepath.Clean(s.cfg.WorkspaceRoot)
		if r, err := filepath.EvalSymlinks(root); err == nil {
			root = r
		}
	}
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			hs.names = append(hs.names, n)
		}
	}
	for _, h := range s.cfg.Hidden {
		h = filepath.Clean(h)
		add(h)
		real, err := filepath.EvalSymlinks(h)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return hiddenSet{}, fmt.Errorf("%w: %s: %v; the sandbox hides a path by what it leads to, so it must be able to resolve it (make its directories searchable by the node's user)", ErrCannotHide, h, err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(real, &st); err != nil {
			return hiddenSet{}, fmt.Errorf("%w: %s: %v", ErrCannotHide, h, err)
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR && st.Nlink > 1 {
			return hiddenSet{}, fmt.Errorf("%w: %s (%s) has %d hard links, and a sandbox could read it under another of them; give it a single name (copy it rather than link it)", ErrCannotHide, h, real, st.Nlink)
		}
		hs.ids = append(hs.ids, fileID{Dev: uint64(st.Dev), Ino: st.Ino})
		names := append([]string{real}, mounts.aliases(real)...)
		for _, n := range names {
			if root != "" && n != root && strings.HasPrefix(n, root+"/") && h != filepath.Clean(s.cfg.WorkspaceRoot) {
				return hiddenSet{}, fmt.Errorf("%w: %s lies in the workspace root %s (as %s), which sandboxes show a workspace of whole; keep it out of the workspace root", ErrCannotHide, h, s.cfg.WorkspaceRoot, n)
			}
			add(n)
		}
	}
	return hs, nil
}

// mount is one line of /proc/self/mountinfo: the file system's device, the
// directory of it that is mounted, and where.
type mount struct {
	dev, root, point string
}

type mountTable []mount

// nodeMounts is this process's mount table, read again only when it
// changed.
var nodeMounts mountWatch

// mountWatch keeps a mount table and reads it again only when the kernel
// says it changed: /proc/self/mountinfo polls POLLPRI once a mount or an
// unmount changed this mount namespace since the last poll (proc(5)). Every
// run resolves the hidden paths again (Sandbox.hidden); the table is the
// costly part of that, a read of the kernel's whole table, and it seldom
// changes.
type mountWatch struct {
	mu sync.Mutex
	fd int // the open mountinfo; 0 before the first read, -1 when it cannot be opened
	t  mountTable
	// failed: the last read failed, so t may lack mounts: read again.
	failed bool
}

// table returns the mount table as it is now; empty when it cannot be read.
func (w *mountWatch) table() mountTable {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.fd == 0:
		fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			w.fd = -1
			return readMounts()
		}
		w.fd = fd
	case w.fd < 0:
		return readMounts()
	case !w.failed:
		// A changed table is read again: the poll itself consumes the
		// change, so one that comes while it is read shows at the next.
		p := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLPRI}}
		n, err := unix.Poll(p, 0)
		if err == nil && n == 0 {
			return w.t
		}
	}
	var err error
	w.t, err = parseMounts(&fdReader{fd: w.fd})
	w.failed = err != nil
	return w.t
}

// fdReader reads a descriptor from its start, as pread does.
type fdReader struct {
	fd  int
	off int64
}

func (r *fdReader) Read(b []byte) (int, error) {
	for {
		n, err := unix.Pread(r.fd, b, r.off)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		r.off += int64(n)
		return n, nil
	}
}

// readMounts reads this process's mount table; empty when it cannot.
func readMounts() mountTable {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	t, _ := parseMounts(f)
	return t
}

// parseMounts parses a mountinfo file: what it could read, and why it
// stopped before the end.
func parseMounts(r io.Reader) (mountTable, error) {
	var t mountTable
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJOR:MINOR ROOT POINT OPTIONS ... - TYPE SOURCE SUPER
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		t = append(t, mount{dev: f[2], root: unescapeMount(f[3]), point: unescapeMount(f[4])})
	}
	return t, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for a space) of a mountinfo
// path.
func unescapeMount(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+3 < len(p) {
			if n, err := strconv.ParseUint(p[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// aliases returns the other paths at which the file at real (a path with no
// symbolic link) is reachable through other mounts of its file system: a
// bind mount of a directory above it, or the same file system mounted
// twice.
func (t mountTable) aliases(real string) []string {
	// The mount real is on: the longest mount point above it (the last
	// listed wins among equals: it is mounted over the others).
	home := -1
	for i, m := range t {
		if under(real, m.point) && (home < 0 || len(m.point) >= len(t[home].point)) {
			home = i
		}
	}
	if home < 0 {
		return nil
	}
	h := t[home]
	inFS := filepath.Join(h.root, strings.TrimPrefix(real, h.point))
	var out []string
	for i, m := range t {
		if i == home || m.dev != h.dev || !under(inFS, m.root) {
			continue
		}
		alias := filepath.Join(m.point, strings.TrimPrefix(inFS, m.root))
		if alias != real {
			out = append(out, alias)
		}
	}
	return out
}

// under reports whether path p is dir or lies below it.
func under(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}
