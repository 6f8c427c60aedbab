package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The helper binary (docs/security.md "The helper binary"). A sandbox's
// first process is a small program of its own, sandbox/helper (package
// sandbox and what it imports: a few MiB), rather than the node's whole
// binary, whose start costs several times as much: more pages to fault in,
// every package of the node to initialize. Where it comes from, in order:
//
//  1. $CALLSHEET_SANDBOX_HELPER, a path ("self" for the node's own binary);
//  2. callsheet-sandbox-helper beside the node's executable (the Docker
//     image's layout);
//  3. built by the node from its own sources with the go command, when it
//     runs from a checkout (go run ./cmd/callsheet-node, go test): in the background,
//     once per version of the sources, into the user's cache directory;
//  4. else, and until the build is done, the node's own binary.
//
// A helper is used only if it speaks the node's protocol (protocolID). It is
// executed through a descriptor the node holds open (/proc/self/fd/N), so
// the sandbox's uid needs no access to the directory it lies in.

// HelperEnv names the environment variable that gives the helper binary's
// path; "self" makes the node start its own binary as the helper.
const HelperEnv = "CALLSHEET_SANDBOX_HELPER"

// HelperName is the helper binary's name beside the node's executable.
const HelperName = "callsheet-sandbox-helper"

// protocolArg, as a process's first argument, makes the helper print its
// protocol (protocolID) and exit: how the node checks a helper binary.
const protocolArg = "__callsheet_sandbox_protocol__"

// helperBuildTimeout bounds building the helper.
const helperBuildTimeout = 5 * time.Minute

// HelperProtocol returns the node-helper protocol this binary speaks.
func HelperProtocol() string { return protocolID() }

// helperBin is the helper binary in use: nil while it is the node's own.
var helperBin atomic.Pointer[helperFile]

// helperFile is a helper binary held open: path is how exec reaches it.
type helperFile struct {
	f      *os.File
	path   string
	source string
}

// helperWhy says why the node's own binary is the helper (when it is).
var helperWhy atomic.Pointer[string]

// helperPath is the program the sandbox starts as the namespace helper.
func helperPath() string {
	if h := helperBin.Load(); h != nil {
		return h.path
	}
	return selfExe
}

// Helper says which program sandboxes start as their first process: the
// helper binary and where it came from, or the node's own binary and why.
func Helper() string {
	if h := helperBin.Load(); h != nil {
		return "the helper binary " + h.source
	}
	why := "no helper binary was found"
	if w := helperWhy.Load(); w != nil {
		why = *w
	}
	return "the node's own binary (" + why + ")"
}

// findHelper looks for the helper binary once per process and, when it can
// build one, builds it in a goroutine of its own (which ends with the
// build). Until then sandboxes start the node's own binary.
var findHelper = sync.OnceFunc(func() {
	why := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		helperWhy.Store(&s)
	}
	if p := os.Getenv(HelperEnv); p != "" {
		if p == "self" {
			why("%s=self", HelperEnv)
			return
		}
		if err := useHelper(p, "at $"+HelperEnv+" ("+p+")"); err != nil {
			why("$%s: %v", HelperEnv, err)
		}
		return
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), HelperName)
		if _, err := os.Stat(p); err == nil {
			if err := useHelper(p, "beside the node ("+p+")"); err != nil {
				why("%s: %v", p, err)
			}
			return
		}
	}
	src, err := helperSources()
	if err != nil {
		why("%v", err)
		return
	}
	why("building it from %s", src.root)
	go func() {
		p, err := buildHelper(src)
		if err == nil {
			err = useHelper(p, "built from "+src.root+" ("+p+")")
		}
		if err != nil {
			why("building it from %s failed: %v", src.root, err)
		}
	}()
})

// useHelper opens the helper binary at path, checks its protocol and makes
// it the one sandboxes start.
func useHelper(path, source string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	cmd := exec.Command(path, protocolArg)
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		f.Close()
		return fmt.Errorf("run %s %s: %w", path, protocolArg, err)
	}
	if got := strings.TrimSpace(out.String()); got != protocolID() {
		f.Close()
		return fmt.Errorf("%s speaks protocol %q, the node %q: build it from the node's sources (go build -o %s ./sandbox/helper)", path, got, protocolID(), HelperName)
	}
	helperBin.Store(&helperFile{f: f, path: fmt.Sprintf("/proc/self/fd/%d", f.Fd()), source: source})
	return nil
}

// helperSource is the checkout this binary was built from: its root and
// the files the helper is built from.
type helperSource struct {
	root  string
	files []string
}

// helperSources finds the sources this binary was built from (the path the
// compiler recorded for this file; -trimpath leaves none), if they are
// still there, unchanged in what the helper is built from as far as their
// owner goes: owned by this process's user or root, writable by no other.
func helperSources() (helperSource, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return helperSource{}, errors.New("the node was built without its source paths (-trimpath)")
	}
	root := filepath.Dir(filepath.Dir(file))
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.Contains(mod, []byte("module github.com/callsheet/callsheet\n")) {
		return helperSource{}, fmt.Errorf("the node's sources are not at %s", root)
	}
	src := helperSource{root: root, files: []string{"go.mod", "go.sum"}}
	for _, dir := range []string{"sandbox", "sandbox/helper"} {
		names, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			return helperSource{}, err
		}
		for _, n := range names {
			if !strings.HasSuffix(n, "_test.go") {
				rel, _ := filepath.Rel(root, n)
				src.files = append(src.files, rel)
			}
		}
	}
	slices.Sort(src.files)
	for _, rel := range append([]string{".", "sandbox", "sandbox/helper"}, src.files...) {
		var st unix.Stat_t
		p := filepath.Join(root, rel)
		if err := unix.Lstat(p, &st); err != nil {
			return helperSource{}, fmt.Errorf("the node's sources: %w", err)
		}
		if st.Uid != 0 && int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return helperSource{}, fmt.Errorf("the node's sources at %s are not this user's alone (%s: uid %d, mode %o), so the helper is not built from them", root, rel, st.Uid, st.Mode&0o7777)
		}
	}
	if _, err := goCommand(); err != nil {
		return helperSource{}, err
	}
	return src, nil
}

// goCommand finds the go command: in PATH, else in the toolchain this
// binary was built with.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", errors.New("no go command to build the helper with")
}

// buildHelper builds the helper from src into the user's cache directory,
// named by a hash of the sources and the toolchain, unless it is there
// already; concurrent builds (several test binaries) are serialized by a
// lock file. It returns the binary's path.
func buildHelper(src helperSource) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, rel := range src.files {
		b, err := os.ReadFile(filepath.Join(src.root, rel))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "callsheet", "sandbox-helper")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, HelperName+"-"+key)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // another process built it meanwhile
	}
	// What a build stopped half-way (its process ended) left, under the lock.
	if stale, err := filepath.Glob(filepath.Join(dir, HelperName+"-*.tmp")); err == nil {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	goBin, err := goCommand()
	if err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), helperBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "./sandbox/helper")
	cmd.Dir = src.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build ./sandbox/helper: %v: %s", err, strings.TrimSpace(tail(out.Bytes(), 2048)))
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, bin); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return bin, nil
}

// tail returns at most the last n bytes of b.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
