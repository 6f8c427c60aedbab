package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The spawner starts the helpers of prepared sandboxes for the node
// (docs/security.md "Prepared sandboxes"). A process in a new user
// namespace cannot be started with vfork (its parent writes its uid map
// while it waits), so whoever starts a helper is forked whole: its page
// tables copied, and each page it writes afterwards faulting once to be
// writable again. The node's address space is large and busy; the
// spawner's, a small process of the helper's binary started once, is not.
// It starts each helper exactly as the node would (helperSys), answers with
// its pid and a pidfd, and reports its exit status when it ends. It dies
// with the node, and its helpers with it.

// SpawnerArg, as a process's first argument, makes Main act as the
// spawner.
const SpawnerArg = "__callsheet_sandbox_spawner__"

// fdSpawner is the spawner's socket to the node.
const fdSpawner = 3

// spawnTimeout bounds the wait for the spawner's answer (a variable for
// tests).
var spawnTimeout = prepareTimeout

// spawnRequest asks the spawner to start a helper: its arguments and
// environment, and what helperSys needs. The node sends it with three
// descriptors: the helper's control socket and status pipe, and the program
// (opened by the node, so that the spawner starts whichever helper binary
// the node would).
type spawnRequest struct {
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	UID     int      `json:"uid"`
	GID     int      `json:"gid"`
	Network bool     `json:"network"` // a network namespace of its own
	Root    bool     `json:"root"`
}

// decodeSpawn decodes a spawn request: strictly, with arguments to start
// the helper with and ids that are not negative.
func decodeSpawn(raw []byte) (spawnRequest, error) {
	var req spawnRequest
	if err := decodeStrict(raw, &req); err != nil {
		return req, fmt.Errorf("a malformed request: %w", err)
	}
	if len(req.Args) == 0 || req.UID < 0 || req.GID < 0 {
		return req, fmt.Errorf("a request without arguments, or with a negative id (uid %d, gid %d)", req.UID, req.GID)
	}
	return req, nil
}

// spawnNotice is what the spawner sends: the answer to a request (Pid, or
// Err; a pidfd comes with a Pid), or that a helper it started ended (Exit,
// its pid, and Status, its wait status).
type spawnNotice struct {
	Pid    int    `json:"pid,omitempty"`
	Err    string `json:"err,omitempty"`
	Exit   int    `json:"exit,omitempty"`
	Status uint32 `json:"status,omitempty"`
}

// spawnerMain is the spawner: it serves requests from fdSpawner until the
// node closes it, then exits (its helpers die with it: their parent-death
// signal follows its main thread, which starts them all).
func spawnerMain(args []string) {
	if len(args) != 1 || args[0] != protocolID() {
		fmt.Fprintf(os.Stderr, "%sthe spawner speaks protocol %s, the node %q\n", ErrorPrefix, protocolID(), args)
		os.Exit(ExitSetupFailed)
	}
	runtime.LockOSThread() // never unlocked: helpers die when this thread does
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s%v\n", ErrorPrefix, err)
		os.Exit(ExitSetupFailed)
	}
	var sendMu sync.Mutex
	send := func(n spawnNotice, fds []int) {
		b, _ := json.Marshal(n)
		sendMu.Lock()
		defer sendMu.Unlock()
		if err := sendFrame(fdSpawner, b, fds); err != nil {
			os.Exit(0) // the node is gone
		}
	}
	for {
		raw, fds, err := recvFrame(fdSpawner, 3)
		if err != nil {
			os.Exit(0) // the node closed the socket, or is gone
		}
		req, err := decodeSpawn(raw)
		if err == nil && len(fds) != 3 {
			err = fmt.Errorf("%d descriptors came with the request, want 3", len(fds))
		}
		if err != nil {
			closeAll(fds)
			send(spawnNotice{Err: err.Error()}, nil)
			continue
		}
		// The reply goes out before the goroutine that reports the
		// helper's exit starts: the node always hears of a pid first.
		sendMu.Lock()
		pid, err := syscall.ForkExec(fmt.Sprintf("/proc/self/fd/%d", fds[2]), req.Args, &syscall.ProcAttr{
			Dir:   "/",
			Env:   req.Env,
			Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), uintptr(fds[0]), uintptr(fds[1])},
			Sys:   helperSys(&syscall.SysProcAttr{Setpgid: true}, req.UID, req.GID, req.Network, req.Root),
		})
		closeAll(fds)
		var reply []byte
		var pidfd int = -1
		if err == nil {
			pidfd, err = unix.PidfdOpen(pid, 0)
			if err != nil {
				unix.Kill(pid, unix.SIGKILL)
				err = fmt.Errorf("pidfd_open: %w", err)
			}
		}
		if err != nil {
			reply, _ = json.Marshal(spawnNotice{Err: err.Error()})
			err = sendFrame(fdSpawner, reply, nil)
		} else {
			reply, _ = json.Marshal(spawnNotice{Pid: pid})
			err = sendFrame(fdSpawner, reply, []int{pidfd})
			unix.Close(pidfd)
		}
		sendMu.Unlock()
		if err != nil {
			os.Exit(0)
		}
		if pid > 0 {
			go func() {
				var ws unix.WaitStatus
				for {
					_, err := unix.Wait4(pid, &ws, 0, nil)
					if !errors.Is(err, unix.EINTR) {
						break
					}
				}
				send(spawnNotice{Exit: pid, Status: uint32(ws)}, nil)
			}()
		}
	}
}

