//go:build faults

package faults

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether this build has crash points.
const Enabled = true

var (
	mu     sync.Mutex
	target string
	count  = 1
	hits   int
	// panics are the armed panic points: point → keys.
	panics = map[string]map[string]bool{}
)

func init() {
	for _, spec := range strings.Split(os.Getenv("CALLSHEET_PANIC"), ",") {
		if point, key, ok := strings.Cut(spec, ":"); ok && key != "" {
			if panics[point] == nil {
				panics[point] = map[string]bool{}
			}
			panics[point][key] = true
		}
	}
	spec := os.Getenv("CALLSHEET_FAULT")
	if spec == "" {
		return
	}
	target = spec
	if name, n, ok := strings.Cut(spec, ":"); ok {
		target = name
		if v, err := strconv.Atoi(n); err == nil && v > 0 {
			count = v
		}
	}
}

// Hit kills the process with SIGKILL when point is the armed one and this is
// its n-th hit. Nothing runs after it: no deferred call, no flush.
func Hit(point string) {
	if target == "" || point != target {
		return
	}
	mu.Lock()
	hits++
	fire := hits == count
	mu.Unlock()
	if fire {
		fmt.Fprintf(os.Stderr, "faults: killing the process at %s (hit %d)\n", point, count)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never return: the signal is on its way
	}
}

// Panic panics when point is armed for key (CALLSHEET_PANIC), every time.
func Panic(point, key string) {
	if panics[point][key] {
		panic(fmt.Sprintf("faults: %s for %s", point, key))
	}
}
