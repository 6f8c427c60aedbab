package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// storeInUse reports a process that holds a file of the store open, if any:
// a running node's JetStream server keeps its streams' last message blocks
// open. nats-server takes no lock on its store directory, and a second server
// on the same files could corrupt the node's data, so replay looks before it
// opens. It reads /proc (Linux); where that is missing it finds nothing.
// The current process counts too: a node embedded in it would be harmed the
// same way.
func storeInUse(dir string) (pid int, inUse bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return 0, false
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	prefix := abs + string(filepath.Separator)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, p := range procs {
		id, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(fdDir) // another user's process: permission denied, skipped
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && strings.HasPrefix(target, prefix) {
				return id, true
			}
		}
	}
	return 0, false
}
