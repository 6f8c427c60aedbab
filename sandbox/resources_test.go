package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/procs"
)

// TestResolveBudget: the budgets' defaults are shares of the host's
// ceiling, and a configured value above the ceiling less the node's
// reserve is lowered, with a note.
func TestResolveBudget(t *testing.T) {
	const gib = int64(1) << 30
	for _, tc := range []struct {
		name          string
		l             Limits
		procs         int64
		mem           int64
		wantProcesses [3]int // sandbox, tenant, node
		wantMemory    [3]int64
		wantLowered   int
	}{
		{"defaults on pid_max 32768 and 24 GiB", Limits{}, 32768, 24 * gib, [3]int{1024, 8192, 16384}, [3]int64{6 * gib, 6 * gib, 12 * gib}, 0},
		{"a 600-task fence", Limits{Processes: 250}, 600, 768 << 20, [3]int{150, 150, 300}, [3]int64{192 << 20, 192 << 20, 384 << 20}, 1},
		{"configured, within the ceiling", Limits{Processes: 64, TenantProcesses: 1000, NodeProcesses: 30000, SandboxMemory: gib, TenantMemory: 2 * gib, NodeMemory: 4 * gib},
			32768, 24 * gib, [3]int{64, 1000, 30000}, [3]int64{gib, 2 * gib, 4 * gib}, 0},
		{"configured past the ceiling", Limits{NodeProcesses: 32768, NodeMemory: 24 * gib}, 32768, 24 * gib,
			[3]int{1024, 15360, 30720}, [3]int64{21 * gib / 2, 21 * gib / 2, 21 * gib}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := resolveBudget(tc.l.withDefaults(), tc.procs, "test", tc.mem, "test")
			if got := [3]int{b.SandboxProcesses, b.TenantProcesses, b.NodeProcesses}; got != tc.wantProcesses {
				t.Errorf("processes (sandbox, tenant, node) = %v, want %v", got, tc.wantProcesses)
			}
			if got := [3]int64{b.SandboxMemory, b.TenantMemory, b.NodeMemory}; got != tc.wantMemory {
				t.Errorf("memory (sandbox, tenant, node) = %v, want %v", got, tc.wantMemory)
			}
			if len(b.Lowered) != tc.wantLowered {
				t.Errorf("lowered %q, want %d notes", b.Lowered, tc.wantLowered)
			}
		})
	}
}

// TestCountedBudget: without a pids cgroup, each sandbox gets an equal
// share, and a run past the node's or its tenant's number of sandboxes is
// refused with ErrBusy until one ends.
func TestCountedBudget(t *testing.T) {
	r := newResources(Config{Cgroups: CgroupsOff, Limits: Limits{Processes: 50, TenantProcesses: 64, NodeProcesses: 100}.withDefaults()})
	b := r.budget
	if b.SandboxProcesses != 32 || b.MaxSandboxes != 3 || b.TenantSandboxes != 2 {
		t.Fatalf("counted budget %d processes, %d sandboxes, %d per tenant; want 32, 3, 2", b.SandboxProcesses, b.MaxSandboxes, b.TenantSandboxes)
	}
	admit := func(tenant string) *runShare {
		t.Helper()
		s, err := r.admit(tenant)
		if err != nil {
			t.Fatalf("admit %s: %v", tenant, err)
		}
		return s
	}
	a1, _ := admit("a"), admit("a")
	if _, err := r.admit("a"); !errors.Is(err, ErrBusy) {
		t.Fatalf("a third run of tenant a: %v, want ErrBusy", err)
	}
	admit("b")
	if _, err := r.admit("c"); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "sandbox.limits.node_processes") {
		t.Fatalf("a fourth run on the node: %v, want ErrBusy naming the limit", err)
	}
	a1.release()
	a1.release() // once only
	admit("c")
	if _, err := r.admit("d"); !errors.Is(err, ErrBusy) {
		t.Fatalf("after one release and one admit: %v, want ErrBusy", err)
	}
}

