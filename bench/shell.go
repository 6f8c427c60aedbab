package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/sandbox"
)

// shellRig is a node whose worker calls are one `shell` call of `true`:
// in the sandbox, or with shell.sandbox "off" for the floor.
type shellRig struct{ *nodeRig }

// startShellNode starts a node (interval durability, so the log weighs
// less against what the sandbox costs) with the sandbox on or off.
func startShellNode(ctx context.Context, sandboxed bool) (*shellRig, error) {
	r, err := startNode(ctx, config.DurabilityInterval, func(o *node.Options) {
		cfg := *o.Config
		if !sandboxed {
			cfg.Shell.Sandbox = config.SandboxOff
		}
		o.Config = &cfg
	})
	if err != nil {
		return nil, err
	}
	if sandboxed {
		if err := r.n.Sandbox().Ready(); err != nil {
			r.close()
			return nil, skip("the sandbox cannot run commands here: %v", err)
		}
	}
	return &shellRig{r}, nil
}

// call runs one shell call of `true` on worker w's session.
func (r *shellRig) call(ctx context.Context, w int) error {
	spec := []events.CallSpec{{ID: "c1", Name: "shell", Arguments: json.RawMessage(`{"command":"true"}`)}}
	t, err := r.n.SubmitTurn(ctx, tenant, r.sessions[w], "", spec, true)
	if err != nil {
		return err
	}
	if len(t.Results) != 1 || t.Results[0].Outcome != events.OutcomeOK {
		return fmt.Errorf("shell turn %s: %+v", t.Turn, t.Results)
	}
	return nil
}

// shellBlock is how many calls of one kind run in a row when kinds are
// interleaved: what one kind leaves running in the background (a sandbox
// being prepared, one being torn down) falls on its own next calls, not
// on another kind's, but for the first of a block.
const shellBlock = 20

// shellPace is the pause after each call of the paced shell rows: far
// shorter than a model's turn between two tool calls, long enough for the
// sandbox a call used to be replaced by a prepared one before the next.
const shellPace = 25 * time.Millisecond

// inBlocks calls block(k, m) for each of kinds in turn, m runs at a time
// (shellBlock, fewer at the end), until each kind had n runs.
func inBlocks(n, kinds int, block func(k, m int) error) error {
	for done := 0; done < n; done += shellBlock {
		for k := range kinds {
			if err := block(k, min(shellBlock, n-done)); err != nil {
				return err
			}
		}
	}
	return nil
}

