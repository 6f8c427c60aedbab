package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// The cgroups of the node's sandboxes (docs/security.md "Resources"). In
// each hierarchy that carries a controller the sandbox uses, under the
// node's own cgroup D:
//
//	D/callsheet.PID/            the process's subtree (PID: this process)
//	  node/                     the node itself, moved here (its CPU weight NodeCPUWeight)
//	  box.N/                    one Sandbox's: NodeProcesses, NodeMemory
//	    TENANT/                 TenantProcesses, TenantMemory, an equal CPU weight per tenant
//	      run.M/                one run: Processes, SandboxMemory (v2: memory.oom.group)
//
// On cgroup v2 the controllers are enabled down this tree, which needs D to
// be the node's own (delegated: systemd's Delegate=yes, or a container's
// root): once the node has moved into node/, D holds no process. On v1 each
// controller has a hierarchy of its own and the same tree is made in each.
// Whatever cannot be made (no controller, no right to D) is left out and
// reported; the budget is then kept by counting (resources.go).

// Controllers the sandbox uses.
const (
	ctlPids   = "pids"
	ctlMemory = "memory"
	ctlCPU    = "cpu"
)

// usedControllers are those, in the order the report names them.
var usedControllers = []string{ctlPids, ctlMemory, ctlCPU}

// CPU weights: every tenant's cgroup gets the default weight, so tenants
// share the sandboxes' CPU equally however many processes each runs; the
// node's own cgroup gets nodeCPUFactor times it, so that its lease, its log
// and the other tenants' reads are served while sandboxes burn CPU.
const nodeCPUFactor = 10

// hierarchy is one cgroup hierarchy the sandbox uses: where it is mounted,
// and the node's cgroup in it (as /proc/self/cgroup names it).
type hierarchy struct {
	v2    bool
	mount string
	path  string
	// ctls are the used controllers this hierarchy carries for us.
	ctls []string
}

// dir is the node's cgroup directory in h.
func (h *hierarchy) dir() string { return filepath.Join(h.mount, h.path) }

func (h *hierarchy) name() string {
	if h.v2 {
		return "v2"
	}
	return "v1"
}

// findHierarchies returns, for each used controller, the hierarchy that
// carries it for this process: cgroup v2 when the node's v2 cgroup has it
// available, else its v1 hierarchy. A controller neither has is absent.
func findHierarchies() (map[string]*hierarchy, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	v2mount, v1mounts := cgroupMountsOf(string(mounts))
	v2path, v1paths := cgroupPathsOf(string(own))
	out := map[string]*hierarchy{}
	var v2 *hierarchy
	if v2mount != "" && v2path != "" {
		v2 = &hierarchy{v2: true, mount: v2mount, path: v2path}
		avail, _ := os.ReadFile(filepath.Join(v2.dir(), "cgroup.controllers"))
		for _, c := range usedControllers {
			if slices.Contains(strings.Fields(string(avail)), c) {
				v2.ctls = append(v2.ctls, c)
				out[c] = v2
			}
		}
	}
	v1 := map[string]*hierarchy{} // by mount: one hierarchy may carry several (cpu,cpuacct)
	for _, c := range usedControllers {
		if out[c] != nil || v1mounts[c] == "" || v1paths[c] == "" {
			continue
		}
		m := v1mounts[c]
		h := v1[m]
		if h == nil {
			h = &hierarchy{mount: m, path: v1paths[c]}
			v1[m] = h
		}
		h.ctls = append(h.ctls, c)
		out[c] = h
	}
	return out, nil
}

// cgroupMountsOf finds, in a mountinfo, the cgroup2 mount and each v1
// controller's mount.
func cgroupMountsOf(mountinfo string) (v2 string, v1 map[string]string) {
	v1 = map[string]string{}
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 5 || len(f) < sep+4 {
			continue
		}
		switch f[sep+1] {
		case "cgroup2":
			if v2 == "" {
				v2 = unescapeMount(f[4])
			}
		case "cgroup":
			for _, o := range strings.Split(f[sep+3], ",") {
				if slices.Contains(usedControllers, o) && v1[o] == "" {
					v1[o] = unescapeMount(f[4])
				}
			}
		}
	}
	return v2, v1
}

// cgroupPathsOf reads /proc/self/cgroup: the v2 path ("0::PATH") and each
// v1 controller's ("N:ctl,ctl:PATH").
func cgroupPathsOf(text string) (v2 string, v1 map[string]string) {
	v1 = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1[c] = parts[2]
		}
	}
	return v2, v1
}

// tree is the process's cgroup subtree (callsheet.PID), made once per
// process: the node moved into its node/ cgroup, the controllers enabled.
type tree struct {
	// subs are callsheet.PID in each hierarchy in use, by controller.
	subs map[string]string
	hier map[string]*hierarchy
	// why says, for each used controller left out, why.
	why map[string]string
}

var (
	processTree     *tree
	processTreeOnce sync.Once
	boxSeq          atomic.Uint64
)

// theTree sets the process's subtree up, once.
func theTree() *tree {
	processTreeOnce.Do(func() { processTree = makeTree() })
	return processTree
}

// makeTree makes callsheet.PID in every hierarchy that carries a used
// controller and moves this process into its node/ cgroup. A hierarchy
// where that fails is left out, with the reason.
func makeTree() *tree {
	t := &tree{subs: map[string]string{}, hier: map[string]*hierarchy{}, why: map[string]string{}}
	hs, err := findHierarchies()
	if err != nil {
		for _, c := range usedControllers {
			t.why[c] = err.Error()
		}
		return t
	}
	done := map[*hierarchy]bool{}
	for _, c := range usedControllers {
		h := hs[c]
		if h == nil {
			t.why[c] = "the host has no " + c + " controller for this process (neither cgroup v2 nor a v1 hierarchy carries it)"
			continue
		}
		if done[h] {
			continue
		}
		done[h] = true
		sub, err := setUpHierarchy(h)
		if err != nil {
			for _, hc := range h.ctls {
				t.why[hc] = err.Error()
			}
			continue
		}
		for _, hc := range h.ctls {
			t.subs[hc], t.hier[hc] = sub, h
		}
	}
	return t
}

