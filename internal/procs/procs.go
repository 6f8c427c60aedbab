// Package procs finds host processes for tests. Sandboxed commands have pids
// of their own PID namespace, so a test cannot learn them with "echo $$";
// it gives the command a marker in its command line and looks for it in the
// host's /proc instead (docs/security.md, "Sandbox").
package procs

import (
	"os"
	"strconv"
	"strings"
)

// Marked returns the host pids of the live processes whose command line
// holds marker. Zombies are left out: a zombie runs nothing.
func Marked(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), marker) {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}
