package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

// needABI skips the test, saying why, when this kernel's Landlock is older
// than abi.
func needABI(t *testing.T, abi int) Status {
	t.Helper()
	st := Probe()
	if st.ABI < abi {
		t.Skipf("needs Landlock ABI %d; this kernel: %s", abi, st)
	}
	return st
}

// kernelAtLeast reports whether the running kernel is Linux major.minor or
// newer.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Logf("not Linux, or no /proc: %v", err)
		return false
	}
	var maj, min int
	if _, err := fmt.Sscanf(string(release), "%d.%d", &maj, &min); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	return maj > major || maj == major && min >= minor
}

// TestProbe checks Probe against the kernel: Linux 6.7 brought Landlock ABI
// 4, so a kernel that new without it has Landlock switched off, and the
// shell tool would refuse to run by default.
func TestProbe(t *testing.T) {
	st := Probe()
	t.Logf("Probe: %s", st)
	if st != Probe() {
		t.Errorf("Probe changed between calls")
	}
	if !kernelAtLeast(t, 6, 7) {
		t.Logf("kernel older than 6.7: Landlock network rules not expected, not asserted")
		return
	}
	if !st.Available() || !st.FS || !st.Network {
		t.Fatalf("Probe()=%+v on Linux 6.7 or later, want ABI >= 4 with FS and Network (is Landlock enabled in lsm=?)", st)
	}
}

func TestStatusFor(t *testing.T) {
	tests := []struct {
		name       string
		abi        int
		err        error
		want       Status
		wantString string
	}{
		{"no syscall", -1, syscall.ENOSYS, Status{}, "Landlock unavailable: the kernel does not support Landlock"},
		{"disabled at boot", -1, syscall.EOPNOTSUPP, Status{}, "Landlock unavailable: the kernel has Landlock but it was not enabled at boot"},
		{"abi 1", 1, nil, Status{ABI: 1, FS: true}, "Landlock ABI 1: restricts file writes; cannot restrict TCP (needs ABI 4), UDP (needs ABI 10), signals and abstract UNIX sockets (needs ABI 6)"},
		{"abi 4", 4, nil, Status{ABI: 4, FS: true, Network: true}, "Landlock ABI 4: restricts file writes, TCP; cannot restrict UDP (needs ABI 10), signals"},
		{"abi 7", 7, nil, Status{ABI: 7, FS: true, Network: true, IPC: true}, "Landlock ABI 7: restricts file writes, TCP, signals and abstract UNIX sockets; cannot restrict UDP (needs ABI 10)"},
		{"abi 10", 10, nil, Status{ABI: 10, FS: true, Network: true, UDP: true, IPC: true}, "Landlock ABI 10: restricts file writes, TCP, UDP, signals and abstract UNIX sockets"},
		{"newer than go-landlock", 99, nil, Status{ABI: len(presets) - 1, FS: true, Network: true, UDP: true, IPC: true}, fmt.Sprintf("Landlock ABI %d:", len(presets)-1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := statusFor(tt.abi, tt.err)
			got.Reason = "" // checked through String
			if got != tt.want {
				t.Errorf("statusFor=%+v, want %+v", got, tt.want)
			}
			if s := statusFor(tt.abi, tt.err).String(); !strings.HasPrefix(s, tt.wantString) {
				t.Errorf("String()=%q, want it to start with %q", s, tt.wantString)
			}
		})
	}
}