// setUpHierarchy makes callsheet.PID in h under the node's cgroup, removes
// what dead processes left there, moves this process into its node/ and,
// on v2, enables h's controllers down to it. It returns callsheet.PID.
func setUpHierarchy(h *hierarchy) (string, error) {
	d := h.dir()
	removeStale(d)
	sub := filepath.Join(d, fmt.Sprintf("callsheet.%d", os.Getpid()))
	for _, dir := range []string{sub, filepath.Join(sub, "node")} {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("cannot make a cgroup in %s (cgroup %s): %v; delegate the node a cgroup of its own (systemd: Delegate=yes), or run it as root", d, h.name(), err)
		}
	}
	if err := writeFile(filepath.Join(sub, "node", "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		rmdirTree(sub)
		return "", fmt.Errorf("cannot move the node into its own cgroup %s: %v", filepath.Join(sub, "node"), err)
	}
	if h.v2 {
		// The node's cgroup must now hold no process for its children to
		// get controllers (cgroup v2's rule: no process in a cgroup whose
		// controllers are enabled for its children, but in the root).
		for _, dir := range []string{d, sub} {
			if err := enable(dir, h.ctls); err != nil {
				writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(os.Getpid()))
				rmdirTree(sub)
				return "", fmt.Errorf("cannot enable %s in %s: %v (other processes share the node's cgroup: give the node one of its own, systemd: Delegate=yes)", strings.Join(h.ctls, ", "), dir, err)
			}
		}
	}
	if slices.Contains(h.ctls, ctlCPU) {
		setCPUWeight(h, filepath.Join(sub, "node"), nodeCPUFactor)
	}
	return sub, nil
}

// enable turns ctls on for the children of the v2 cgroup dir.
func enable(dir string, ctls []string) error {
	var b strings.Builder
	for _, c := range ctls {
		b.WriteString("+" + c + " ")
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), strings.TrimSpace(b.String()))
}

// removeStale removes the subtrees (callsheet.PID) that processes no longer
// running left in dir: a node killed with SIGKILL leaves its own.
func removeStale(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, ok := strings.CutPrefix(e.Name(), "callsheet.")
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() {
			if _, err := os.Stat("/proc/" + pid); errors.Is(err, os.ErrNotExist) {
				rmdirTree(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// rmdirTree removes the cgroup dir and every cgroup below it, children
// first (a cgroup's files go with it; one that still holds a process
// stays).
func rmdirTree(dir string) error {
	// A run's cgroup has none below it: one rmdir, no listing of its
	// files.
	if err := syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			rmdirTree(filepath.Join(dir, e.Name()))
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}

// writeFile writes a cgroup control file.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// setCPUWeight gives the cgroup dir factor times the default CPU weight.
func setCPUWeight(h *hierarchy, dir string, factor int) {
	if h.v2 {
		writeFile(filepath.Join(dir, "cpu.weight"), strconv.Itoa(100*factor))
	} else {
		writeFile(filepath.Join(dir, "cpu.shares"), strconv.Itoa(1024*factor))
	}
}

// setLimit writes a processes or memory limit on the cgroup dir of h's
// controller ctl (0: none).
func setLimit(h *hierarchy, dir, ctl string, v int64) error {
	if v <= 0 {
		return nil
	}
	val := strconv.FormatInt(v, 10)
	switch {
	case ctl == ctlPids:
		return writeFile(filepath.Join(dir, "pids.max"), val)
	case ctl == ctlMemory && h.v2:
		if err := writeFile(filepath.Join(dir, "memory.max"), val); err != nil {
			return err
		}
		// Swap would let the sandbox hold more than its limit.
		writeFile(filepath.Join(dir, "memory.swap.max"), "0")
		return nil
	case ctl == ctlMemory:
		if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), val); err != nil {
			return err
		}
		writeFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), val)
		return nil
	}
	return nil
}

// readLimit reads a cgroup's pids or memory limit: -1 for none (or no
// such file).
func readLimit(h *hierarchy, dir, ctl string) int64 {
	var file string
	switch {
	case ctl == ctlPids:
		file = "pids.max"
	case h.v2:
		file = "memory.max"
	default:
		file = "memory.limit_in_bytes"
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v >= 1<<62 { // "max", or v1's "unlimited" (the largest page multiple)
		return -1
	}
	return v
}

// ceilingOf is the lowest limit of controller ctl on the node's cgroup and
// its ancestors in h, and the cgroup that sets it: -1 when none is set.
func ceilingOf(h *hierarchy, ctl string) (int64, string) {
	low, from := int64(-1), ""
	for p := filepath.Clean(h.path); ; p = filepath.Dir(p) {
		dir := filepath.Join(h.mount, p)
		if v := readLimit(h, dir, ctl); v >= 0 && (low < 0 || v < low) {
			low, from = v, dir
		}
		if p == "/" || p == "." {
			return low, from
		}
	}
}

// cgroupName makes a tenant's name a cgroup directory name: the name itself
// when it is letters, digits, '-' and '_', else its hex.
func cgroupName(tenant string) string {
	if tenant == "" {
		return "_"
	}
	for _, r := range tenant {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Sprintf("x%x", tenant)
		}
	}
	return tenant
}

// readLines reads a small file's lines.
func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
