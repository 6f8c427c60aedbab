package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Sandboxes prepared ahead of need (docs/security.md "Prepared sandboxes").
// Most of a sandbox's start does not depend on the call: the namespaces,
// the tenant's uid, the run's cgroup, the view of the host's system
// directories, /dev, /proc, /tmp, the loopback. A Sandbox keeps a few
// sandboxes per tenant and network mode that have done all that and wait,
// on their control socket, for one call: its workspace, its command, its
// standard streams. Then each finishes its view (the workspace, pivot_root),
// confines itself (capabilities, Landlock, seccomp, the limits) and starts
// the command exactly as a sandbox set up for the call would, and ends with
// it. A prepared sandbox is never handed a second call; it runs nothing of
// a tenant's before its call; it holds the tenant's uid and cgroup (it
// counts in the tenant's processes, memory and, counted, sandboxes) and no
// other tenant's; its view is the one a sandbox set up for the call would
// build, which the node checks when it hands a call over (the hidden paths
// resolve as they did, the workspace lies in no directory it shows).

// DefaultPrepared is how many sandboxes a Sandbox keeps prepared for each
// tenant and network mode that ran a command in the last preparedIdle.
const DefaultPrepared = 2

// Timings of the pool.
const (
	// preparedIdle is how long a tenant's prepared sandboxes are kept
	// after its last command: then they are ended, and prepared again at
	// its next command.
	preparedIdle = time.Minute
	// prepareTimeout bounds how long preparing one sandbox may take.
	prepareTimeout = 30 * time.Second
	// handoffWait bounds how long the node waits for a prepared sandbox
	// to say it started the call it was handed; past it, the call goes on
	// in that sandbox and its deadline governs.
	handoffWait = 5 * time.Second
	// poolTick is how often the pool looks for idle tenants.
	poolTick = 10 * time.Second
	// prepareWorkers is how many sandboxes are prepared at once.
	prepareWorkers = 2
	// poolFailures is how many preparations in a row may fail before the
	// pool stops preparing; commands then run in sandboxes set up for
	// them.
	poolFailures = 3
	// replaceDelay is how long after a call took a prepared sandbox its
	// replacement starts being prepared, unless the call ended sooner
	// (Process.Wait wakes the pool): preparing takes more CPU than a short
	// command, and must not compete with the call it follows.
	replaceDelay = 20 * time.Millisecond
)

// poolKey is what a prepared sandbox is bound to before its call: the
// tenant (its uid, its cgroup) and the network mode (its namespaces).
type poolKey struct {
	tenant, network string
}

// prepared is a sandbox waiting for its call.
type prepared struct {
	key    poolKey
	proc   proc
	ctl    int      // the control socket, node's end
	status *os.File // after "ready"
	share  *runShare
	hidden hiddenSet // what its view hides
}

// discard ends a prepared sandbox that will serve no call, and gives its
// share back.
func (pr *prepared) discard() {
	pr.proc.Kill()
	pr.proc.Wait()
	if pr.ctl >= 0 {
		unix.Close(pr.ctl)
	}
	pr.status.Close()
	pr.share.release()
}

// pool keeps prepared sandboxes. Its one goroutine (run) prepares them; it
// starts with the first command and ends with close. Safe for concurrent
// use.
type pool struct {
	s    *Sandbox
	size int

	mu      sync.Mutex
	keys    map[poolKey]*poolEntry
	running bool
	closed  bool
	fails   int
	off     string // why the pool stopped preparing, after poolFailures
	// served counts the prepared sandboxes handed a call (tests).
	served int
	// inflight counts the sandboxes being prepared, by key; changed is
	// closed (and replaced) whenever one is ready or failed.
	inflight map[poolKey]int
	changed  chan struct{}
	workers  sync.WaitGroup

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	// spawner starts the prepared sandboxes' helpers, once started by a
	// worker (spawnOnce); nil when it could not be (spawnErr): the node
	// starts them itself then.
	spawnOnce sync.Once
	spawner   *spawner
	spawnErr  error
}

// poolEntry is one key's prepared sandboxes and when a command last asked
// for one.
type poolEntry struct {
	ready []*prepared
	used  time.Time
}