// TestMountWatch: the kept mount table follows a mount and its unmount,
// and after a read that failed the next call reads again rather than keep
// what it got.
func TestMountWatch(t *testing.T) {
	point := func(tab mountTable, p string) bool {
		return slices.ContainsFunc(tab, func(m mount) bool { return m.point == p })
	}
	var w mountWatch
	if tab := w.table(); !point(tab, "/") {
		t.Fatalf("the table lacks /: %v", tab)
	}
	if os.Geteuid() == 0 {
		dir := t.TempDir()
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		if !point(w.table(), dir) {
			syscall.Unmount(dir, syscall.MNT_DETACH)
			t.Fatalf("a tmpfs mounted on %s is not in the table", dir)
		}
		syscall.Unmount(dir, syscall.MNT_DETACH)
		if point(w.table(), dir) {
			t.Fatalf("%s is still in the table after its unmount", dir)
		}
	}

	// A descriptor pread refuses (a directory) stands for a read that
	// fails.
	dirFD, err := syscall.Open(t.TempDir(), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dirFD)
	mi, err := syscall.Open("/proc/self/mountinfo", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(mi)
	broken := mountWatch{fd: dirFD, failed: true}
	if tab := broken.table(); len(tab) != 0 || !broken.failed {
		t.Fatalf("a read that failed: %v, failed %v; want nothing, and failed", tab, broken.failed)
	}
	broken.fd = mi
	if tab := broken.table(); !point(tab, "/") {
		t.Fatalf("the call after a failed read kept what that read got: %v", tab)
	}
}

// TestCgroupTables: the cgroup mounts and paths are read from mountinfo and
// /proc/self/cgroup as the kernel writes them, v1, v2 and hybrid.
func TestCgroupTables(t *testing.T) {
	mi := `24 30 0:21 / /sys rw,nosuid - sysfs sysfs rw
30 24 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
32 30 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
34 30 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
35 30 0:31 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd`
	v2, v1 := cgroupMountsOf(mi)
	if v2 != "/sys/fs/cgroup/unified" || v1["pids"] != "/sys/fs/cgroup/pids" || v1["cpu"] != "/sys/fs/cgroup/cpu,cpuacct" || v1["memory"] != "/sys/fs/cgroup/memory" || len(v1) != 3 {
		t.Errorf("mounts: v2 %q, v1 %v", v2, v1)
	}
	path, paths := cgroupPathsOf("9:name=systemd:/\n8:pids:/fence\n4:memory:/process_api/x\n2:cpu,cpuacct:/\n0::/user.slice\n")
	if path != "/user.slice" || paths["pids"] != "/fence" || paths["memory"] != "/process_api/x" || paths["cpu"] != "/" || paths["cpuacct"] != "/" {
		t.Errorf("paths: v2 %q, v1 %v", path, paths)
	}
	path, paths = cgroupPathsOf("0::/system.slice/callsheet.service\n")
	if path != "/system.slice/callsheet.service" || len(paths) != 0 {
		t.Errorf("pure v2: %q %v", path, paths)
	}
}

// TestMountAliases: a hidden file is found again through every other mount
// of its file system that shows it (a bind of a directory above it, the
// same file system twice), and nowhere else.
func TestMountAliases(t *testing.T) {
	mt := mountTable{
		{dev: "8:1", root: "/", point: "/"},
		{dev: "8:2", root: "/", point: "/srv"},
		{dev: "8:2", root: "/data", point: "/opt/data"}, // a bind of /srv/data
		{dev: "8:2", root: "/", point: "/mnt/again"},    // the same file system again
		{dev: "8:2", root: "/other", point: "/opt/other"},
		{dev: "0:50", root: "/", point: "/srv/data/tmp"},
	}
	got := mt.aliases("/srv/data/cfg/cfg.json")
	want := []string{"/opt/data/cfg/cfg.json", "/mnt/again/data/cfg/cfg.json"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("aliases = %v, want %v", got, want)
	}
	if got := mt.aliases("/etc/passwd"); len(got) != 0 {
		t.Errorf("aliases of a file on a file system mounted once: %v", got)
	}
	if got := unescapeMount(`/mnt/with\040space`); got != "/mnt/with space" {
		t.Errorf("unescape: %q", got)
	}
}

// TestTenantIDs: a tenant's ids are the same on every call and node, in
// the range, different between tenants (but by chance), and the older
// single uid gives every tenant the same; two configured tenants that
// collide are refused.
func TestTenantIDs(t *testing.T) {
	c := Config{}
	a1, g1 := c.IDs("acme")
	a2, _ := c.IDs("acme")
	b, _ := c.IDs("umbrella")
	if a1 != a2 || a1 != g1 || a1 < DefaultIDFirst || a1 >= DefaultIDFirst+DefaultIDCount || a1 == b {
		t.Errorf("acme %d (gid %d, again %d), umbrella %d", a1, g1, a2, b)
	}
	if u, g := (Config{UID: 64000}).IDs("acme"); u != 64000 || g != DefaultGID {
		t.Errorf("single uid: %d %d", u, g)
	}
	err := Config{UIDs: IDRange{First: 100000, Count: 1}, Tenants: []string{"acme", "umbrella"}}.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `tenants "acme" and "umbrella" both get uid 100000`) {
		t.Errorf("colliding tenants: %v", err)
	}
	if err := (Config{UIDs: IDRange{First: 1 << 31, Count: 5}}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a range past 2^31: %v", err)
	}
}

