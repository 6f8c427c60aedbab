package testenv

import (
	"fmt"
	"syscall"
	"testing"
)

// SmallDisk mounts a tmpfs of mib MiB at a fresh directory and returns it:
// a file system that a test may fill to ENOSPC without filling the
// machine's. It skips the test when this process may not mount (not root,
// or no CAP_SYS_ADMIN). The file system is detached when the test ends,
// after the cleanups registered later (a process using it is killed
// first).
func SmallDisk(t testing.TB, mib int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%dm,mode=0755", mib)); err != nil {
		t.Skipf("a small file system to fill needs mount(2) (root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}