func newPool(s *Sandbox, size int) *pool {
	return &pool{s: s, size: size, keys: map[poolKey]*poolEntry{}, inflight: map[poolKey]int{}, changed: make(chan struct{}),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// take hands out a prepared sandbox for key whose view hides what hidden
// says, removing it from the pool, or nil when none is ready nor being
// prepared for key (one being prepared is waited for: it is further along
// than a sandbox set up from nothing would be). Either way the key is
// wanted from now on, and the pool prepares another once the call ended or
// replaceDelay passed. Prepared sandboxes
// built while the hidden paths resolved otherwise (a ConfigMap updated in
// place) are ended instead.
func (p *pool) take(key poolKey, hidden hiddenSet) *prepared {
	if p == nil {
		return nil
	}
	defer time.AfterFunc(replaceDelay, p.wake)
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil
		}
		e := p.keys[key]
		if e == nil {
			e = &poolEntry{}
			p.keys[key] = e
		}
		e.used = time.Now()
		if !p.running && p.off == "" {
			p.running = true
			go p.run()
		}
		if len(e.ready) == 0 {
			changed := p.changed
			if p.inflight[key] == 0 {
				p.mu.Unlock()
				return nil
			}
			p.mu.Unlock()
			<-changed
			continue
		}
		pr := e.ready[0]
		e.ready = e.ready[1:]
		if pr.hidden.equal(hidden) {
			p.served++
			p.mu.Unlock()
			return pr
		}
		stale := []*prepared{pr}
		for _, other := range p.keys {
			stale = append(stale, other.ready...)
			other.ready = nil
		}
		p.mu.Unlock()
		for _, st := range stale {
			st.discard()
		}
		return nil
	}
}

// evict ends one prepared sandbox, tenant's if it has one, so that its
// place in the counted budget goes to a command; false when none is ready.
func (p *pool) evict(tenant string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	var pr *prepared
	for k, e := range p.keys {
		if len(e.ready) > 0 && (pr == nil || k.tenant == tenant) {
			pr = e.ready[len(e.ready)-1]
			if k.tenant == tenant {
				break
			}
		}
	}
	if pr != nil {
		e := p.keys[pr.key]
		e.ready = slices.DeleteFunc(e.ready, func(x *prepared) bool { return x == pr })
	}
	p.mu.Unlock()
	if pr == nil {
		return false
	}
	pr.discard()
	return true
}

// evictOrWait is evict that, when none is ready but some are being
// prepared (each holding a place too), waits for one to be ready and
// evicts it; false when none is ready or coming.
func (p *pool) evictOrWait(tenant string) bool {
	if p == nil {
		return false
	}
	deadline := time.After(prepareTimeout)
	for {
		if p.evict(tenant) {
			return true
		}
		p.mu.Lock()
		coming, changed := 0, p.changed
		for _, n := range p.inflight {
			coming += n
		}
		p.mu.Unlock()
		if coming == 0 {
			return false
		}
		select {
		case <-changed:
		case <-p.stop:
			return false
		case <-deadline:
			return false
		}
	}
}

// run prepares sandboxes until close, with prepareWorkers preparing at
// once: whenever a key wanted in the last preparedIdle has fewer than size,
// one more. It ends when its workers have.
func (p *pool) run() {
	defer close(p.done)
	for range prepareWorkers {
		p.workers.Go(p.work)
	}
	tick := time.NewTicker(poolTick)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			p.workers.Wait()
			return
		case <-tick.C:
			p.expire()
			p.wake()
		}
	}
}

// wake tells the workers that there may be work.
func (p *pool) wake() {
	if p == nil {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// work is one preparing worker. It runs on an OS thread of its own for its
// whole life: the prepared sandboxes' parent-death signal follows the
// thread that started them, so they die when it ends (with close, or with
// the node).
func (p *pool) work() {
	runtime.LockOSThread() // never unlocked: the thread ends with work
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		}
		for {
			key, ok := p.next()
			if !ok {
				break
			}
			p.wake() // another worker may take the next one
			pr, err := p.s.prepare(key)
			p.mu.Lock()
			p.inflight[key]--
			close(p.changed)
			p.changed = make(chan struct{})
			if err != nil {
				if !errors.Is(err, ErrBusy) {
					if p.fails++; p.fails >= poolFailures {
						p.off = err.Error()
					}
				}
				p.mu.Unlock()
				break // until the next command or tick
			}
			p.fails = 0
			if p.closed {
				p.mu.Unlock()
				pr.discard()
				return
			}
			e := p.keys[key]
			if e == nil {
				e = &poolEntry{used: time.Now()}
				p.keys[key] = e
			}
			e.ready = append(e.ready, pr)
			p.mu.Unlock()
		}
	}
}

// next returns a key to prepare one more sandbox for, counted in flight.
func (p *pool) next() (poolKey, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.off != "" {
		return poolKey{}, false
	}
	for k, e := range p.keys {
		if len(e.ready)+p.inflight[k] < p.size && time.Since(e.used) < preparedIdle {
			p.inflight[k]++
			return k, true
		}
	}
	return poolKey{}, false
}

