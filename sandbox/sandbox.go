package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// HelperArg, as a process's first argument, makes Main act as the sandbox
// helper. It is meant to be passed by Wrap only.
const HelperArg = "__callsheet_sandbox__"

// SpecEnv is the environment variable that carries the helper's policy, as
// JSON. The helper removes it before it runs the command.
const SpecEnv = "CALLSHEET_SANDBOX_SPEC"

// ExitSetupFailed is the exit code of a helper that could not confine or
// start the command; its standard error then holds one line starting with
// ErrorPrefix. It is the code env(1) and container runtimes use for the
// same failure.
const ExitSetupFailed = 125

// ErrorPrefix starts the line a failing helper writes on standard error.
const ErrorPrefix = "callsheet sandbox: "

// selfExe names the running binary. exec opens it in the child after fork,
// where it still is the node's image, so it works even after the node's file
// was replaced or removed on disk.
const selfExe = "/proc/self/exe"

// Errors returned by Wrap and Command.
var (
	// ErrUnavailable is returned when the kernel lacks Landlock; the
	// error's text says why (Probe().Reason).
	ErrUnavailable = errors.New("sandbox: this kernel lacks Landlock")
	// ErrNoHelper is returned when the running binary never called Main, so
	// re-executing it would not reach the helper.
	ErrNoHelper = errors.New("sandbox: sandbox.Main was not called at the start of main (or TestMain), so this binary cannot act as the sandbox helper")
	// ErrInvalidSpec is wrapped by the error of a Spec that Wrap refuses.
	ErrInvalidSpec = errors.New("sandbox: invalid spec")
	// ErrConfine is wrapped by StartConfined's error when Landlock could
	// not be enabled (nothing was started).
	ErrConfine = errors.New("sandbox: the command could not be confined")
)

// Spec describes one command to run in the sandbox.
type Spec struct {
	// Args is the command's argv. Args[0] is looked up in the PATH of Env
	// when it holds no slash. Required.
	Args []string
	// Env is the command's complete environment. The helper sees it too;
	// it adds SpecEnv, which it removes again before the command starts.
	Env []string
	// Writable are the directories the command may write, create, remove
	// and rename in, below as well: absolute paths that exist. Usually the
	// workspace and a temporary directory for the call. Default: none.
	Writable []string
	// Network lets the command use TCP (and UDP from ABI 10), and connect
	// to pathname UNIX sockets anywhere (ABI 9 and later). Default false.
	Network bool
	// Read, when not nil, confines reading and executing to these paths
	// (files or directories, absolute) and the directories of the shared
	// libraries and the dynamic loader; nil (the default) lets the
	// command read everything. glob and grep run rg this way, so that a
	// directory swapped for a symlink cannot lead it out of the workspace.
	Read []string
}

// policy is the part of a Spec the helper needs, as it travels in SpecEnv.
type policy struct {
	Writable []string `json:"writable"`
	Network  bool     `json:"network"`
	// Read, when set, are the only paths the command may read (and
	// execute) besides the shared libraries' directories; nil reads
	// everything. See ReadOnlySpec.
	Read []string `json:"read,omitempty"`
	// Limits, when set, are applied before the command starts (Sandbox's
	// fallback on a kernel without namespaces).
	Limits *Limits `json:"limits,omitempty"`
	// NoLandlock runs the command without Landlock (a fallback the config
	// accepted on a kernel without it).
	NoLandlock bool `json:"no_landlock,omitempty"`
}

// mainCalled records that this binary's main called Main, so re-executing it
// reaches the helper.
var mainCalled atomic.Bool

// Main turns the process into the sandbox helper when it was started as one
// (os.Args[1] == HelperArg): it enables Landlock as SpecEnv says and replaces
// the process with the command, or exits with ExitSetupFailed and a message on
// standard error. In helper mode it never returns. Otherwise it returns at
// once, having recorded that Wrap may re-execute this binary and marked
// every descriptor the process inherited (above standard error)
// close-on-exec, so that none reaches a command it starts.
//
// Call Main first thing in main, and in TestMain of every test binary that
// runs sandboxed commands, before flags are parsed or anything is started.
func Main() {
	mainCalled.Store(true)
	dispatch()
	closeOnExecInherited()
}