func TestWrap(t *testing.T) {
	needABI(t, 1)
	args, env, err := Wrap(Spec{
		Args:     []string{"sh", "-c", "true"},
		Env:      []string{"PATH=/bin", SpecEnv + "=forged"},
		Writable: []string{"/ws"},
		Network:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(args, " "), helperPath()+" "+HelperArg+" sh -c true"; got != want {
		t.Errorf("args=%q, want %q", got, want)
	}
	if got, want := strings.Join(env, " "), `PATH=/bin `+SpecEnv+`={"writable":["/ws"],"network":true}`; got != want {
		t.Errorf("env=%q, want %q", got, want)
	}
}

// TestWrapStartsTheHelperBinary: with a helper binary in use, Wrap starts
// it, not the node's own binary (a whole node's start for each command it
// wraps), and the command is confined as before.
func TestWrapStartsTheHelperBinary(t *testing.T) {
	needABI(t, 1)
	newBox(t, Config{}).Close() // finds the helper binary, or builds it
	deadline := time.Now().Add(3 * time.Minute)
	for helperBin.Load() == nil {
		if time.Now().After(deadline) {
			t.Skipf("no helper binary after 3 minutes: %s", Helper())
		}
		time.Sleep(100 * time.Millisecond)
	}
	dir, other := t.TempDir(), t.TempDir()
	args, env, err := Wrap(Spec{
		Args:     []string{"sh", "-c", `echo in > "$1/f"; echo out > "$2/f" || echo refused`, "sh", dir, other},
		Env:      []string{"PATH=/usr/bin:/bin"},
		Writable: []string{dir},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := helperBin.Load().path; args[0] != want {
		t.Fatalf("Wrap starts %s, want the helper binary %s (%s)", args[0], want, Helper())
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused") {
		t.Fatalf("the wrapped command: %v: %s; want it run, its write outside %s refused", err, out, dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "in\n" {
		t.Fatalf("its write inside: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(other, "f")); err == nil {
		t.Fatal("its write outside landed")
	}
}

// TestStartConfined: a command StartConfined starts reads what its policy
// lets it and nothing else, and the process that started it is not
// confined: after many starts, reads on every thread of the test process
// still reach the file the commands could not.
func TestStartConfined(t *testing.T) {
	needABI(t, 1)
	dir, other := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(dir, "in"), []byte("in\n"), 0o644)
	secret := filepath.Join(other, "secret")
	os.WriteFile(secret, []byte("SECRET\n"), 0o644)
	spec := Spec{Read: []string{dir, "/bin", "/usr/bin"}}
	for i := range 40 {
		cmd := exec.Command("sh", "-c", `cat "$1/in"; cat "$2" 2>/dev/null || echo refused`, "sh", dir, secret)
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := StartConfined(cmd, spec); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil || out.String() != "in\nrefused\n" {
			t.Fatalf("start %d: %q, %v; want its own file read, the other refused", i+1, out.String(), err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for range 400 {
		wg.Go(func() {
			if _, err := os.ReadFile(secret); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a read in the test process after the confined starts: %v", err)
	}
	if err := StartConfined(exec.Command("true"), Spec{Writable: []string{"relative"}}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("a relative writable directory: %v, want ErrInvalidSpec", err)
	}
}

func TestWrapErrors(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		wantErr error
	}{
		{"no args", Spec{}, ErrInvalidSpec},
		{"empty program", Spec{Args: []string{""}}, ErrInvalidSpec},
		{"relative writable", Spec{Args: []string{"true"}, Writable: []string{"ws"}}, ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Wrap(tt.spec); !errors.Is(err, tt.wantErr) {
				t.Errorf("err=%v, want %v", err, tt.wantErr)
			}
		})
	}
	t.Run("main not called", func(t *testing.T) {
		mainCalled.Store(false)
		defer mainCalled.Store(true)
		if _, err := Command(context.Background(), Spec{Args: []string{"true"}}); !errors.Is(err, ErrNoHelper) {
			t.Errorf("err=%v, want ErrNoHelper", err)
		}
	})
}

// run runs argv in the sandbox described by writable and network, in dir,
// and returns its combined output and exit code.
func run(t *testing.T, dir string, writable []string, network bool, argv ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, err := Command(ctx, Spec{
		Args:     argv,
		Env:      []string{"PATH=" + os.Getenv("PATH"), "LANG=C"},
		Writable: writable,
		Network:  network,
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %q: %v", argv, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// sh runs script with /bin/sh in the sandbox, with args as $1...
func sh(t *testing.T, dir string, writable []string, network bool, script string, args ...string) (string, int) {
	t.Helper()
	return run(t, dir, writable, network, append([]string{"/bin/sh", "-c", script, "sh"}, args...)...)
}

func TestFilesystem(t *testing.T) {
	needABI(t, 1)
	ws, tmp, outside := t.TempDir(), t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim.txt")
	if err := os.WriteFile(victim, []byte("intact\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writable := []string{ws, tmp}
	tests := []struct {
		name, script string
		args         []string
		wantFail     bool
		wantOut      string // the whole output, or a part of a failure's
	}{
		{"write in the workspace", "echo hi > in.txt && cat in.txt", nil, false, "hi\n"},
		{"write in the temp dir", `echo t > "$1/t.txt" && cat "$1/t.txt"`, []string{tmp}, false, "t\n"},
		{"mkdir, rename across directories, symlink, remove", "mkdir -p a b && echo x > a/f && mv a/f b/f && ln -s b/f l && cat l && rm -r a b l && echo gone", nil, false, "x\ngone\n"},
		{"rename into the temp dir", `echo m > m.txt && mv m.txt "$1/" && cat "$1/m.txt"`, []string{tmp}, false, "m\n"},
		{"devices and inherited pipes", "echo a > /dev/null; echo b > /dev/stderr; echo c >&2; head -c 3 /dev/zero | wc -c", nil, false, "b\nc\n3\n"},
		{"read outside", `cat "$1"`, []string{victim}, false, "intact\n"},
		{"create outside", `echo x > "$1/new.txt"`, []string{outside}, true, "Permission denied"},
		{"overwrite outside", `echo pwned > "$1"`, []string{victim}, true, "Permission denied"},
		{"remove outside", `rm -f "$1"`, []string{victim}, true, "Permission denied"},
		{"mkdir outside", `mkdir "$1/d"`, []string{outside}, true, "Permission denied"},
		{"move out of the workspace", `echo s > s.txt && mv s.txt "$1/"`, []string{outside}, true, "Permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := sh(t, ws, writable, false, tt.script, tt.args...)
			if failed := code != 0; failed != tt.wantFail {
				t.Errorf("exit code=%d (output %q), want failure %v", code, out, tt.wantFail)
			}
			if !tt.wantFail && out != tt.wantOut || tt.wantFail && !strings.Contains(out, tt.wantOut) {
				t.Errorf("output=%q, want %q", out, tt.wantOut)
			}
		})
	}
	if got, err := os.ReadFile(victim); err != nil || string(got) != "intact\n" {
		t.Errorf("victim.txt=%q, %v; want it untouched", got, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("outside holds %d entries, want only victim.txt", len(entries))
	}
}

// listen accepts connections on a loopback port until the test ends and
// returns the port.
func listen(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestNetwork(t *testing.T) {
	needABI(t, abiNetwork)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found: the test connects with its /dev/tcp")
	}
	// bash opens /dev/tcp itself, with a plain TCP connect(2).
	connect := "exec 3<>/dev/tcp/127.0.0.1/" + strconv.Itoa(listen(t)) + " && echo connected"
	ws := t.TempDir()
	out, code := run(t, ws, []string{ws}, false, bash, "-c", connect)
	if code == 0 || !strings.Contains(out, "Permission denied") {
		t.Errorf("network off: exit code %d, output %q; want the connect refused with Permission denied", code, out)
	}
	out, code = run(t, ws, []string{ws}, true, bash, "-c", connect)
	if code != 0 || out != "connected\n" {
		t.Errorf("network on: exit code %d, output %q; want connected", code, out)
	}
}

// TestSignals checks that a sandboxed command cannot signal a process outside
// the sandbox (this test process stands for the node), but can signal its own.
func TestSignals(t *testing.T) {
	needABI(t, abiScoped)
	ws := t.TempDir()
	out, code := sh(t, ws, []string{ws}, true, `kill -0 "$1"`, strconv.Itoa(os.Getpid()))
	if code == 0 {
		t.Errorf("kill -0 of the test process: exit code 0, output %q; want it refused", out)
	}
	out, code = sh(t, ws, []string{ws}, true, `sleep 30 & kill $! && wait $!; echo "status $?"`)
	if code != 0 || !strings.HasSuffix(out, "status 143\n") {
		t.Errorf("kill of its own child: exit code %d, output %q; want status 143", code, out)
	}
}

// TestHelperFailures checks that a helper that cannot confine or start the
// command exits with ExitSetupFailed and says why, and runs nothing.
func TestHelperFailures(t *testing.T) {
	needABI(t, 1)
	ws := t.TempDir()
	marker := filepath.Join(ws, "ran")
	tests := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"no spec", []string{HelperArg, "/bin/sh", "-c", "touch " + marker}, nil, "without " + SpecEnv},
		{"bad spec", []string{HelperArg, "/bin/sh", "-c", "touch " + marker}, []string{SpecEnv + `={"writable": 3}`}, "decode " + SpecEnv},
		{"unknown field", []string{HelperArg, "/bin/sh", "-c", "touch " + marker}, []string{SpecEnv + `={"writeable": []}`}, "unknown field"},
		{"no command", []string{HelperArg}, []string{SpecEnv + `={}`}, "no command to run"},
		{"missing program", []string{HelperArg, "/nonexistent/prog"}, []string{SpecEnv + `={}`}, "find /nonexistent/prog"},
		{"missing writable dir", []string{HelperArg, "/bin/sh", "-c", "touch " + marker}, []string{SpecEnv + `={"writable": ["/nonexistent/dir"]}`}, "enable Landlock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(selfExe, tt.args...)
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != ExitSetupFailed {
				t.Errorf("exit code=%d (err %v), want %d", code, err, ExitSetupFailed)
			}
			if got := stderr.String(); !strings.HasPrefix(got, ErrorPrefix) || !strings.Contains(got, tt.want) {
				t.Errorf("stderr=%q, want %q... containing %q", got, ErrorPrefix, tt.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the command ran")
			}
		})
	}
}

// TestSpecEnvRemoved checks that the command does not see the policy.
func TestSpecEnvRemoved(t *testing.T) {
	needABI(t, 1)
	ws := t.TempDir()
	out, code := sh(t, ws, []string{ws}, false, `echo "[${`+SpecEnv+`-unset}]"`)
	if code != 0 || out != "[unset]\n" {
		t.Errorf("exit code %d, output %q; want [unset]", code, out)
	}
}
