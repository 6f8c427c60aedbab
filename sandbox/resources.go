package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The sandboxes' share of the host (docs/security.md "Resources"): a fork
// bomb or a memory hog in one sandbox must end there, never starve the node
// (whose Go runtime aborts when it cannot make a thread) or another tenant.
// Each sandbox, each tenant's sandboxes together and all the node's
// sandboxes together have a processes and a memory limit (Limits), the
// last below what the host gives the node, so the node always keeps a
// share of its own. Cgroups enforce them where the node can make cgroups
// (cgroup.go); without a pids cgroup the node counts: at most MaxSandboxes
// run at once (TenantSandboxes of one tenant), each with SandboxProcesses
// (RLIMIT_NPROC, counted per sandbox), so together they stay within
// NodeProcesses. Every sandboxed process has the highest oom_score_adj, so
// the OOM killer takes them before anything of the host's.

// oomScoreAdj is every sandboxed process's oom_score_adj: the most the
// kernel allows, so a sandboxed process outscores the node whatever their
// sizes.
const oomScoreAdj = 1000

// defaultTmpSize bounds a sandbox's /tmp when the budget gives no memory
// figure: 1 GiB.
const defaultTmpSize = 1 << 30

// Bounds of the counted budget (without a pids cgroup).
const (
	// minCountedProcesses is the fewest processes a sandbox gets when the
	// budget is split by counting: enough for a shell, a build tool and
	// its threads.
	minCountedProcesses = 32
	// countedSandboxes is how many sandboxes the counted budget aims to
	// let run at once: the node's 64 exclusive and 64 background workers.
	countedSandboxes = 128
)

// ErrBusy is wrapped by the error Attach returns when the node counts its
// sandboxes' processes (no pids cgroup) and the node's or the tenant's
// budget of sandboxes is taken: nothing ran, and a later call may.
var ErrBusy = errors.New("sandbox: every sandbox the budget allows is running")

// Budget is what a Sandbox lets its sandboxes use, resolved from
// Config.Limits and what the host gives the node (Sandbox.Budget).
type Budget struct {
	// ProcessCeiling is the most tasks the host lets the node's processes
	// have: the lowest of kernel.pid_max, kernel.threads-max, the pids
	// limits of the node's cgroup and its ancestors, and (when the node is
	// not root) its RLIMIT_NPROC; ProcessCeilingFrom names it.
	ProcessCeiling     int
	ProcessCeilingFrom string
	// MemoryCeiling is the most memory the host gives the node, in bytes:
	// the machine's, or its cgroups' limit; MemoryCeilingFrom names it.
	MemoryCeiling     int64
	MemoryCeilingFrom string
	// The limits in force: per sandbox, per tenant, and for all the
	// node's sandboxes together.
	SandboxProcesses, TenantProcesses, NodeProcesses int
	SandboxMemory, TenantMemory, NodeMemory          int64
	// Cgroups names the cgroup controllers enforcing them ("pids, memory
	// and cpu on cgroup v1"); NoCgroups says which are missing and why.
	Cgroups, NoCgroups string
	// MaxSandboxes and TenantSandboxes bound how many sandboxes run at
	// once, node-wide and per tenant, when no pids cgroup counts their
	// processes; 0 when one does.
	MaxSandboxes, TenantSandboxes int
	// Lowered lists configured limits above what the host allows, and
	// what they were lowered to.
	Lowered []string
	// Disk says how the workspaces' disk is bounded (Config.TenantDisk),
	// or that it is not.
	Disk string
}

// String describes the budget for the start-up report.
func (b Budget) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "each sandbox at most %d processes and %d MiB, each tenant's %d and %d MiB, all sandboxes %d and %d MiB (of %d tasks the host gives the node, %s; of %d MiB, %s)",
		b.SandboxProcesses, b.SandboxMemory>>20, b.TenantProcesses, b.TenantMemory>>20, b.NodeProcesses, b.NodeMemory>>20,
		b.ProcessCeiling, b.ProcessCeilingFrom, b.MemoryCeiling>>20, b.MemoryCeilingFrom)
	if b.Cgroups != "" {
		fmt.Fprintf(&s, "; enforced by cgroups (%s), the node in a cgroup of its own with %d times a tenant's CPU weight", b.Cgroups, nodeCPUFactor)
	}
	if b.NoCgroups != "" {
		fmt.Fprintf(&s, "; without cgroups for %s", b.NoCgroups)
	}
	if b.MaxSandboxes > 0 {
		fmt.Fprintf(&s, "; processes kept by counting: at most %d sandboxes at once, %d per tenant", b.MaxSandboxes, b.TenantSandboxes)
	}
	s.WriteString("; sandboxed processes have oom_score_adj 1000")
	if b.Disk != "" {
		s.WriteString("; " + b.Disk)
	}
	for _, l := range b.Lowered {
		s.WriteString("; " + l)
	}
	return s.String()
}