// dispatch becomes the helper os.Args[1] names, if any, and never returns
// then.
func dispatch() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case NamespaceArg:
		closeInherited(nsInherited...)
		nsMain(os.Args[2:])
	case SpawnerArg:
		closeInherited(fdSpawner)
		spawnerMain(os.Args[2:])
	case ReaperArg:
		closeInherited()
		reaperMain()
	case noopArg:
		os.Exit(0)
	case protocolArg:
		fmt.Println(protocolID())
		os.Exit(0)
	case HelperArg:
		closeInherited()
	default:
		return
	}
	err := helper(os.Args[2:])
	fmt.Fprintf(os.Stderr, "%s%v\n", ErrorPrefix, err)
	os.Exit(ExitSetupFailed)
}

// Wrap returns the argv and environment that run spec through the sandbox
// helper: the helper binary when the node has one (Helper), else this
// binary (/proc/self/exe), with HelperArg, then spec.Args, and spec.Env
// with the policy in SpecEnv. Start them in the directory the
// command should run in; the helper keeps its pid, so the caller may treat
// the helper's process as the command's (signal it, kill its group, wait for
// it).
//
// Wrap returns ErrNoHelper when Main was not called, ErrUnavailable when the
// kernel lacks Landlock, and an error wrapping ErrInvalidSpec for an empty
// Args or a Writable entry that is not an absolute path.
func Wrap(spec Spec) (args, env []string, err error) {
	return wrap(spec, Limits{}, true)
}

// wrap is Wrap, with limits to apply (none when zero) and Landlock
// optional: Sandbox's fallback on a kernel without namespaces.
func wrap(spec Spec, limits Limits, landlock bool) (args, env []string, err error) {
	if !mainCalled.Load() {
		return nil, nil, ErrNoHelper
	}
	if len(spec.Args) == 0 || spec.Args[0] == "" {
		return nil, nil, fmt.Errorf("%w: no command to run", ErrInvalidSpec)
	}
	if err := confinable(spec, landlock); err != nil {
		return nil, nil, err
	}
	pol := policy{Writable: spec.Writable, Network: spec.Network, Read: spec.Read, NoLandlock: !landlock}
	if limits != (Limits{}) {
		pol.Limits = &limits
	}
	p, err := json.Marshal(pol)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: encode policy: %w", err)
	}
	args = append([]string{helperPath(), HelperArg}, spec.Args...)
	env = make([]string, 0, len(spec.Env)+1)
	for _, kv := range spec.Env {
		if !strings.HasPrefix(kv, SpecEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, SpecEnv+"="+string(p))
	return args, env, nil
}

// Command returns an *exec.Cmd that runs spec in the sandbox, as Wrap
// describes, bound to ctx as exec.CommandContext binds it. The caller sets
// Dir, the standard streams and whatever else it needs. It returns Wrap's
// errors.
func Command(ctx context.Context, spec Spec) (*exec.Cmd, error) {
	args, env, err := Wrap(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = env
	return cmd, nil
}

// confinable checks what confining spec needs besides its command:
// absolute Writable paths and, with landlock, a kernel that has Landlock.
func confinable(spec Spec, landlock bool) error {
	for _, d := range spec.Writable {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("%w: writable directory %q is not an absolute path", ErrInvalidSpec, d)
		}
	}
	if st := Probe(); landlock && !st.Available() {
		return fmt.Errorf("%w: %s", ErrUnavailable, st.Reason)
	}
	return nil
}

// StartConfined starts cmd, set up as for cmd.Start, confined by spec's
// Landlock policy (Writable, Network, Read; the program, its arguments and
// its environment are cmd's), without a helper process: a goroutine locks an
// OS thread, restricts that thread alone (restrictThread) and starts cmd from
// it, which inherits the restriction; the goroutine then ends without
// unlocking, so the runtime ends the thread and it never runs other work (and
// starts no other thread: Go creates threads from its template thread while a
// thread is locked). It fails with ErrUnavailable when the kernel lacks
// Landlock, ErrInvalidSpec for a relative Writable entry and ErrConfine when
// Landlock would not restrict the thread; otherwise with cmd.Start's error.
func StartConfined(cmd *exec.Cmd, spec Spec) error {
	if err := confinable(spec, true); err != nil {
		return err
	}
	pol := policy{Writable: spec.Writable, Network: spec.Network, Read: spec.Read}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := restrictThread(pol); err != nil {
			errc <- fmt.Errorf("%w: enable Landlock: %v", ErrConfine, err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// helper is the sandbox helper: it reads the policy, confines the process and
// replaces it with argv. It returns only on failure.
func helper(argv []string) error {
	if len(argv) == 0 {
		return errors.New("started as the sandbox helper with no command to run")
	}
	raw, ok := os.LookupEnv(SpecEnv)
	if !ok {
		return fmt.Errorf("started as the sandbox helper without %s in the environment", SpecEnv)
	}
	if err := os.Unsetenv(SpecEnv); err != nil {
		return fmt.Errorf("unset %s: %w", SpecEnv, err)
	}
	var p policy
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("decode %s: %w", SpecEnv, err)
	}
	// Resolve the program before confining: the error is clearer here,
	// and reading and executing stay allowed everywhere anyway.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("find %s: %w", argv[0], err)
	}
	if p.Limits != nil {
		// The OOM killer takes sandboxed processes before the node's
		// (before Landlock, which forbids the write).
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(oomScoreAdj)), 0); err != nil {
			return fmt.Errorf("raise the sandbox's oom_score_adj: %w", err)
		}
	}
	if !p.NoLandlock {
		if err := restrict(p); err != nil {
			return fmt.Errorf("enable Landlock: %w", err)
		}
	}
	if p.Limits != nil { // last: they bind this process too
		if err := setLimits(*p.Limits); err != nil {
			return err
		}
	}
	err = syscall.Exec(path, argv, os.Environ())
	return fmt.Errorf("exec %s: %w", path, err)
}

