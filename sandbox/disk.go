package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Tenants' disks (docs/security.md "Resources"). A workspace is host disk:
// a tenant's `dd` could fill the file system the node's JetStream store is
// on, and JetStream, once a write fails for want of space, stops storing.
// With Config.TenantDisk set, each tenant's workspaces (WorkspaceRoot/TENANT)
// are a file system of their own: an ext4 image of that size in DiskDir,
// its blocks allocated when it is made (fallocate), on a loop device,
// mounted nosuid and nodev. A tenant that fills its disk gets ENOSPC and
// takes nothing of the data dir's file system: that space was taken when
// the image was made, and an image is made only if what it leaves is at
// least the reserve JetStream keeps (DiskReserve). Without it the start-up
// report says whether the workspaces share the data dir's file system.

// ErrDisk is wrapped by the error New returns when Config.TenantDisk is set
// and a tenant's disk cannot be made or mounted; the message says why and
// what to do.
var ErrDisk = errors.New("sandbox: a tenant's disk cannot be set up")

// minTenantDisk is the smallest tenant disk: what mkfs.ext4 makes a usable
// file system of.
const minTenantDisk = 4 << 20

// diskReserve is what an image must leave free on the file system it is
// made on: a tenth of it, at least 64 MiB.
func diskReserve(total int64) int64 { return max(total/10, 64<<20) }

// mountedDisk is a tenant's disk this Sandbox mounted.
type mountedDisk struct {
	tenant, image, point string
}

// setUpDisks makes and mounts every configured tenant's disk (Config.
// Tenants) when TenantDisk is set: a disk already mounted there (a node
// that was killed) is taken over.
func (s *Sandbox) setUpDisks() error {
	c := s.cfg
	if c.TenantDisk == 0 {
		return nil
	}
	switch {
	case !s.root:
		return fmt.Errorf("%w: sandbox.limits.tenant_disk_mb needs the node to run as root (it makes loop devices and mounts); remove it, or put --workspace-root on a file system apart from the data dir's", ErrDisk)
	case c.WorkspaceRoot == "" || c.DiskDir == "":
		return fmt.Errorf("%w: no workspace root or disk directory", ErrDisk)
	case c.TenantDisk < minTenantDisk:
		return fmt.Errorf("%w: sandbox.limits.tenant_disk_mb %d is below the smallest disk, %d MiB", ErrDisk, c.TenantDisk>>20, minTenantDisk>>20)
	}
	mkfs, err := findMkfs()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.DiskDir, 0o700); err != nil {
		return fmt.Errorf("%w: %v", ErrDisk, err)
	}
	for _, t := range c.Tenants {
		d := mountedDisk{tenant: t, image: filepath.Join(c.DiskDir, cgroupName(t)+".img"), point: filepath.Join(c.WorkspaceRoot, t)}
		if err := s.setUpDisk(d, mkfs); err != nil {
			s.Close()
			return fmt.Errorf("%w: tenant %q: %v", ErrDisk, t, err)
		}
		s.disks = append(s.disks, d)
	}
	return nil
}