// spawner is the node's end of a spawner process. Safe for concurrent use.
type spawner struct {
	cmd  *exec.Cmd
	conn int

	reqMu   sync.Mutex       // one request at a time
	replies chan spawnReply  // the reader hands answers over
	mu      sync.Mutex       // guards what follows
	live    map[int]*spawned // by pid, until their exit is reported
	dead    error            // why the spawner is gone, once it is
	quit    chan struct{}    // closed by close: the thread that started it ends
	done    chan struct{}    // closed when the reader ends
}

// spawnReply is an answer with its pidfd.
type spawnReply struct {
	n     spawnNotice
	pidfd int
}

// startSpawner starts the spawner from path, from a goroutine of its own
// locked to its thread until close: the spawner's parent-death signal
// follows that thread.
func startSpawner(path string) (*spawner, error) {
	node, child, err := controlPair()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, SpawnerArg, protocolID())
	cmd.Env = helperEnv
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	sp := &spawner{cmd: cmd, conn: node, replies: make(chan spawnReply), live: map[int]*spawned{},
		quit: make(chan struct{}), done: make(chan struct{})}
	started := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the spawner
		err := cmd.Start()
		started <- err
		if err == nil {
			<-sp.quit
		}
	}()
	err = <-started
	child.Close()
	if err != nil {
		unix.Close(node)
		return nil, fmt.Errorf("%w: start the spawner: %v", ErrSetup, err)
	}
	go sp.read()
	return sp, nil
}

// read takes the spawner's notices until it is gone: answers go to the
// request waiting for one, exits to the helper they name. It owns conn
// (closes it) and ends when the spawner does (close, or its death).
func (sp *spawner) read() {
	defer close(sp.done)
	var err error
	for {
		var raw []byte
		var fds []int
		raw, fds, err = recvFrame(sp.conn, 1)
		if err != nil {
			break
		}
		var n spawnNotice
		if err = json.Unmarshal(raw, &n); err != nil {
			closeAll(fds)
			break
		}
		if n.Exit != 0 {
			closeAll(fds)
			sp.mu.Lock()
			h := sp.live[n.Exit]
			delete(sp.live, n.Exit)
			sp.mu.Unlock()
			if h != nil {
				h.exited(unix.WaitStatus(n.Status))
			}
			continue
		}
		r := spawnReply{n: n, pidfd: -1}
		if len(fds) == 1 {
			r.pidfd = fds[0]
		} else {
			closeAll(fds)
		}
		sp.replies <- r
	}
	unix.Close(sp.conn)
	sp.cmd.Wait()
	sp.mu.Lock()
	sp.dead = fmt.Errorf("%w: the spawner ended: %v", ErrSetup, err)
	live := sp.live
	sp.live = nil
	sp.mu.Unlock()
	// Its helpers die with it (their parent-death signal): each is
	// reported once it is gone.
	for _, h := range live {
		h.gone()
	}
}