// libDirs and libFiles are what a dynamically linked program needs to start:
// the dynamic loader, the shared libraries and the loader's cache.
var (
	libDirs  = []string{"/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/local/lib"}
	libFiles = []string{"/etc/ld.so.cache"}
)

// readRules grant reading (and executing) the paths in read, the shared
// libraries, and writing the harmless devices; nothing else.
func readRules(read []string) []landlock.Rule {
	rs := []landlock.Rule{
		landlock.RODirs(libDirs...).IgnoreIfMissing(),
		landlock.ROFiles(libFiles...).IgnoreIfMissing(),
		landlock.RWFiles(devFiles...).IgnoreIfMissing(),
	}
	for _, p := range read {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			rs = append(rs, landlock.RODirs(p))
		} else {
			rs = append(rs, landlock.ROFiles(p))
		}
	}
	return rs
}

// presets are go-landlock's configurations, indexed by ABI version: each
// handles every access right its version knows.
var presets = []landlock.Config{
	{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5,
	landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// Device files a command may write: the sinks and sources shells redirect
// to, and the terminal devices. Ioctl on them stays refused from ABI 5 but
// for the harmless few Landlock always allows.
var (
	devFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx"}
	devDirs  = []string{"/dev/pts", "/dev/shm"}
)

// restrict confines this process and its future children to p, with every
// restriction the kernel's Landlock ABI supports. It is strict: go-landlock's
// best-effort mode would succeed without restricting anything on a kernel
// that lacks Landlock, and a command must never run unconfined by accident.
func restrict(p policy) error {
	st := Probe()
	if !st.Available() {
		return fmt.Errorf("%s", st.Reason)
	}
	cfg := presets[st.ABI]
	if p.Network {
		cfg.HandledAccessNet = 0
	}
	return cfg.Restrict(rules(st.ABI, p)...)
}

// restrictThread is restrict for the calling thread only (with
// no_new_privs, also the thread's): what the thread starts from now on is
// confined, and the process's other threads are not. The namespace helper
// confines the thread it forks the command from, which is cheaper than
// stopping every thread of its runtime for it.
func restrictThread(p policy) error {
	st := Probe()
	if !st.Available() {
		return fmt.Errorf("%s", st.Reason)
	}
	cfg := presets[st.ABI]
	if p.Network {
		cfg.HandledAccessNet = 0
	}
	fd, flags, err := cfg.NewRulesetFD(rules(st.ABI, p)...)
	if err != nil || fd < 0 {
		return err
	}
	defer syscall.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := llsyscall.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}

// rules are the access rights the sandbox grants under ABI version abi.
// Rights that abi does not know are dropped by go-landlock (RODirs, RWDirs
// and RWFiles intersect with the handled set), except "refer", which must
// not be asked for below abiRefer.
func rules(abi int, p policy) []landlock.Rule {
	if p.Read != nil {
		return readRules(p.Read)
	}
	read := landlock.RODirs("/")
	if p.Network {
		// With the network on, pathname UNIX sockets (name service
		// daemons, resolvers) are reachable as well.
		read = read.WithResolveUnix()
	}
	rs := []landlock.Rule{
		read,
		landlock.RWFiles(devFiles...).IgnoreIfMissing(),
		landlock.RWDirs(devDirs...).IgnoreIfMissing(),
	}
	if len(p.Writable) > 0 {
		w := landlock.RWDirs(p.Writable...).WithResolveUnix()
		if abi >= abiRefer {
			w = w.WithRefer()
		}
		rs = append(rs, w)
	}
	return rs
}
