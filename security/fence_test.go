package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fence caps the memory of the process pid (and of what it starts later)
// at limit bytes, so an attack that would exhaust the machine's memory
// kills the process instead: in a memory cgroup of its own (cgroup v1's
// memory controller, or v2 where the memory controller is enabled for the
// root's children), else with RLIMIT_AS, which bounds the address space a
// Go runtime maps. It returns how the fence was made and a function that
// reads the cgroup's peak usage (0 without a cgroup). The cgroup is
// removed at the end of the test.
func fence(t *testing.T, pid int, limit int64) (how string, peak func() int64) {
	t.Helper()
	name := fmt.Sprintf("callsheet-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	if dir := "/sys/fs/cgroup/memory"; writable(dir) {
		cg := filepath.Join(dir, name)
		if err := os.Mkdir(cg, 0o755); err == nil {
			t.Cleanup(func() { removeCgroup(cg, filepath.Join(dir, "cgroup.procs")) })
			if write(cg, "memory.limit_in_bytes", limit) == nil {
				_ = write(cg, "memory.memsw.limit_in_bytes", limit) // no swap past it, where swap is accounted
				if write(cg, "cgroup.procs", int64(pid)) == nil {
					return "cgroup v1 " + cg, func() int64 { return readInt(filepath.Join(cg, "memory.max_usage_in_bytes")) }
				}
			}
		}
	}
	if dir := "/sys/fs/cgroup"; fileHas(filepath.Join(dir, "cgroup.subtree_control"), "memory") {
		cg := filepath.Join(dir, name)
		if err := os.Mkdir(cg, 0o755); err == nil {
			t.Cleanup(func() { removeCgroup(cg, filepath.Join(dir, "cgroup.procs")) })
			if write(cg, "memory.max", limit) == nil && write(cg, "memory.swap.max", 0) == nil && write(cg, "cgroup.procs", int64(pid)) == nil {
				return "cgroup v2 " + cg, func() int64 { return readInt(filepath.Join(cg, "memory.peak")) }
			}
		}
	}
	rl := unix.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	if err := unix.Prlimit(pid, unix.RLIMIT_AS, &rl, nil); err != nil {
		t.Fatalf("cannot fence process %d: no writable memory cgroup, and RLIMIT_AS: %v", pid, err)
	}
	return "RLIMIT_AS", func() int64 { return 0 }
}

func writable(dir string) bool { return unix.Access(dir, unix.W_OK) == nil }

func fileHas(path, word string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(" "+string(b)+" ", " "+strings.TrimSpace(word)+" ")
}

func write(dir, file string, v int64) error {
	return os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0)
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// removeCgroup moves what is left in cg to the parent's procs file and
// removes it.
func removeCgroup(cg, parentProcs string) {
	if b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs")); err == nil {
		for _, p := range strings.Fields(string(b)) {
			_ = os.WriteFile(parentProcs, []byte(p), 0)
		}
	}
	for range 50 {
		if os.Remove(cg) == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
