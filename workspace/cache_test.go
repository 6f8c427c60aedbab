package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newCache is a Cache closed when the test ends.
func newCache(t *testing.T, opts ...CacheOption) *Cache {
	t.Helper()
	c, err := NewCache(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lease opens key's lease of name under tenantRoot, failing the test on an
// error.
func lease(t *testing.T, c *Cache, key, tenantRoot, name string) *Dir {
	t.Helper()
	d, err := c.Open(key, tenantRoot, name)
	if err != nil {
		t.Fatalf("Open(%s, %s): %v", key, name, err)
	}
	return d
}

// closed reports whether d's descriptor is closed.
func closed(d *Dir) bool {
	_, err := d.root.Stat(".")
	return errors.Is(err, os.ErrClosed)
}

func TestNewCacheOptions(t *testing.T) {
	tests := []struct {
		name    string
		opt     CacheOption
		wantErr error
	}{
		{"max idle 0", WithMaxIdle(0), nil},
		{"max idle -1", WithMaxIdle(-1), ErrInvalidOption},
		{"idle timeout 0", WithIdleTimeout(0), ErrInvalidOption},
		{"idle timeout 1s", WithIdleTimeout(time.Second), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCache(tt.opt)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (c != nil) {
				t.Fatalf("NewCache: %v, %v; want %v", c, err, tt.wantErr)
			}
		})
	}
}

// TestCacheSharesOneHandle: the leases of one key share one descriptor,
// kept open while unused and reused by the next lease; Close of a lease
// releases it once, however often it is called.
func TestCacheSharesOneHandle(t *testing.T) {
	tenantRoot, _ := tenant(t)
	c := newCache(t)
	a := lease(t, c, "s1", tenantRoot, "w1")
	b := lease(t, c, "s1", tenantRoot, "w1")
	if a == b || a.root != b.root {
		t.Fatalf("two leases: distinct=%v, same root=%v; want distinct Dirs on one root", a != b, a.root == b.root)
	}
	if n, idle := c.Len(); n != 1 || idle != 0 {
		t.Fatalf("Len()=%d, %d; want 1 handle, 0 idle", n, idle)
	}
	a.Close()
	a.Close() // a second Close must not release b's lease
	if closed(b) {
		t.Fatal("closing one lease twice closed the descriptor another lease uses")
	}
	b.Close()
	if n, idle := c.Len(); n != 1 || idle != 1 {
		t.Fatalf("after both closed Len()=%d, %d; want 1 handle, 1 idle", n, idle)
	}
	d := lease(t, c, "s1", tenantRoot, "w1")
	defer d.Close()
	if d.root != a.root {
		t.Error("the next lease opened the workspace again instead of reusing the handle")
	}
	if d.Path() != filepath.Join(tenantRoot, "w1") {
		t.Errorf("Path()=%q", d.Path())
	}
	other := lease(t, c, "s2", tenantRoot, "w1")
	defer other.Close()
	if other.root == d.root {
		t.Error("two keys share a handle")
	}
}

// TestCacheSeesReplacement: every change that makes a fresh Open give
// something else is seen at the next lease, while the handle is cached:
// the workspace or a parent swapped for a link (even one that leads back to
// the same directory), deleted, or deleted and made again. A lease taken
// before keeps working in the directory it verified.
func TestCacheSeesReplacement(t *testing.T) {
	tests := []struct {
		name    string
		ws      string
		change  func(t *testing.T, tenantRoot, outside string)
		wantErr error // nil: a new directory, not the old one
	}{
		{"workspace swapped for a link outside", "w1/sub", func(t *testing.T, root, out string) {
			must(t, os.Rename(filepath.Join(root, "w1/sub"), filepath.Join(root, "w1/sub.real")))
			must(t, os.Symlink(out, filepath.Join(root, "w1/sub")))
		}, ErrNameLink},
		{"workspace swapped for a link to a peer", "w1/sub", func(t *testing.T, root, out string) {
			must(t, os.Rename(filepath.Join(root, "w1/sub"), filepath.Join(root, "w1/sub.real")))
			must(t, os.Symlink("../w2", filepath.Join(root, "w1/sub")))
		}, ErrNameLink},
		{"workspace swapped for a link back to itself", "w1/sub", func(t *testing.T, root, out string) {
			must(t, os.Rename(filepath.Join(root, "w1/sub"), filepath.Join(root, "w1/sub.real")))
			must(t, os.Symlink("sub.real", filepath.Join(root, "w1/sub")))
		}, ErrNameLink},
		{"parent swapped for a link back to itself", "w1/sub", func(t *testing.T, root, out string) {
			must(t, os.Rename(filepath.Join(root, "w1"), filepath.Join(root, "w1.real")))
			must(t, os.Symlink("w1.real", filepath.Join(root, "w1")))
		}, ErrNameLink},
		{"workspace deleted", "w1/sub", func(t *testing.T, root, out string) {
			must(t, os.RemoveAll(filepath.Join(root, "w1/sub")))
		}, fs.ErrNotExist},
		{"workspace replaced by a file", "w1/sub", func(t *testing.T, root, out string) {
			must(t, os.RemoveAll(filepath.Join(root, "w1/sub")))
			must(t, os.WriteFile(filepath.Join(root, "w1/sub"), nil, 0o644))
		}, ErrNotDir},
		{"workspace deleted and made again", "w1/sub", func(t *testing.T, root, out string) {
			must(t, os.RemoveAll(filepath.Join(root, "w1/sub")))
			must(t, os.Mkdir(filepath.Join(root, "w1/sub"), 0o755))
		}, nil},
		{"workspace moved and another put in its place", "w2", func(t *testing.T, root, out string) {
			must(t, os.Rename(filepath.Join(root, "w2"), filepath.Join(root, "w2.old")))
			must(t, os.Mkdir(filepath.Join(root, "w2"), 0o755))
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tenantRoot, outside := tenant(t)
			c := newCache(t)
			d := lease(t, c, "s", tenantRoot, tt.ws)
			must(t, d.WriteFile("old.txt", []byte("old"), 0o644))
			d.Close()
			held := lease(t, c, "s", tenantRoot, tt.ws) // a call running across the change
			defer held.Close()
			tt.change(t, tenantRoot, outside)

			got, err := c.Open("s", tenantRoot, tt.ws)
			if tt.wantErr != nil {
				var ne *NameError
				if !errors.Is(err, tt.wantErr) || !errors.As(err, &ne) {
					t.Fatalf("Open after the change: %v, want a *NameError wrapping %v", err, tt.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("Open after the change: %v", err)
				}
				defer got.Close()
				if _, err := got.Root().Stat("old.txt"); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the new directory shows the old one's file (err=%v): the handle outlived its directory", err)
				}
				must(t, got.WriteFile("new.txt", []byte("new"), 0o644))
				if _, err := os.Stat(filepath.Join(tenantRoot, tt.ws, "new.txt")); err != nil {
					t.Errorf("a write through the new lease did not land at the name: %v", err)
				}
			}
			// The lease taken before the change still works where it
			// verified (a directory deleted with its files has none to
			// read), never through the new link.
			if b, err := held.Root().ReadFile("old.txt"); err != nil && !errors.Is(err, fs.ErrNotExist) || err == nil && string(b) != "old" {
				t.Errorf("the earlier lease reads %q, %v; want its own old.txt", b, err)
			}
			if closed(held) {
				t.Error("the change closed the descriptor of a lease in use")
			}
			if _, err := os.Stat(filepath.Join(outside, "old.txt")); err == nil {
				t.Error("old.txt appeared outside")
			}
		})
	}
}

// TestCacheNeverHandsAnotherName: a key whose workspace name or tenant
// root changes (a session id used again for another workspace) gets its
// own directory, never the handle of the old one.
func TestCacheNeverHandsAnotherName(t *testing.T) {
	tenantRoot, _ := tenant(t)
	c := newCache(t)
	d := lease(t, c, "s", tenantRoot, "w1")
	must(t, d.WriteFile("w1-only.txt", nil, 0o644))
	d.Close()
	d = lease(t, c, "s", tenantRoot, "w2")
	defer d.Close()
	if _, err := d.Root().Stat("w1-only.txt"); err == nil {
		t.Fatal("the key's lease on w2 is w1's directory")
	}
	other := filepath.Join(filepath.Dir(tenantRoot), "umbrella")
	e := lease(t, c, "s", other, "vault")
	defer e.Close()
	if e.Path() != filepath.Join(other, "vault") {
		t.Errorf("Path()=%q under the other tenant root", e.Path())
	}
}

// TestCacheDrops: Drop, Forget (the name and the workspaces nested in it,
// nothing else) and Close forget handles; a lease out keeps its
// descriptor until it is released, which then closes it.
func TestCacheDrops(t *testing.T) {
	tenantRoot, _ := tenant(t)
	c := newCache(t)
	held := lease(t, c, "s1", tenantRoot, "w1")
	c.Drop("s1")
	if n, _ := c.Len(); n != 0 {
		t.Fatalf("after Drop Len()=%d, want 0", n)
	}
	if closed(held) {
		t.Fatal("Drop closed the descriptor a lease uses")
	}
	again := lease(t, c, "s1", tenantRoot, "w1")
	if again.root == held.root {
		t.Error("the lease after Drop reused the dropped handle")
	}
	held.Close()
	if !closed(held) {
		t.Error("the dropped handle stayed open after its last lease")
	}
	again.Close()

	for key, name := range map[string]string{"a": "w1", "b": "w1/sub", "c": "w2", "d": "w1x"} {
		must(t, os.MkdirAll(filepath.Join(tenantRoot, name), 0o755))
		lease(t, c, key, tenantRoot, name).Close()
	}
	c.Forget(tenantRoot, "w1")
	if n, idle := c.Len(); n != 2 || idle != 2 {
		t.Errorf("after Forget(w1) Len()=%d, %d; want w2 and w1x kept", n, idle)
	}
	c.Close()
	if n, _ := c.Len(); n != 0 {
		t.Errorf("after Close Len()=%d", n)
	}
	d := lease(t, c, "a", tenantRoot, "w1")
	d.Close()
	if !closed(d) {
		t.Error("a lease after Close was kept open")
	}
}

// TestCacheBounds: no more than the maximum of unused handles stay open
// (the least recently used goes), and none past the idle timeout.
func TestCacheBounds(t *testing.T) {
	tenantRoot, _ := tenant(t)
	c := newCache(t, WithMaxIdle(2), WithIdleTimeout(time.Minute))
	now := time.Unix(1e9, 0)
	c.now = func() time.Time { return now }
	var dirs []*Dir
	for i := range 5 {
		name := fmt.Sprintf("b%d", i)
		must(t, os.Mkdir(filepath.Join(tenantRoot, name), 0o755))
		d := lease(t, c, name, tenantRoot, name)
		dirs = append(dirs, d)
	}
	if n, idle := c.Len(); n != 5 || idle != 0 {
		t.Fatalf("5 leases out: Len()=%d, %d", n, idle)
	}
	for _, d := range dirs {
		now = now.Add(time.Second)
		d.Close()
	}
	if n, idle := c.Len(); n != 2 || idle != 2 {
		t.Fatalf("all released: Len()=%d, %d; want 2, 2", n, idle)
	}
	for i, d := range dirs {
		if want := i < 3; closed(d) != want {
			t.Errorf("handle %d closed=%v, want %v (the least recently used go first)", i, closed(d), want)
		}
	}
	now = now.Add(time.Minute)
	c.Drop("none") // any use sweeps
	if d := lease(t, c, "b0", tenantRoot, "b0"); d != nil {
		d.Close()
	}
	if n, idle := c.Len(); n != 1 || idle != 1 || !closed(dirs[3]) || !closed(dirs[4]) {
		t.Errorf("past the idle timeout Len()=%d, %d; b3, b4 closed: %v %v", n, idle, closed(dirs[3]), closed(dirs[4]))
	}
	c0 := newCache(t, WithMaxIdle(0))
	d := lease(t, c0, "b0", tenantRoot, "b0")
	d.Close()
	if !closed(d) {
		t.Error("WithMaxIdle(0) kept an unused handle open")
	}
}

// TestCacheRace: calls of one session take and release leases
// concurrently while its workspace is swapped for a link outside (an
// atomic renameat2 exchange) and its handle is dropped: every lease that is
// given is the verified directory (nothing is written outside), none is
// closed under a call, and some are refused while the name is a link.
func TestCacheRace(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("the swap needs renameat2 (Linux); GOOS=%s", runtime.GOOS)
	}
	tenantRoot, outside := tenant(t)
	must(t, os.Symlink(outside, filepath.Join(tenantRoot, "w1", "l")))
	c := newCache(t)
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(tenantRoot, "w1", "sub"), unix.AT_FDCWD, filepath.Join(tenantRoot, "w1", "l"), unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				return
			}
		}
	}()
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
				c.Forget(tenantRoot, "w1")
			}
		}
	}()
	var mu sync.Mutex
	ok, refused := 0, 0
	var calls sync.WaitGroup
	for g := range 8 {
		calls.Add(1)
		go func() {
			defer calls.Done()
			for i := range 400 {
				d, err := c.Open("s", tenantRoot, "w1/sub")
				if err != nil {
					if !errors.Is(err, ErrNameLink) && !errors.Is(err, ErrNotDir) {
						t.Errorf("Open: %v", err)
					}
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				name := fmt.Sprintf("g%d-%d.txt", g, i)
				if err := d.WriteFile(name, []byte("planted"), 0o644); err != nil {
					t.Errorf("write through a lease: %v", err)
				}
				if _, err := d.Root().Stat(name); err != nil {
					t.Errorf("stat through a lease: %v", err)
				}
				d.Close()
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	calls.Wait()
	close(stop)
	bg.Wait()
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "secret.txt" {
			t.Errorf("%s was written outside the workspace", e.Name())
		}
	}
	if ok == 0 || refused == 0 {
		t.Errorf("%d leases given, %d refused: the race was not exercised", ok, refused)
	}
	t.Logf("%d leases given, %d refused", ok, refused)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkOpenPerCall is what a call cost before the Cache: open and
// verify the workspace, then close it.
func BenchmarkOpenPerCall(b *testing.B) {
	for _, name := range []string{"w", "w1/sub"} {
		b.Run(name, func(b *testing.B) {
			tenantRoot := filepath.Join(b.TempDir(), "workspaces", "acme")
			must(b, os.MkdirAll(filepath.Join(tenantRoot, name), 0o755))
			for b.Loop() {
				d, err := Open(tenantRoot, name)
				if err != nil {
					b.Fatal(err)
				}
				d.Close()
			}
		})
	}
}

// BenchmarkCacheLease is what a call costs with the Cache: a lease of the
// session's handle (the link-free walk to the same directory) and its
// release.
func BenchmarkCacheLease(b *testing.B) {
	for _, name := range []string{"w", "w1/sub"} {
		b.Run(name, func(b *testing.B) {
			tenantRoot := filepath.Join(b.TempDir(), "workspaces", "acme")
			must(b, os.MkdirAll(filepath.Join(tenantRoot, name), 0o755))
			c, err := NewCache()
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			for b.Loop() {
				d, err := c.Open("s", tenantRoot, name)
				if err != nil {
					b.Fatal(err)
				}
				d.Close()
			}
		})
	}
}