// resources is a Sandbox's share of the host: its cgroups (box.N), or the
// count of running sandboxes. Safe for concurrent use.
type resources struct {
	budget Budget
	// box is the Sandbox's cgroup (box.N) in each hierarchy, by
	// controller; empty without cgroups.
	box  map[string]string
	hier map[string]*hierarchy

	mu       sync.Mutex
	running  int
	byTenant map[string]int
	tenants  map[string]bool // tenant cgroups made
	// pending are run cgroups that still held exiting processes when
	// their run ended; removed at a later admit.
	pending []string
	seq     atomic.Uint64
}

// newResources resolves the budget and, unless cfg.Cgroups is off, makes
// the Sandbox's cgroups.
func newResources(cfg Config) *resources {
	r := &resources{box: map[string]string{}, hier: map[string]*hierarchy{}, byTenant: map[string]int{}, tenants: map[string]bool{}}
	var hs map[string]*hierarchy
	if cfg.Cgroups != CgroupsOff {
		hs, _ = findHierarchies()
	}
	procs, procsFrom, mem, memFrom := hostCeilings(hs)
	r.budget = resolveBudget(cfg.Limits, procs, procsFrom, mem, memFrom)
	b := &r.budget
	var missing reasons
	if cfg.Cgroups == CgroupsOff {
		for _, c := range usedControllers {
			missing.add(c, `sandbox.cgroups is "off"`)
		}
	} else {
		t := theTree()
		n := boxSeq.Add(1)
		var have []string
		for _, c := range usedControllers {
			sub, ok := t.subs[c]
			if !ok {
				missing.add(c, t.why[c])
				continue
			}
			h := t.hier[c]
			dir := filepath.Join(sub, fmt.Sprintf("box.%d", n))
			if err := r.makeBox(h, c, dir); err != nil {
				missing.add(c, err.Error())
				continue
			}
			r.box[c], r.hier[c] = dir, h
			have = append(have, c)
		}
		if len(have) > 0 {
			versions := map[string]bool{}
			for _, c := range have {
				versions[r.hier[c].name()] = true
			}
			var vs []string
			for _, v := range []string{"v1", "v2"} {
				if versions[v] {
					vs = append(vs, "cgroup "+v)
				}
			}
			b.Cgroups = strings.Join(have, ", ") + " on " + strings.Join(vs, " and ")
		}
	}
	b.NoCgroups = missing.String()
	if r.box[ctlPids] == "" {
		// Counted: every sandbox gets the same share, so that as many
		// as the budget allows stay within NodeProcesses together.
		p := min(b.SandboxProcesses, max(minCountedProcesses, b.NodeProcesses/countedSandboxes), b.NodeProcesses)
		b.SandboxProcesses = max(p, 1)
		b.MaxSandboxes = max(1, b.NodeProcesses/b.SandboxProcesses)
		b.TenantSandboxes = max(1, min(b.MaxSandboxes, b.TenantProcesses/b.SandboxProcesses))
	}
	return r
}

// makeBox makes the Sandbox's cgroup dir in h with the node-wide limits.
func (r *resources) makeBox(h *hierarchy, ctl, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := r.limit(h, dir, ctl, int64(r.budget.NodeProcesses), r.budget.NodeMemory); err != nil {
		rmdirTree(dir)
		return err
	}
	if h.v2 {
		if err := enable(dir, []string{ctl}); err != nil {
			rmdirTree(dir)
			return err
		}
	}
	return nil
}

// limit sets ctl's limit on dir: processes for pids, memory for memory.
func (r *resources) limit(h *hierarchy, dir, ctl string, processes, memory int64) error {
	switch ctl {
	case ctlPids:
		return setLimit(h, dir, ctl, processes)
	case ctlMemory:
		return setLimit(h, dir, ctl, memory)
	}
	return nil
}

// runShare is one run's part of the resources: its cgroups, or its place in
// the count. Call place once the helper has started, release when the run
// ended.
type runShare struct {
	// processes is the run's RLIMIT_NPROC.
	processes int
	dirs      []string // the run's cgroup in each hierarchy
	v2        []string // those of dirs on cgroup v2 (which have cgroup.kill)
	r         *resources
	tenant    string
	counted   bool
	done      bool
}