// TestSetIDBitsNeverSet: no way a command has of setting the setuid or
// setgid bit works in the sandbox (seccomp), and the workspace holds no
// such file afterwards.
func TestSetIDBitsNeverSet(t *testing.T) {
	s := newBox(t, Config{})
	ws := workspace(t, s)
	out, _, err := runIn(t, s, ws, Run{}, `cp /bin/sh a; chmod u+s a 2>&1; chmod g+s a 2>&1
perl -e 'use Fcntl; sysopen(F, "b", O_CREAT|O_WRONLY, 04755) or print "sysopen: $!\n"; open(G, ">", "c"); chmod(06755, "c") or print "chmod: $!\n"'
find . -perm /6000; echo done`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "Operation not permitted") != 4 || !strings.HasSuffix(out, "done\n") || strings.Contains(out, "./") {
		t.Errorf("output:\n%s\nwant four refusals and no setuid or setgid file", out)
	}
	filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s: %v on the host", p, fi.Mode())
		}
		return nil
	})
}

// TestNothingInherited: a descriptor the node holds without close-on-exec
// (as one its own parent left open would be) does not reach the command,
// nor stay open in the sandbox's init.
func TestNothingInherited(t *testing.T) {
	s := newBox(t, Config{})
	ws := workspace(t, s)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	fd, err := syscall.Dup(int(r.Fd())) // a copy without close-on-exec
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	out, _, err := runIn(t, s, ws, Run{}, `ls /proc/self/fd | tr '\n' ' '; echo; ls /proc/1/fd 2>&1 | tr '\n' ' '`)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if strings.TrimSpace(lines[0]) != "0 1 2 3" {
		t.Errorf("the command holds descriptors %q, want 0 1 2 (and ls's own 3); descriptor %d was open in the node", lines[0], fd)
	}
	if strings.Contains(" "+lines[1]+" ", " "+strconv.Itoa(fd)+" ") {
		t.Errorf("the sandbox's init holds the node's descriptor %d: %q", fd, lines[1])
	}
}

// TestSandboxedProcessesGoFirst: every sandboxed process has the highest
// oom_score_adj, and /tmp is the sandbox's own tmpfs.
func TestSandboxedProcessesGoFirst(t *testing.T) {
	s := newBox(t, Config{})
	ws := workspace(t, s)
	out, _, err := runIn(t, s, ws, Run{}, `cat /proc/self/oom_score_adj /proc/1/oom_score_adj; stat -f -c %T /tmp`)
	if err != nil {
		t.Fatal(err)
	}
	if out != "1000\n1000\ntmpfs\n" {
		t.Errorf("output %q, want oom_score_adj 1000 for the command and the sandbox's init, and a tmpfs /tmp", out)
	}
}