// setUpDisk makes d's image if missing and mounts it at d.point.
func (s *Sandbox) setUpDisk(d mountedDisk, mkfs string) error {
	if err := os.MkdirAll(d.point, 0o700); err != nil {
		return err
	}
	if backing, ok := mountedFrom(d.point); ok {
		if backing != d.image {
			return fmt.Errorf("%s is already a mount point (of %s), not of the tenant's disk %s: unmount it, or remove sandbox.limits.tenant_disk_mb", d.point, backing, d.image)
		}
		return nil // mounted by a node that is gone: ours now
	}
	if ents, err := os.ReadDir(d.point); err != nil {
		return err
	} else if len(ents) > 0 {
		return fmt.Errorf("%s holds %d workspaces on the data dir's file system: move them aside, start the node (it makes and mounts the tenant's disk there), then move them in", d.point, len(ents))
	}
	if _, err := os.Stat(d.image); errors.Is(err, fs.ErrNotExist) {
		if err := s.makeImage(d.image, mkfs); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	dev, held, err := loopAttach(d.image)
	if err != nil {
		return fmt.Errorf("attach %s to a loop device: %v", d.image, err)
	}
	// Held open until mounted: the device detaches itself (autoclear)
	// when its last user is gone.
	defer held.Close()
	// No discard: a trim (fstrim.timer) would punch the image's blocks
	// out, and with them the space taken for the tenant.
	os.WriteFile("/sys/block/"+filepath.Base(dev)+"/queue/discard_max_bytes", []byte("0"), 0)
	if err := unix.Mount(dev, d.point, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount %s (%s) on %s: %v", d.image, dev, d.point, err)
	}
	// The tenant's root is the node's alone, as on the shared file system.
	os.Remove(filepath.Join(d.point, "lost+found"))
	return os.Chmod(d.point, 0o700)
}

// makeImage makes an ext4 image of TenantDisk bytes at path, its blocks
// allocated now, if the file system keeps its reserve after it.
func (s *Sandbox) makeImage(path, mkfs string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return err
	}
	size := s.cfg.TenantDisk
	total, avail := int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize
	if reserve := diskReserve(total); avail-size < reserve {
		return fmt.Errorf("a disk of %d MiB would leave %d MiB free on %s, less than the %d MiB kept for the node's own data (JetStream): lower sandbox.limits.tenant_disk_mb or give the data dir more room", size>>20, (avail-size)>>20, filepath.Dir(path), reserve>>20)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// No blocks reserved for root inside: the tenant's uid is not
		// root, so they would only be lost. No discard: mke2fs would punch
		// the allocated blocks out of the image again.
		var out []byte
		if out, err = exec.Command(mkfs, "-q", "-F", "-m", "0", "-E", "root_owner=0:0,nodiscard", path).CombinedOutput(); err != nil {
			err = fmt.Errorf("%s: %v: %s", mkfs, err, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		// mke2fs zeroes some ranges by punching holes: allocate them again
		// (a hole reads as zeroes, so the file system is unchanged).
		if f, err = os.OpenFile(path, os.O_RDWR, 0); err == nil {
			err = unix.Fallocate(int(f.Fd()), 0, 0, size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("make the disk image %s: %w", path, err)
	}
	return nil
}

// Close ends the sandboxes prepared ahead (and stops preparing them) and
// unmounts the tenants' disks New mounted (their loop devices go with
// them). The node calls it when it stops; it is safe to call more than
// once.
func (s *Sandbox) Close() error {
	// First the prepared sandboxes: they hold the tenants' disks in their
	// mount namespaces.
	s.pool.close()
	s.reaping.Wait()
	var errs []error
	for _, d := range s.disks {
		if err := unix.Unmount(d.point, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("sandbox: unmount %s: %w", d.point, err))
		}
	}
	s.disks = nil
	return errors.Join(errs...)
}

// findMkfs finds mkfs.ext4 (e2fsprogs), in PATH or the sbin directories.
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, "mkfs.ext4"); unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: sandbox.limits.tenant_disk_mb needs mkfs.ext4 (Debian: apt-get install e2fsprogs)", ErrDisk)
}

// mountedFrom reports whether dir is a mount point and, when it is a loop
// device's, the file behind it.
func mountedFrom(dir string) (string, bool) {
	for _, line := range readLines("/proc/self/mountinfo") {
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || len(f) < sep+3 || unescapeMount(f[4]) != dir {
			continue
		}
		src := f[sep+2]
		if loop, ok := strings.CutPrefix(src, "/dev/loop"); ok {
			if b, err := os.ReadFile("/sys/block/loop" + loop + "/loop/backing_file"); err == nil {
				return strings.TrimSpace(string(b)), true
			}
		}
		return src, true
	}
	return "", false
}

// loopAttach puts image on a free loop device (LOOP_CONFIGURE, Linux 5.8),
// which detaches itself once its last user is gone (autoclear), and returns
// its path and the device, open: close it once the device is mounted.
func loopAttach(image string) (string, *os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", nil, err
	}
	defer ctl.Close()
	img, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return "", nil, err
	}
	defer img.Close()
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		if _, err := os.Stat(dev); errors.Is(err, fs.ErrNotExist) {
			// No udev to make the node (a container): make it.
			if err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", nil, err
			}
		}
		lf, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return "", nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		if errors.Is(err, syscall.EBUSY) {
			lf.Close()
			continue // taken meanwhile by someone else
		}
		if err != nil {
			lf.Close()
			return "", nil, fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
		}
		return dev, lf, nil
	}
	return "", nil, errors.New("no free loop device")
}

// diskReport says how the workspaces' disk is bounded, for the start-up
// report.
func (s *Sandbox) diskReport() string {
	c := s.cfg
	switch {
	case len(s.disks) > 0:
		return fmt.Sprintf("each tenant's workspaces on a file system of their own of %d MiB (an ext4 image in %s on a loop device), apart from the data dir's", c.TenantDisk>>20, c.DiskDir)
	case c.WorkspaceRoot == "" || c.RunDir == "":
		return ""
	}
	var ws, data unix.Stat_t
	if unix.Stat(c.WorkspaceRoot, &ws) != nil || unix.Stat(filepath.Dir(c.RunDir), &data) != nil {
		return ""
	}
	if ws.Dev == data.Dev {
		return "workspaces share the data dir's file system, unbounded: a tenant can fill it and stop the node's JetStream (set sandbox.limits.tenant_disk_mb, or put --workspace-root on a file system of its own)"
	}
	return "workspaces on a file system apart from the data dir's"
}