// admit gives tenant's next run its share: a cgroup of its own under the
// tenant's (and the processes of the budget), or, counted, a place among
// the sandboxes running, failing with ErrBusy when none is free.
func (r *resources) admit(tenant string) (*runShare, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retryPending()
	b := r.budget
	s := &runShare{processes: b.SandboxProcesses, r: r, tenant: tenant}
	if r.box[ctlPids] == "" {
		if r.running >= b.MaxSandboxes || r.byTenant[tenant] >= b.TenantSandboxes {
			return nil, fmt.Errorf("%w: %d sandboxes run (at most %d at once, %d of one tenant's, since without a pids cgroup each is given %d of the node's %d processes; sandbox.limits.node_processes): nothing ran; try again when a call ends",
				ErrBusy, r.running, b.MaxSandboxes, b.TenantSandboxes, b.SandboxProcesses, b.NodeProcesses)
		}
		r.running++
		r.byTenant[tenant]++
		s.counted = true
	}
	if len(r.box) == 0 {
		return s, nil
	}
	name := cgroupName(tenant)
	run := fmt.Sprintf("run.%d", r.seq.Add(1))
	made := map[string]bool{}
	for _, c := range usedControllers {
		box, ok := r.box[c]
		if !ok {
			continue
		}
		h := r.hier[c]
		tdir := filepath.Join(box, name)
		dir := filepath.Join(tdir, run)
		if made[dir] {
			continue
		}
		if !r.tenants[c+"/"+name] {
			if err := r.makeTenant(h, c, tdir); err != nil {
				s.releaseLocked()
				return nil, fmt.Errorf("%w: the cgroup of tenant %q: %v", ErrSetup, tenant, err)
			}
			r.tenants[c+"/"+name] = true
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			s.releaseLocked()
			return nil, fmt.Errorf("%w: the run's cgroup: %v", ErrSetup, err)
		}
		made[dir] = true
		s.dirs = append(s.dirs, dir)
		if h.v2 {
			s.v2 = append(s.v2, dir)
		}
		if err := r.limit(h, dir, c, int64(b.SandboxProcesses), b.SandboxMemory); err != nil {
			s.releaseLocked()
			return nil, fmt.Errorf("%w: the run's cgroup: %v", ErrSetup, err)
		}
		if c == ctlMemory && h.v2 {
			// An OOM in the sandbox ends the whole sandbox, not one
			// process of it.
			writeFile(filepath.Join(dir, "memory.oom.group"), "1")
		}
	}
	return s, nil
}

// makeTenant makes tenant's cgroup dir in h, with the tenant's limits and
// the default CPU weight (every tenant the same).
func (r *resources) makeTenant(h *hierarchy, ctl, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := r.limit(h, dir, ctl, int64(r.budget.TenantProcesses), r.budget.TenantMemory); err != nil {
		return err
	}
	if h.v2 {
		return enable(dir, []string{ctl})
	}
	return nil
}

// place moves the process pid (the run's helper, which waits for its
// policy until then) into the run's cgroups.
func (s *runShare) place(pid int) error {
	for _, d := range s.dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("put the sandbox in its cgroup %s: %w", d, err)
		}
	}
	return nil
}

// release gives the run's share back: its place in the count, and its
// cgroups (removed now, or at a later admit if exiting processes still
// hold them).
func (s *runShare) release() {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.releaseLocked()
}

func (s *runShare) releaseLocked() {
	if s.done {
		return
	}
	s.done = true
	r := s.r
	if s.counted {
		r.running--
		if r.byTenant[s.tenant]--; r.byTenant[s.tenant] <= 0 {
			delete(r.byTenant, s.tenant)
		}
	}
	for _, d := range s.v2 {
		// Kill whatever is left (nothing should be: the PID namespace
		// died with the helper).
		writeFile(filepath.Join(d, "cgroup.kill"), "1")
	}
	for _, d := range s.dirs {
		if rmdirTree(d) != nil {
			r.pending = append(r.pending, d)
		}
	}
}

// retryPending removes the run cgroups that were still busy at release.
func (r *resources) retryPending() {
	left := r.pending[:0]
	for _, d := range r.pending {
		if rmdirTree(d) != nil {
			left = append(left, d)
		}
	}
	r.pending = left
}

