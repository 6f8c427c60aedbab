package security

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/sandbox"
)

// A cgroupFence is a cgroup this test makes, under its own, to hold a node and
// everything it starts, so that a resource attack on the node exhausts the
// fence and never the machine: a fork bomb meets the fence's pids limit, a
// memory attack its memory limit (and the OOM killer runs inside it).
type cgroupFence struct {
	// dirs are the fence's directories, one per hierarchy (v1 has one per
	// controller, v2 one for all).
	dirs map[string]string // controller → directory
}

// cgroupMounts finds the host's cgroup hierarchies: the cgroup2 mount, and
// each v1 controller's mount.
func cgroupMounts(t *testing.T) (v2 string, v1 map[string]string) {
	t.Helper()
	v1 = map[string]string{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", v1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+4 {
			continue
		}
		switch fields[sep+1] {
		case "cgroup2":
			if v2 == "" {
				v2 = fields[4]
			}
		case "cgroup":
			for _, o := range strings.Split(fields[sep+3], ",") {
				if _, ok := v1[o]; !ok {
					v1[o] = fields[4]
				}
			}
		}
	}
	return v2, v1
}

// ownCgroup is this process's cgroup path in the hierarchy whose
// /proc/self/cgroup line lists controller ("" for the v2 line).
func ownCgroup(controller string) string {
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if controller != "" && c == controller {
				return parts[2]
			}
		}
	}
	return ""
}

// newFence makes a fence with the given pids limit (0: none) and memory
// limit in bytes (0: none), or skips the test, saying why, when this
// machine gives no writable cgroup for them (the attack cannot be fenced,
// so it is not run).
func newFence(t *testing.T, pids int, memory int64) *cgroupFence {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("fencing a resource attack needs a cgroup of its own, which only root can make here; the attack is not run unfenced")
	}
	v2, v1 := cgroupMounts(t)
	want := map[string]string{}
	if pids > 0 {
		want["pids"] = strconv.Itoa(pids)
	}
	if memory > 0 {
		want["memory"] = strconv.FormatInt(memory, 10)
	}
	name := fmt.Sprintf("callsheet-test-fence-%d-%d", os.Getpid(), time.Now().UnixNano())
	f := &cgroupFence{dirs: map[string]string{}}
	t.Cleanup(f.remove)
	v2ctl := ""
	if v2 != "" {
		if b, err := os.ReadFile(filepath.Join(v2, ownCgroup(""), "cgroup.controllers")); err == nil {
			v2ctl = " " + strings.TrimSpace(string(b)) + " "
		}
	}
	for c, limit := range want {
		var dir, file string
		switch {
		case strings.Contains(v2ctl, " "+c+" "):
			parent := filepath.Join(v2, ownCgroup(""))
			if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
				t.Skipf("cannot enable the %s controller below %s to fence the attack: %v", c, parent, err)
			}
			dir, file = filepath.Join(parent, name), map[string]string{"pids": "pids.max", "memory": "memory.max"}[c]
		case v1[c] != "":
			dir, file = filepath.Join(v1[c], ownCgroup(c), name), map[string]string{"pids": "pids.max", "memory": "memory.limit_in_bytes"}[c]
		default:
			t.Skipf("no %s cgroup controller on this machine to fence the attack", c)
		}
		if d, ok := f.dirs[c]; ok && d == dir {
			continue
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			t.Skipf("cannot make a %s cgroup to fence the attack: %v", c, err)
		}
		f.dirs[c] = dir
		if err := os.WriteFile(filepath.Join(dir, file), []byte(limit), 0); err != nil {
			t.Fatalf("fence %s: %v", file, err)
		}
	}
	return f
}

// wrap is testnode.Options.Wrap for a node in the fence: a shell that moves
// itself into every directory of the fence, runs pre (more shell, such as a
// ulimit) and execs the node.
func (f *cgroupFence) wrap(pre string) []string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, d := range f.dirs {
		if !seen[d] {
			seen[d] = true
			fmt.Fprintf(&b, "echo $$ > %s/cgroup.procs || exit 125\n", d)
		}
	}
	b.WriteString(pre + "\nexec \"$0\" \"$@\"")
	return []string{"/bin/sh", "-c", b.String()}
}

// read returns a file of the fence's controller c, trimmed.
func (f *cgroupFence) read(c, file string) string {
	b, _ := os.ReadFile(filepath.Join(f.dirs[c], file))
	return strings.TrimSpace(string(b))
}

// remove kills whatever is left in the fence and removes its directories,
// children first.
func (f *cgroupFence) remove() {
	for _, dir := range f.dirs {
		for range 50 {
			var live []string
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					if b, err := os.ReadFile(filepath.Join(p, "cgroup.procs")); err == nil {
						live = append(live, strings.Fields(string(b))...)
					}
				}
				return nil
			})
			for _, pid := range live {
				if n, err := strconv.Atoi(pid); err == nil {
					syscall.Kill(n, syscall.SIGKILL)
				}
			}
			if rmdirTree(dir) == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// rmdirTree removes a cgroup directory and the cgroups below it (rmdir, not
// unlink: a cgroup's files go with it).
func rmdirTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	for _, e := range ents {
		if e.IsDir() {
			rmdirTree(filepath.Join(dir, e.Name()))
		}
	}
	err = syscall.Rmdir(dir)
	if err == syscall.ENOENT {
		return nil
	}
	return err
}

// tasksOf counts the tasks (threads) that uid runs on the host: what
// RLIMIT_NPROC counts.
func tasksOf(uid int) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var u, threads int
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				u, _ = strconv.Atoi(strings.Fields(v)[0])
			}
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if u == uid {
			n += threads
		}
	}
	return n
}

// nodeUID is the uid the suite runs a node that is not root as, when the
// suite itself runs as root: one no other test uses (RLIMIT_NPROC counts
// every task of a uid).
const nodeUID = 65530

// unprivileged returns testnode.Options for a node running as nodeUID (the
// test must be root): its binary copied where that uid may run it, with the
// sandbox helper beside it (the Docker image's layout), its data dir, config
// file and their parent its own. Without a helper beside it the node would
// build one from the sources as nodeUID, in the background: a go command
// fetching the module's dependencies into base, which outlived the node and
// left base half removed.
func unprivileged(t *testing.T, cfg any) (bin string, o testnode.Options) {
	t.Helper()
	base, err := os.MkdirTemp("", "callsheet-unpriv-node-")
	if err != nil {
		t.Fatal(err)
	}
	// Runs after the node's own cleanup killed it (cleanups run last
	// first): nothing of nodeUID may outlive it and write into base while
	// base is removed.
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for tasksOf(nodeUID) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := tasksOf(nodeUID); n > 0 {
			t.Errorf("%d tasks of uid %d outlived its node by 5 s", n, nodeUID)
		}
		if err := os.RemoveAll(base); err != nil {
			t.Errorf("removing the unprivileged node's directory: %v", err)
		}
	})
	os.Chmod(base, 0o755)
	for src, name := range map[string]string{testnode.Node(t, ""): "callsheet-node", testnode.Build(t, "sandbox/helper", ""): sandbox.HelperName} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin = filepath.Join(base, "callsheet-node")
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(home, nodeUID, nodeUID)
	return bin, testnode.Options{
		Data:       filepath.Join(home, "data"),
		Config:     cfg,
		Env:        []string{"HOME=" + home, "TMPDIR=" + home},
		Credential: &syscall.Credential{Uid: nodeUID, Gid: nodeUID},
	}
}
