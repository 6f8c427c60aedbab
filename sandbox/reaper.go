package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ReaperArg, as a process's first argument, makes Main act as the reaper.
const ReaperArg = "__callsheet_reaper__"

// Reaper is a small process of this binary that kills the process groups
// the node hands it once their time is up, even when the node cannot: the
// node stopped (SIGSTOP, a frozen VM) or died (kill -9). A call holding a
// slot of a fleet-wide cap lets the slot lapse with the node's renewals of
// it, not at the call's deadline, only because the reaper ends the call's
// processes before the slot lapses (cluster.Slot.Bind).
//
// The node writes to the reaper's standard input, one line per change:
// "<pgid> <unix nanoseconds>" to kill group pgid at that moment unless moved
// again, "<pgid> 0" to forget it (the group ended). When its input ends
// (the node closed it, or died) the reaper kills every group it still holds
// and exits. It has no parent-death signal, so it outlives a node killed
// with SIGKILL long enough to do that, and a process group of its own, so a
// terminal's signals to the node's group do not reach it.
//
// Safe for concurrent use.
type Reaper struct {
	cmd *exec.Cmd

	mu   sync.Mutex
	w    *os.File
	err  error // why the reaper can hold nothing more
	done chan struct{}
}

// StartReaper starts the reaper from this binary (Main must dispatch it:
// every binary that imports this package does, from its init).
func StartReaper() (*Reaper, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: reaper pipe: %w", err)
	}
	cmd := exec.Command(selfExe, ReaperArg)
	cmd.Env = helperEnv
	cmd.Dir = "/"
	cmd.Stdin = r
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sandbox: start the reaper: %w", err)
	}
	r.Close()
	rp := &Reaper{cmd: cmd, w: w, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		rp.mu.Lock()
		if rp.err == nil {
			rp.err = fmt.Errorf("sandbox: the reaper ended: %v", err)
		}
		rp.mu.Unlock()
		close(rp.done)
	}()
	return rp, nil
}

// Hold has the reaper kill process group pgid at until, unless a later Hold
// moves it (earlier or later) or Release forgets it. An error means the
// reaper holds nothing new: the caller must not count on it.
func (rp *Reaper) Hold(pgid int, until time.Time) error {
	if pgid <= 1 {
		return fmt.Errorf("sandbox: reaper: process group %d: not a group the reaper may kill", pgid)
	}
	return rp.send(pgid, max(until.UnixNano(), 1))
}

// Release has the reaper forget process group pgid; call it once the group
// ended, so that the reaper never kills a group whose id was reused.
func (rp *Reaper) Release(pgid int) {
	if pgid > 1 {
		_ = rp.send(pgid, 0)
	}
}

func (rp *Reaper) send(pgid int, at int64) error {
	line := strconv.AppendInt(nil, int64(pgid), 10)
	line = append(line, ' ')
	line = strconv.AppendInt(line, at, 10)
	line = append(line, '\n')
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.err != nil {
		return rp.err
	}
	// A line is shorter than PIPE_BUF: one write, never interleaved.
	if _, err := rp.w.Write(line); err != nil {
		rp.err = fmt.Errorf("sandbox: the reaper: %w", err)
		return rp.err
	}
	return nil
}

// Close ends the reaper: it kills the groups it still holds, and exits.
func (rp *Reaper) Close() error {
	rp.mu.Lock()
	if rp.err == nil {
		rp.err = errors.New("sandbox: the reaper is closed")
	}
	rp.w.Close()
	rp.mu.Unlock()
	<-rp.done
	return nil
}

// parseReaperLine reads one line of the reaper's input (without its
// newline): a process group above 1 and a time in Unix nanoseconds, 0 to
// forget the group.
func parseReaperLine(line []byte) (pgid int, at int64, err error) {
	group, when, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return 0, 0, fmt.Errorf("reaper: line %q: want \"<pgid> <unix nanoseconds>\"", line)
	}
	g, err := strconv.ParseInt(string(group), 10, 32)
	if err != nil || g <= 1 {
		return 0, 0, fmt.Errorf("reaper: line %q: process group %q: want an integer above 1", line, group)
	}
	at, err = strconv.ParseInt(string(when), 10, 64)
	if err != nil || at < 0 {
		return 0, 0, fmt.Errorf("reaper: line %q: time %q: want Unix nanoseconds, 0 to forget", line, when)
	}
	return int(g), at, nil
}

// reaperMain is the reaper: it never returns.
func reaperMain() {
	lines := make(chan []byte)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(lines)
	}()
	held := map[int]int64{}
	kill := func(pgid int) {
		// A group that ended already is ESRCH: nothing to do.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		delete(held, pgid)
	}
	timer := time.NewTimer(time.Hour)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				for pgid := range held {
					kill(pgid)
				}
				os.Exit(0)
			}
			pgid, at, err := parseReaperLine(line)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s%v\n", ErrorPrefix, err)
				continue
			}
			if at == 0 {
				delete(held, pgid)
			} else {
				held[pgid] = at
			}
		case <-timer.C:
		}
		now := time.Now().UnixNano()
		next := int64(0)
		for pgid, at := range held {
			if at <= now {
				kill(pgid)
			} else if next == 0 || at < next {
				next = at
			}
		}
		if next != 0 {
			timer.Reset(time.Duration(next - now))
		} else {
			timer.Reset(time.Hour)
		}
	}
}