// interleave times n runs of each fn, in blocks of shellBlock taking turns,
// after warmCalls untimed runs of each, and returns each one's sorted
// latencies: the kinds share whatever load the machine had. With a pace,
// each run is followed by an untimed pause that long.
func interleave(ctx context.Context, n int, pace time.Duration, fns ...func() error) ([][]time.Duration, error) {
	for _, fn := range fns {
		for range warmCalls {
			if err := fn(); err != nil {
				return nil, err
			}
		}
	}
	lat := make([][]time.Duration, len(fns))
	err := inBlocks(n, len(fns), func(k, m int) error {
		for range m {
			if err := ctx.Err(); err != nil {
				return err
			}
			start := time.Now()
			if err := fns[k](); err != nil {
				return err
			}
			lat[k] = append(lat[k], time.Since(start))
			if pace > 0 {
				time.Sleep(pace)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, l := range lat {
		slices.Sort(l)
	}
	return lat, nil
}

// machineBusy returns the machine's busy CPU time so far: every CPU's user,
// nice, system, irq and softirq time in /proc/stat (not idle, I/O wait,
// steal, nor guest, which user already holds), so every process and kernel
// thread counts (a sandboxed call's CPU is spread over the node, the
// spawner, the sandbox's first process, the command and the kernel's workers
// that tear namespaces down).
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user, nice, system, irq, softirq
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %v", line, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil // USER_HZ is 100 on Linux
}

// busySettle is the pause after each block of busyPerRun, before the
// machine's busy time is read.
const busySettle = 100 * time.Millisecond

// busyPerRun runs each fn n times back to back, in blocks of shellBlock
// taking turns, and returns the machine's busy CPU time per run of each
// (sampled by the kernel's tick: read as a mean over many runs).
func busyPerRun(ctx context.Context, n int, fns ...func() error) ([]time.Duration, error) {
	total := make([]time.Duration, len(fns))
	err := inBlocks(n, len(fns), func(k, m int) error {
		start, err := machineBusy()
		if err != nil {
			return err
		}
		for range m {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fns[k](); err != nil {
				return err
			}
		}
		// The kernel tears namespaces down in its workers after the
		// processes ended: this block's teardown is counted with it, not
		// with the next.
		time.Sleep(busySettle)
		end, err := machineBusy()
		total[k] += end - start
		return err
	})
	if err != nil {
		return nil, err
	}
	for k := range total {
		total[k] /= time.Duration(n)
	}
	return total, nil
}

// benchShell times one-call turns of `shell true` over the node in the
// sandbox against the same calls with the sandbox off, interleaved in the
// same run: the ratio is what the sandbox adds to a shell call.
func benchShell(ctx context.Context, s *suite) ([]sample, error) {
	n := max(s.cfg.Calls/5, 20) // a shell call is a process or two: fewer calls
	off, err := startShellNode(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("sandbox off: %w", err)
	}
	defer off.close()
	on, err := startShellNode(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("sandbox on: %w", err)
	}
	defer on.close()
	for _, r := range []*shellRig{off, on} {
		if err := r.prepare(ctx, 1); err != nil {
			return nil, err
		}
	}
	offCall, onCall := func() error { return off.call(ctx, 0) }, func() error { return on.call(ctx, 0) }
	lat, err := interleave(ctx, n, 0, offCall, onCall)
	if err != nil {
		return nil, err
	}
	paced, err := interleave(ctx, n, shellPace, offCall, onCall)
	if err != nil {
		return nil, err
	}
	busy, err := busyPerRun(ctx, n, offCall, onCall)
	if err != nil {
		return nil, err
	}
	cond := fmt.Sprintf("interval, 1 session, one 1-call turn of shell {\"command\":\"true\"} at a time, %d calls, in blocks of %d taking turns with the floor; floor: the same with shell.sandbox \"off\" (bash in a process group, no namespaces); sandboxes started by %s", n, shellBlock, sandbox.Helper())
	closed := "; back to back: each call's sandbox is prepared while the calls before it run"
	pacedCond := fmt.Sprintf("; a pause of %s after each call (untimed), as a model's turn leaves between tool calls: each call finds a prepared sandbox", shellPace)
	return []sample{
		{name: "latency/shell/p50", value: us(percentile(lat[1], 50)), unit: "µs", better: Lower, floor: us(percentile(lat[0], 50)), conditions: cond + closed},
		{name: "latency/shell/p99", value: us(percentile(lat[1], 99)), unit: "µs", better: Lower, floor: us(percentile(lat[0], 99)), conditions: cond + closed},
		{name: "latency/shell/paced/p50", value: us(percentile(paced[1], 50)), unit: "µs", better: Lower, floor: us(percentile(paced[0], 50)), conditions: cond + pacedCond},
		{name: "latency/shell/paced/p99", value: us(percentile(paced[1], 99)), unit: "µs", better: Lower, floor: us(percentile(paced[0], 99)), conditions: cond + pacedCond},
		{name: "cpu/shell/per-call", value: us(busy[1]), unit: "µs", better: Lower, floor: us(busy[0]), conditions: cond + closed + "; value: the machine's busy CPU time per call (/proc/stat: every process and kernel thread), back to back, untimed runs after the others"},
	}, nil
}

// bwrapArgs is a bubblewrap command line giving /bin/true what our sandbox
// gives a command: every namespace unshared, the system directories
// read-only (symbolic links kept), /dev, /proc, a private /tmp and the
// workspace ws writable, dying with its parent.
func bwrapArgs(bwrap, ws string) []string {
	args := []string{bwrap, "--unshare-all", "--die-with-parent", "--new-session"}
	for _, d := range []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt"} {
		p := "/" + d
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			args = append(args, "--symlink", target, p)
		default:
			args = append(args, "--ro-bind", p, p)
		}
	}
	return append(args, "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--bind", ws, ws, "--chdir", ws, "/bin/true")
}

// benchSandbox times /bin/true started four ways, interleaved in the same
// run: plainly (fork and exec), in bubblewrap with every namespace
// unshared, in our sandbox as Start gives it (a sandbox prepared ahead),
// and in one set up for the call (Attach). The sandbox's rows have
// bubblewrap's p50 as their floor: a ratio below 1 is faster than
// bubblewrap.
func benchSandbox(ctx context.Context, s *suite) ([]sample, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, skip("bubblewrap is not installed (scripts/ensure-bwrap installs Debian's bubblewrap)")
	}
	dir, err := os.MkdirTemp("", "csbench-sandbox-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	box, err := sandbox.New(sandbox.Config{Tenants: []string{tenant}, RunDir: filepath.Join(dir, "run"), Hidden: []string{filepath.Join(dir, "hidden")}})
	if err != nil {
		return nil, err
	}
	defer box.Close()
	if err := box.Ready(); err != nil {
		return nil, skip("the sandbox cannot run commands here: %v", err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return nil, err
	}
	uid, gid := box.Owner(tenant)
	if err := os.Chown(ws, uid, gid); err != nil {
		return nil, err
	}
	if out, err := exec.Command(bwrap, bwrapArgs(bwrap, ws)[1:]...).CombinedOutput(); err != nil {
		return nil, skip("bubblewrap cannot start /bin/true here: %v: %s", err, out)
	}
	run := sandbox.Run{Tenant: tenant, Workspace: ws}
	env := []string{"PATH=/usr/bin:/bin"}
	plain := func() error { return exec.Command("/bin/true").Run() }
	bw := func() error { return exec.Command(bwrap, bwrapArgs(bwrap, ws)[1:]...).Run() }
	started := func() error {
		p, err := box.Start(sandbox.Cmd{Args: []string{"/bin/true"}, Env: env}, run)
		if err != nil {
			return err
		}
		code, _, err := p.Wait()
		if ferr := p.Finish(); ferr != nil || err != nil || code != 0 {
			return fmt.Errorf("sandboxed /bin/true: exit %d, %v, %v", code, err, ferr)
		}
		return nil
	}
	attached := func() error {
		cmd := exec.Command("/bin/true")
		cmd.Env = env
		a, err := box.Attach(cmd, run)
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			a.Finish()
			return err
		}
		a.Started()
		werr := cmd.Wait()
		if ferr := a.Finish(); ferr != nil || werr != nil {
			return fmt.Errorf("sandboxed /bin/true: %v, %v", werr, ferr)
		}
		return nil
	}
	n := max(s.cfg.Calls/5, 20)
	lat, err := interleave(ctx, n, 0, plain, bw, started, attached)
	if err != nil {
		return nil, err
	}
	busy, err := busyPerRun(ctx, n, plain, bw, started)
	if err != nil {
		return nil, err
	}
	p50 := func(k int) float64 { return us(percentile(lat[k], 50)) }
	cond := fmt.Sprintf("/bin/true started from this process, %d times each way, in blocks of %d taking turns", n, shellBlock)
	return []sample{
		{name: "latency/sandbox/bwrap/p50", value: p50(1), unit: "µs", better: Lower, floor: p50(0),
			conditions: cond + "; bubblewrap " + "--unshare-all --die-with-parent, the system directories read-only, /dev, /proc, a tmpfs /tmp, the workspace; floor: fork and exec of /bin/true"},
		{name: "latency/sandbox/prepared/p50", value: p50(2), unit: "µs", better: Lower, floor: p50(1),
			conditions: cond + "; our sandbox (Sandbox.Start: a sandbox prepared ahead when one is ready) started by " + sandbox.Helper() + "; floor: bubblewrap's p50 (a ratio below 1 is faster than bubblewrap)"},
		{name: "latency/sandbox/attached/p50", value: p50(3), unit: "µs", better: Lower, floor: p50(1),
			conditions: cond + "; our sandbox set up for the call (Sandbox.Attach), started by " + sandbox.Helper() + "; floor: bubblewrap's p50"},
		{name: "cpu/sandbox/bwrap/per-start", value: us(busy[1]), unit: "µs", better: Lower, floor: us(busy[0]),
			conditions: cond + "; the machine's busy CPU time (/proc/stat: every process and kernel thread) per start of bubblewrap, back to back, untimed runs after the others; floor: the same for fork and exec of /bin/true"},
		{name: "cpu/sandbox/prepared/per-start", value: us(busy[2]), unit: "µs", better: Lower, floor: us(busy[1]),
			conditions: cond + "; the machine's busy CPU time per start of our sandbox (Sandbox.Start back to back: each start's replacement prepared meanwhile, its CPU counted), started by " + sandbox.Helper() + "; floor: bubblewrap's"},
	}, nil
}
