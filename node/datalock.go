package node

import (
	"errors"
	"fmt"

	"github.com/callsheet/callsheet/internal/datalock"
)

// lockData takes the data directory's lock (internal/datalock) for the life
// of the node, before anything in the directory is read or written: a
// second node on the same directory would run a second JetStream server on
// the same store and empty the first's spill directory. It refuses, naming
// the holder, when another process holds the lock.
func lockData(opts Options) (*datalock.Lock, error) {
	l, err := datalock.Acquire(opts.DataDir, datalock.Record{
		Program: datalock.ProgramNode, Node: opts.Name, HTTP: opts.HTTPAdvertise,
	})
	return l, inUse(err)
}

// CheckDataDir reports, without taking it, whether another process holds
// the lock of the data directory dir, with the error New would return
// (wrapping ErrDataDirInUse); nil when it is free. cmd/callsheet-node asks before it
// listens, so the refusal names the holder rather than a port in use.
func CheckDataDir(dir string) error { return inUse(datalock.Check(dir)) }

// ErrDataDirInUse is wrapped by New's error when another process (a node,
// or cmd/callsheet-replay reading the store) holds the data directory's lock.
var ErrDataDirInUse = datalock.ErrLocked

// inUse adds what to do to a lock refusal.
func inUse(err error) error {
	var locked *datalock.LockedError
	if !errors.As(err, &locked) {
		return err
	}
	what := "stop it first"
	if locked.Record.Program == datalock.ProgramNode {
		what = "stop that node first (SIGTERM)"
	}
	return fmt.Errorf("%w: two processes on one data directory corrupt each other's sessions; %s, or give this node another --data directory", err, what)
}

// recordServer writes the embedded JetStream's client URL and credentials
// into the lock's record, so cmd/callsheet-replay --data reaches the running node's
// server instead of opening the store beside it. With natsURL (--nats) the
// store is not in the directory and there is nothing to record.
func recordServer(l *datalock.Lock, natsURL, clientURL, creds string) error {
	if l == nil || natsURL != "" || clientURL == "" {
		return nil
	}
	return l.Update(func(r *datalock.Record) { r.NATS, r.NATSCredentials = clientURL, creds })
}