// expire ends the prepared sandboxes of keys no command asked for in the
// last preparedIdle.
func (p *pool) expire() {
	p.mu.Lock()
	var idle []*prepared
	for k, e := range p.keys {
		if time.Since(e.used) >= preparedIdle {
			idle = append(idle, e.ready...)
			delete(p.keys, k)
		}
	}
	p.mu.Unlock()
	for _, pr := range idle {
		pr.discard()
	}
}

// close stops preparing and ends every prepared sandbox, waiting for them.
func (p *pool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	running := p.running
	var all []*prepared
	for _, e := range p.keys {
		all = append(all, e.ready...)
		e.ready = nil
	}
	p.mu.Unlock()
	close(p.stop)
	if running {
		<-p.done
	}
	for _, pr := range all {
		pr.discard()
	}
	p.spawner.close()
}

// spawnerUp starts the spawner if need be and reports whether it runs and
// the pool is open.
func (p *pool) spawnerUp() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	p.spawnOnce.Do(func() { p.spawner, p.spawnErr = startSpawner(helperPath()) })
	return p.spawner != nil && p.spawner.gone() == nil
}

// spawn starts the helper of a sandbox being prepared with the spawner,
// starting the spawner first if need be; (nil, nil) when there is none,
// and the node should start the helper itself (from a worker: its thread
// outlives the helper, whose parent-death signal follows it).
func (p *pool) spawn(path string, req spawnRequest, ctl, status *os.File) (proc, error) {
	if !p.spawnerUp() {
		return nil, nil // killed from outside, say: nothing is lost but speed
	}
	h, err := p.spawner.spawn(path, req, ctl, status)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// ready counts the prepared sandboxes waiting (tests).
func (p *pool) ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.keys {
		n += len(e.ready)
	}
	return n
}

// prepare starts a sandbox for key and waits until it is prepared: its
// namespaces made, in its run's cgroup (admitted like any run's), its view
// built but for the workspace. It fails with ErrBusy when the budget has no
// place for it, and with ErrSetup when the helper could not prepare.
func (s *Sandbox) prepare(key poolKey) (_ *prepared, err error) {
	hidden, err := s.hidden()
	if err != nil {
		return nil, err
	}
	prep := s.prepMessage(hidden, key.network, false)
	prep.Pivot = s.root // the workspace comes as a mount: no host path needed
	raw, err := encodeMessage(prep)
	if err != nil {
		return nil, err
	}
	share, err := s.res.admit(key.tenant)
	if err != nil {
		return nil, err
	}
	ctl, child, err := controlPair()
	if err != nil {
		share.release()
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		unix.Close(ctl)
		child.Close()
		share.release()
		return nil, err
	}
	uid, gid := s.ids(key.tenant)
	path := helperPath()
	pc, err := s.pool.spawn(path, spawnRequest{Args: []string{path, NamespaceArg, protocolID()}, Env: helperEnv,
		UID: uid, GID: gid, Network: key.network != NetworkHost, Root: s.root}, child, statusW)
	if pc == nil && err == nil {
		cmd := &exec.Cmd{ExtraFiles: []*os.File{child, statusW}, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
		s.helperCommand(cmd, uid, gid, key.network)
		if err = cmd.Start(); err == nil {
			pc = cmdProc{cmd}
		}
	}
	child.Close()
	statusW.Close()
	if err != nil {
		unix.Close(ctl)
		statusR.Close()
		share.release()
		return nil, fmt.Errorf("%w: start a sandbox ahead: %v", ErrSetup, err)
	}
	pr := &prepared{key: key, proc: pc, ctl: ctl, status: statusR, share: share, hidden: hidden}
	defer func() {
		if err != nil {
			pr.discard()
		}
	}()
	if err := share.place(pc.Pid()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	if err := sendFrame(ctl, raw, nil); err != nil {
		return nil, fmt.Errorf("%w: send a prepared sandbox its policy: %v", ErrSetup, err)
	}
	statusR.SetReadDeadline(time.Now().Add(prepareTimeout))
	var line [6]byte
	if _, err := io.ReadFull(statusR, line[:]); err != nil || string(line[:]) != "ready\n" {
		rest, _ := io.ReadAll(io.LimitReader(statusR, 64<<10))
		msg := bytes.TrimSpace(append(line[:], rest...))
		msg = bytes.TrimPrefix(bytes.Trim(msg, "\x00"), []byte("error: "))
		return nil, fmt.Errorf("%w: prepare a sandbox: %s (%v)", ErrSetup, msg, err)
	}
	statusR.SetReadDeadline(time.Time{})
	return pr, nil
}

// equal reports whether two hidden sets are the same.
func (h hiddenSet) equal(o hiddenSet) bool {
	return slices.Equal(h.names, o.names) && slices.Equal(h.ids, o.ids)
}