// hostCeilings reads what the host gives the node: tasks and memory, the
// lowest of the kernel's and its cgroups' limits (in hs, the hierarchies
// of the used controllers).
func hostCeilings(hs map[string]*hierarchy) (procs int64, procsFrom string, mem int64, memFrom string) {
	procs, procsFrom = 1<<22, "the kernel's maximum"
	lower := func(v int64, from string) {
		if v > 0 && v < procs {
			procs, procsFrom = v, from
		}
	}
	lower(readInt("/proc/sys/kernel/pid_max"), "kernel.pid_max")
	lower(readInt("/proc/sys/kernel/threads-max"), "kernel.threads-max")
	if h := hs[ctlPids]; h != nil {
		if v, from := ceilingOf(h, ctlPids); v > 0 {
			lower(v, "pids.max of "+from)
		}
	} else if hs == nil {
		// cgroups off: a fence set on the node still binds it.
		if all, err := findHierarchies(); err == nil && all[ctlPids] != nil {
			if v, from := ceilingOf(all[ctlPids], ctlPids); v > 0 {
				lower(v, "pids.max of "+from)
			}
		}
	}
	if os.Geteuid() != 0 {
		// The node's own threads count against its uid's RLIMIT_NPROC,
		// with every sandbox's processes (which run as the same uid).
		var rl unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NPROC, &rl) == nil && rl.Cur < 1<<40 {
			lower(int64(rl.Cur), "the node's RLIMIT_NPROC")
		}
	}

	mem, memFrom = memTotal(), "the machine's memory"
	memHier := hs[ctlMemory]
	if memHier == nil && hs == nil {
		if all, err := findHierarchies(); err == nil {
			memHier = all[ctlMemory]
		}
	}
	if memHier != nil {
		if v, from := ceilingOf(memHier, ctlMemory); v > 0 && (mem <= 0 || v < mem) {
			mem, memFrom = v, "the memory limit of "+from
		}
	}
	return procs, procsFrom, mem, memFrom
}

// resolveBudget fills the limits' defaults from the host's ceilings and
// lowers what exceeds them, keeping a reserve for the node itself: at least
// 256 tasks or 1/16 of the ceiling, and 256 MiB or 1/8 of the memory (at
// most half of either).
func resolveBudget(l Limits, procs int64, procsFrom string, mem int64, memFrom string) Budget {
	b := Budget{ProcessCeiling: int(procs), ProcessCeilingFrom: procsFrom, MemoryCeiling: mem, MemoryCeilingFrom: memFrom}
	pReserve := min(max(256, procs/16), procs/2)
	mReserve := min(max(256<<20, mem/8), mem/2)
	b.NodeProcesses = pick(int64(l.NodeProcesses), procs/2, procs-pReserve, "sandbox.limits.node_processes", &b.Lowered, "processes")
	b.TenantProcesses = pick(int64(l.TenantProcesses), int64(b.NodeProcesses)/2, int64(b.NodeProcesses), "sandbox.limits.tenant_processes", &b.Lowered, "processes")
	b.SandboxProcesses = pick(int64(l.withDefaults().Processes), int64(l.withDefaults().Processes), int64(b.TenantProcesses), "sandbox.limits.processes", &b.Lowered, "processes")
	b.NodeMemory = int64(pick(l.NodeMemory, mem/2, mem-mReserve, "sandbox.limits.node_memory_mb", &b.Lowered, "bytes"))
	b.TenantMemory = int64(pick(l.TenantMemory, b.NodeMemory/2, b.NodeMemory, "sandbox.limits.tenant_memory_mb", &b.Lowered, "bytes"))
	b.SandboxMemory = int64(pick(l.SandboxMemory, b.TenantMemory, b.TenantMemory, "sandbox.limits.sandbox_memory_mb", &b.Lowered, "bytes"))
	return b
}

// pick is a configured value v (def when 0), lowered to most with a note.
func pick(v, def, most int64, key string, notes *[]string, unit string) int {
	if v == 0 {
		v = def
	}
	if v > most {
		*notes = append(*notes, fmt.Sprintf("%s lowered from %d to %d %s (what the host gives the node allows no more)", key, v, most, unit))
		v = most
	}
	return int(max(v, 1))
}

// readInt reads a number from a file (-1 when it cannot).
func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// memTotal is the machine's memory in bytes (MemTotal).
func memTotal() int64 {
	for _, line := range readLines("/proc/meminfo") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return n << 10
			}
		}
	}
	return 1 << 30
}

// reasons groups controllers by why each is missing.
type reasons struct {
	order []string
	ctls  map[string][]string
}

func (r *reasons) add(ctl, why string) {
	if r.ctls == nil {
		r.ctls = map[string][]string{}
	}
	if _, ok := r.ctls[why]; !ok {
		r.order = append(r.order, why)
	}
	r.ctls[why] = append(r.ctls[why], ctl)
}

// String is "pids, memory and cpu (why); ...".
func (r reasons) String() string {
	var out []string
	for _, why := range r.order {
		c := r.ctls[why]
		names := strings.Join(c, ", ")
		if len(c) > 1 {
			names = strings.Join(c[:len(c)-1], ", ") + " and " + c[len(c)-1]
		}
		out = append(out, names+" ("+why+")")
	}
	return strings.Join(out, "; ")
}