// spawn starts the program at path as req says, with the control socket
// ctl and the status pipe status as its descriptors 3 and 4.
func (sp *spawner) spawn(path string, req spawnRequest, ctl, status *os.File) (*spawned, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	exe, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open the helper %s: %v", ErrSetup, path, err)
	}
	defer unix.Close(exe)
	sp.reqMu.Lock()
	defer sp.reqMu.Unlock()
	if err := sp.gone(); err != nil {
		return nil, err
	}
	if err := sendFrame(sp.conn, raw, []int{int(ctl.Fd()), int(status.Fd()), exe}); err != nil {
		return nil, fmt.Errorf("%w: ask the spawner: %v", ErrSetup, err)
	}
	var r spawnReply
	timeout := time.NewTimer(spawnTimeout)
	defer timeout.Stop()
	select {
	case r = <-sp.replies:
	case <-sp.done:
		return nil, sp.gone()
	case <-timeout.C:
		// A spawner that does not answer is ended, so that no late answer
		// is taken for the next request's; the node starts helpers itself.
		sp.cmd.Process.Kill()
		<-sp.done
		return nil, fmt.Errorf("%w: the spawner did not answer in %s", ErrSetup, spawnTimeout)
	}
	if r.n.Err != "" || r.n.Pid <= 0 || r.pidfd < 0 {
		if r.pidfd >= 0 {
			unix.Close(r.pidfd)
		}
		return nil, fmt.Errorf("%w: start a sandbox's helper: %s", ErrSetup, r.n.Err)
	}
	h := &spawned{pid: r.n.Pid, pidfd: r.pidfd, done: make(chan struct{})}
	sp.mu.Lock()
	if sp.live == nil {
		sp.mu.Unlock()
		h.gone()
		return h, nil
	}
	sp.live[h.pid] = h
	sp.mu.Unlock()
	return h, nil
}

// gone returns why the spawner is gone, or nil.
func (sp *spawner) gone() error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.dead
}

// close ends the spawner (and so every helper it started that still runs)
// and waits for it.
func (sp *spawner) close() {
	if sp == nil {
		return
	}
	unix.Shutdown(sp.conn, unix.SHUT_RDWR)
	close(sp.quit)
	<-sp.done
}

// spawned is a helper the spawner started: not the node's child, so it is
// signalled through its pidfd and its end is what the spawner reports.
type spawned struct {
	pid   int
	pidfd int

	mu     sync.Mutex // guards pidfd: Kill uses it, exited closes it
	done   chan struct{}
	status unix.WaitStatus
}

func (h *spawned) exited(ws unix.WaitStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pidfd < 0 {
		return
	}
	h.status = ws
	unix.Close(h.pidfd)
	h.pidfd = -1
	close(h.done)
}

// gone waits until the helper has ended, its spawner gone (it cannot be
// waited for), and reports it killed.
func (h *spawned) gone() {
	h.mu.Lock()
	fd := h.pidfd
	h.mu.Unlock()
	if fd >= 0 {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
				break
			}
		}
	}
	h.exited(unix.WaitStatus(syscall.SIGKILL))
}

// Pid is the helper's pid.
func (h *spawned) Pid() int { return h.pid }

// Kill sends the helper SIGKILL; os.ErrProcessDone once it ended.
func (h *spawned) Kill() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pidfd < 0 {
		return os.ErrProcessDone
	}
	err := unix.PidfdSendSignal(h.pidfd, unix.SIGKILL, nil, 0)
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EBADF) {
		return os.ErrProcessDone
	}
	return err
}

// Wait waits for the helper's end and returns it as exitOf would.
func (h *spawned) Wait() (code int, exited bool, err error) {
	<-h.done
	ws := h.status
	switch {
	case ws.Exited():
		return ws.ExitStatus(), true, nil
	case ws.Signaled():
		return 128 + int(ws.Signal()), false, nil
	}
	return -1, false, nil
}