// TestCgroups: where this process can make cgroups (root, on this
// machine's v1 hierarchies, or a delegated v2 cgroup), a run is placed in
// its own cgroup under its tenant's, with the limits of the budget; a fork
// bomb there stops at the run's limit; the node's tree names no cgroup
// inside the sandbox.
func TestCgroups(t *testing.T) {
	s := newBox(t, Config{Limits: Limits{Processes: 40, TenantProcesses: 60, NodeProcesses: 100, SandboxMemory: 64 << 20}})
	b := s.Budget()
	if s.res.box[ctlPids] == "" {
		t.Skipf("no pids cgroup here (%s): the counted budget holds instead (TestCountedBudget)", b.NoCgroups)
	}
	t.Logf("budget: %s", b)
	ws := workspace(t, s)
	m := sleepMark()
	done := make(chan string, 1)
	go func() {
		out, _, _ := runIn(t, s, ws, Run{Tenant: "acme"}, `cat /proc/self/cgroup | grep -E '^[0-9]+:(pids|memory):'
sleep `+m+` & p=$!; b() { b | b & }; b 2>/dev/null; wait $p`)
		done <- out
	}()
	var pid int
	deadline := time.Now().Add(20 * time.Second)
	for pid == 0 {
		if pids := procs.Marked(m); len(pids) > 0 {
			pid = pids[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandboxed command did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	run := regexp.MustCompile(`pids:(\S*/box\.\d+/acme/run\.\d+)\n`).FindSubmatch(cg)
	if run == nil {
		t.Fatalf("the sandboxed process is in %s, want box.N/acme/run.M", cg)
	}
	dir := filepath.Join(s.res.hier[ctlPids].mount, string(run[1]))
	want := map[string]string{
		filepath.Join(dir, "pids.max"):                  "40",
		filepath.Join(filepath.Dir(dir), "pids.max"):    "60",
		filepath.Join(filepath.Dir(dir), "../pids.max"): "100",
	}
	for f, v := range want {
		if b, err := os.ReadFile(f); err != nil || strings.TrimSpace(string(b)) != v {
			t.Errorf("%s = %q %v, want %s", f, b, err, v)
		}
	}
	time.Sleep(time.Second) // the bomb meets the limit
	peak, _ := os.ReadFile(filepath.Join(dir, "pids.peak"))
	current, _ := os.ReadFile(filepath.Join(dir, "pids.current"))
	for _, p := range procs.Marked(m) {
		syscall.Kill(p, syscall.SIGKILL)
	}
	out := <-done
	t.Logf("the bomb's run: pids.current %s, pids.peak %s", strings.TrimSpace(string(current)), strings.TrimSpace(string(peak)))
	if n, err := strconv.Atoi(strings.TrimSpace(string(current))); err != nil || n > 40 {
		t.Errorf("pids.current %q, want at most the run's 40", current)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasSuffix(line, ":/") {
			t.Errorf("inside, /proc/self/cgroup shows %q: the sandbox's cgroup namespace should root it at its own cgroup", line)
		}
	}
}

// TestRmdirTree: a cgroup is removed with the cgroups below it; one a
// process still holds stays, and goes once it is empty.
func TestRmdirTree(t *testing.T) {
	s := newBox(t, Config{})
	defer s.Close()
	box := s.res.box[ctlPids]
	if box == "" {
		t.Skipf("no pids cgroup here (%s)", s.Budget().NoCgroups)
	}
	nested := filepath.Join(box, "rm-test", "a", "b")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := rmdirTree(filepath.Join(box, "rm-test")); err != nil {
		t.Fatalf("rmdirTree of a cgroup with two below it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(box, "rm-test")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after rmdirTree: %v, want it gone", err)
	}
	held := filepath.Join(box, "rm-test-held")
	os.Mkdir(held, 0o755)
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleep.Process.Kill()
	if err := writeFile(filepath.Join(held, "cgroup.procs"), strconv.Itoa(sleep.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	if err := rmdirTree(held); err == nil {
		t.Fatal("rmdirTree of a cgroup holding a process: nil, want an error")
	}
	sleep.Process.Kill()
	sleep.Wait()
	if err := rmdirTree(held); err != nil {
		t.Fatalf("rmdirTree once its process is gone: %v", err)
	}
}

// TestTenantDisks: with TenantDisk, each tenant's workspace root is a file
// system of that size of its own, made once (its image's blocks allocated);
// a node started again while it is still mounted takes it over; Close
// unmounts it; a tenant whose workspaces already lie on the shared file
// system is refused, saying what to do.
func TestTenantDisks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("tenants' disks need a root node")
	}
	if _, err := findMkfs(); err != nil {
		t.Skip(err)
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices here")
	}
	base := filepath.Join(t.TempDir(), "fs")
	os.Mkdir(base, 0o755)
	if err := syscall.Mount("tmpfs", base, "tmpfs", 0, "size=128m"); err != nil {
		t.Skip(err)
	}
	defer syscall.Unmount(base, syscall.MNT_DETACH)
	cfg := Config{Tenants: []string{"acme"}, TenantDisk: 8 << 20, WorkspaceRoot: filepath.Join(base, "ws"),
		DiskDir: filepath.Join(base, "disks"), RunDir: filepath.Join(base, "run")}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var st syscall.Statfs_t
	point := filepath.Join(cfg.WorkspaceRoot, "acme")
	if err := syscall.Statfs(point, &st); err != nil || st.Type != 0xEF53 || int64(st.Blocks)*st.Bsize > 8<<20 {
		t.Fatalf("%s: type %x, %d bytes (%v): want an ext4 file system of at most 8 MiB", point, st.Type, int64(st.Blocks)*st.Bsize, err)
	}
	if img, err := os.Stat(filepath.Join(cfg.DiskDir, "acme.img")); err != nil || img.Sys().(*syscall.Stat_t).Blocks*512 < 8<<20 {
		t.Errorf("the image's blocks are not all allocated: %v %v", img, err)
	}
	if !strings.Contains(s.Budget().Disk, "file system of their own of 8 MiB") {
		t.Errorf("report: %q", s.Budget().Disk)
	}
	again, err := New(cfg)
	if err != nil {
		t.Fatalf("a second node over the mounted disk: %v", err)
	}
	s.disks = nil // the second one owns it now
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	if _, mounted := mountedFrom(point); mounted {
		t.Errorf("%s is still mounted after Close", point)
	}
	os.WriteFile(filepath.Join(cfg.WorkspaceRoot, "umbrella-placeholder"), nil, 0o600)
	os.MkdirAll(filepath.Join(cfg.WorkspaceRoot, "umbrella", "w1"), 0o755)
	cfg.Tenants = []string{"umbrella"}
	if _, err := New(cfg); !errors.Is(err, ErrDisk) || !strings.Contains(err.Error(), "move them aside") {
		t.Errorf("a tenant with workspaces on the shared file system: %v, want ErrDisk saying to move them", err)
	}
}

// TestHiddenByWhatTheyAre: a hidden path named through a link is hidden
// with what the link leads to, and so is its file system's other mount that
// shows it (a bind); a hidden file with a second hard link, or one inside
// the workspace root, is refused.
func TestHiddenByWhatTheyAre(t *testing.T) {
	shown, err := os.MkdirTemp("", "callsheet-sandbox-hidden-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(shown)
	os.Chmod(shown, 0o755)
	for _, d := range []string{"real", "again", "links"} {
		os.Mkdir(filepath.Join(shown, d), 0o755)
	}
	os.WriteFile(filepath.Join(shown, "real", "secret.txt"), []byte("SECRET\n"), 0o644)
	os.WriteFile(filepath.Join(shown, "real", "other.txt"), []byte("other\n"), 0o644)
	os.Symlink("../real/secret.txt", filepath.Join(shown, "links", "cfg.json"))
	bound := os.Geteuid() == 0 && syscall.Mount(filepath.Join(shown, "real"), filepath.Join(shown, "again"), "", syscall.MS_BIND, "") == nil
	if bound {
		defer syscall.Unmount(filepath.Join(shown, "again"), syscall.MNT_DETACH)
	}
	s := newBox(t, Config{ReadOnly: []string{shown}, Hidden: []string{filepath.Join(shown, "links", "cfg.json")}})
	ws := workspace(t, s)
	out, _, err := runIn(t, s, ws, Run{}, `cat "$1"/links/cfg.json "$1"/real/secret.txt "$1"/again/secret.txt 2>/dev/null; cat "$1"/real/other.txt`, shown)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "SECRET") || !strings.Contains(out, "other") {
		t.Errorf("output %q: want the secret absent under every name (bind mount made: %v) and the other file shown", out, bound)
	}

	linked := filepath.Join(shown, "real", "linked.txt")
	os.Link(filepath.Join(shown, "real", "other.txt"), linked)
	if _, err := New(Config{Hidden: []string{linked}}); !errors.Is(err, ErrCannotHide) || !strings.Contains(err.Error(), "2 hard links") {
		t.Errorf("a hidden file with two hard links: %v, want ErrCannotHide", err)
	}
	if _, err := New(Config{Hidden: []string{filepath.Join(shown, "real", "secret.txt")}, WorkspaceRoot: shown}); !errors.Is(err, ErrCannotHide) || !strings.Contains(err.Error(), "workspace root") {
		t.Errorf("a hidden file in the workspace root: %v, want ErrCannotHide", err)
	}
}
