package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/sys/unix"
)

// Defaults of an embedded server's store healing.
const (
	// HealEvery is how often an embedded server checks that its JetStream
	// takes writes.
	HealEvery = time.Second
	// DefaultStoreRoom is the free space the store's file system must have
	// before JetStream is restarted after a write error: enough for the
	// streams' next blocks, so the restart is not met by ENOSPC at once.
	DefaultStoreRoom = 8 << 20
	// healBackoff bounds the wait between restarts when each is followed
	// by another fault (something keeps the disk full); a restart that
	// lasts this long resets the wait to HealEvery.
	healBackoff = time.Minute
)

// ErrStoreFault is wrapped by StoreFault's errors.
var ErrStoreFault = errors.New("cluster: JetStream does not take writes")

// healer is the goroutine of an Embedded that restarts its JetStream after
// a fault, once the store's file system has room again.
//
// nats-server does not recover from a write error on its own: a standalone
// server keeps refusing the writes of a stream that met one (the error is
// kept by the stream's store until the stream is loaded again), and a
// clustered one shuts JetStream down when it runs out of space. Either
// lasts until JetStream starts again, which it does here, in the process,
// from the store on disk.
type healer struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// startHealing starts the healer; stopHealing (from Shutdown) ends it.
func (e *Embedded) startHealing() {
	e.healer = healer{stop: make(chan struct{}), done: make(chan struct{})}
	go e.heal()
}

// stopHealing stops the healer and waits for it: the server is not
// restarted while it shuts down. Safe to call more than once.
func (e *Embedded) stopHealing() {
	if e.stop == nil {
		return
	}
	e.once.Do(func() { close(e.stop) })
	<-e.done
}

// StoreFault reports why the server's JetStream does not take writes: it
// is shut down (nats-server shuts it down when a clustered server runs out
// of space), or a stream of a standalone server met a write error (a full
// disk), which it keeps refusing writes with. It returns nil when neither
// holds, and otherwise an error wrapping ErrStoreFault with the server's
// reasons.
func (e *Embedded) StoreFault() error {
	if !e.srv.JetStreamEnabled() {
		return fmt.Errorf("%w: JetStream is shut down", ErrStoreFault)
	}
	if e.opts.Clustered() {
		// A clustered server's stream that met a write error hands its
		// leadership to a replica; what it cannot write is the meta log's,
		// which shuts JetStream down (above).
		return nil
	}
	var faults []string
	for _, h := range e.srv.Healthz(&server.HealthzOptions{Details: true}).Errors {
		if h.Type == server.HealthzErrorStream && strings.Contains(h.Error, "write error") {
			faults = append(faults, h.Error)
		}
	}
	if len(faults) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrStoreFault, strings.Join(faults, "; "))
}

// storeFree is the free space of the store's file system an unprivileged
// writer may use.
func (e *Embedded) storeFree() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(e.opts.StoreDir, &st); err != nil {
		return 0, err
	}
	return int64(uint64(st.Bavail) * uint64(st.Bsize)), nil
}

// restartJetStream stops the server's JetStream, if it runs, and starts it
// again from the store on disk: a reload with the options the server runs
// with, nats-server's own path for a JetStream it shut down at runtime.
// Clients stay connected; their consumers are loaded again (durable ones)
// or made again by their clients (ordered ones, on missed heartbeats).
func (e *Embedded) restartJetStream() error {
	if e.srv.JetStreamEnabled() {
		if err := e.srv.ShutdownJetStream(); err != nil {
			return fmt.Errorf("stop JetStream: %w", err)
		}
	}
	if err := e.srv.ReloadOptions(e.so.Clone()); err != nil {
		return fmt.Errorf("start JetStream: %w", err)
	}
	if !e.srv.JetStreamEnabled() {
		return errors.New("start JetStream: it did not start (the server's log says why)")
	}
	return nil
}

func (e *Embedded) log() *slog.Logger {
	if e.opts.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.opts.Logger
}

// heal is the healer's goroutine: every HealEvery it checks StoreFault;
// while there is a fault and the store's file system has StoreRoom free,
// it restarts JetStream, at most once per wait, the wait doubling (up to
// healBackoff) while the faults come back.
func (e *Embedded) heal() {
	defer close(e.done)
	tick := time.NewTicker(HealEvery)
	defer tick.Stop()
	var (
		since    time.Time // when the fault was first seen; zero: none
		wait     = HealEvery
		next     time.Time // no restart before then
		restarts int
		last     time.Time // the last restart
	)
	for {
		select {
		case <-e.stop:
			return
		case <-tick.C:
		}
		fault := e.StoreFault()
		if fault == nil {
			if !since.IsZero() {
				e.log().Info("JetStream takes writes again", "after_ms", time.Since(since).Milliseconds())
				since = time.Time{}
			}
			if !last.IsZero() && time.Since(last) > healBackoff {
				wait = HealEvery
			}
			continue
		}
		free, err := e.storeFree()
		if since.IsZero() {
			since = time.Now()
			has := fmt.Sprintf("it has %d MiB", free>>20)
			if err != nil {
				has = fmt.Sprintf("its free space is unknown: %v", err)
			}
			e.log().Warn("the JetStream store refused writes: JetStream is restarted once its disk has room", "fault", fault, "store", e.opts.StoreDir, "room_mib", e.opts.StoreRoom>>20, "has", has)
		}
		if err != nil || free < e.opts.StoreRoom || time.Now().Before(next) {
			continue
		}
		restarts++
		last = time.Now()
		err = e.restartJetStream()
		next, wait = time.Now().Add(wait), min(2*wait, healBackoff)
		if err != nil {
			e.log().Warn("restarting JetStream failed", "free_mib", free>>20, "store", e.opts.StoreDir, "restart", restarts, "err", err, "retry_in", time.Until(next).Round(time.Second).String())
			continue
		}
		e.log().Info("restarted JetStream from its store", "free_mib", free>>20, "store", e.opts.StoreDir, "restart", restarts, "after_ms", time.Since(since).Milliseconds())
	}
}
