package datalock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FileName is the lock file's name in a data directory.
const FileName = "LOCK"

// Programs that take the lock, the values of Record.Program.
const (
	ProgramNode   = "callsheet-node"
	ProgramReplay = "callsheet-replay"
)

// readAttempts and readPause bound how long Read waits for a record its
// holder is still writing (a lock taken a moment ago has an empty file).
const (
	readAttempts = 10
	readPause    = 20 * time.Millisecond
)

// ErrLocked is wrapped by the *LockedError Acquire returns when another
// process holds the lock.
var ErrLocked = errors.New("datalock: the data directory is in use")

// Record says who holds a data directory's lock. Acquire fills PID, Host
// and Started when they are zero.
type Record struct {
	// Program is ProgramNode or ProgramReplay.
	Program string `json:"program"`
	PID     int    `json:"pid"`
	Host    string `json:"host"`
	// Node is the node's name in its fleet (--name).
	Node    string    `json:"node,omitempty"`
	Started time.Time `json:"started"`
	// HTTP is the URL of the node's API, as it advertises it.
	HTTP string `json:"http,omitempty"`
	// NATS is the client URL of the embedded JetStream server the node
	// runs on this directory's store; empty before it listens, and with
	// --nats (the store is elsewhere).
	NATS string `json:"nats,omitempty"`
	// NATSCredentials is the credentials file that server admits.
	NATSCredentials string `json:"nats_credentials,omitempty"`
}

// String describes the holder for a person: `callsheet-node "n1" (pid 4242
// on host h, serving http://127.0.0.1:7700, since 2026-12-01T09:13:33Z)`.
func (r Record) String() string {
	var b strings.Builder
	b.WriteString(r.Program)
	if r.Program == "" {
		b.WriteString("a process")
	}
	if r.Node != "" {
		fmt.Fprintf(&b, " %q", r.Node)
	}
	fmt.Fprintf(&b, " (pid %d on host %s", r.PID, r.Host)
	if r.HTTP != "" {
		fmt.Fprintf(&b, ", serving %s", r.HTTP)
	}
	if !r.Started.IsZero() {
		fmt.Fprintf(&b, ", since %s", r.Started.UTC().Format(time.RFC3339))
	}
	b.WriteString(")")
	return b.String()
}

// LockedError is Acquire's error when another process holds the lock. It
// wraps ErrLocked.
type LockedError struct {
	// Dir is the data directory.
	Dir string
	// Record is what the holder wrote; zero when Known is false.
	Record Record
	// Known reports whether the holder's record could be read (a holder
	// that has just taken the lock may not have written it yet).
	Known bool
}

func (e *LockedError) Error() string {
	if !e.Known {
		return fmt.Sprintf("the data directory %s is in use by another process (it holds %s; its record is unreadable)", e.Dir, filepath.Join(e.Dir, FileName))
	}
	return fmt.Sprintf("the data directory %s is in use by %s", e.Dir, e.Record)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// Lock is a held lock on a data directory. Its methods are safe for
// concurrent use.
type Lock struct {
	mu  sync.Mutex
	f   *os.File // nil once released
	dir string
	rec Record
}

// Acquire takes the lock of dir, creating dir (mode 0700) and its lock file
// if missing, and writes rec as the holder's record. It does not wait: when
// another process (or another Lock in this one) holds it, it returns a
// *LockedError naming the holder. Release the lock with Release; the
// kernel releases it when the process dies.
func Acquire(dir string, rec Record) (*Lock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("lock the data directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("lock the data directory: %w", err)
	}
	path := filepath.Join(abs, FileName)
	// O_NOFOLLOW: the lock file is never a link to somewhere else.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock the data directory: %w", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			held, known := readRecord(path)
			return nil, &LockedError{Dir: abs, Record: held, Known: known}
		}
		return nil, fmt.Errorf("lock the data directory: flock %s: %w", path, err)
	}
	if rec.PID == 0 {
		rec.PID = os.Getpid()
	}
	if rec.Host == "" {
		rec.Host, _ = os.Hostname()
	}
	if rec.Started.IsZero() {
		rec.Started = time.Now().UTC().Truncate(time.Second)
	}
	l := &Lock{f: f, dir: abs, rec: rec}
	if err := l.write(); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// flock takes an exclusive lock without waiting, retrying a call a signal
// interrupted.
func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Check reports whether another process holds dir's lock, without keeping
// it: nil when the lock is free or dir has none, else a *LockedError. A
// process starting at the same moment may take the lock just after Check
// answers; only Acquire decides.
func Check(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(abs, FileName), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil // no lock file: nobody holds it (Acquire reports other problems)
	}
	defer f.Close()
	if err := flock(f); errors.Is(err, unix.EWOULDBLOCK) {
		rec, known := readRecord(f.Name())
		return &LockedError{Dir: abs, Record: rec, Known: known}
	}
	return nil // closing f releases what flock took
}

// readRecord reads the holder's record, waiting a little for one being
// written.
func readRecord(path string) (Record, bool) {
	for i := range readAttempts {
		if i > 0 {
			time.Sleep(readPause)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return Record{}, false
		}
		line, _, _ := bytes.Cut(b, []byte("\n"))
		var r Record
		if json.Unmarshal(line, &r) == nil && r.PID > 0 {
			return r, true
		}
	}
	return Record{}, false
}

// Dir returns the data directory, as an absolute path.
func (l *Lock) Dir() string { return l.dir }

// Record returns the holder's record as last written.
func (l *Lock) Record() Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec
}

// Update changes the record (f edits a copy) and writes it. It fails after
// Release.
func (l *Lock) Update(f func(*Record)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("datalock: update of a released lock")
	}
	rec := l.rec
	f(&rec)
	l.rec = rec
	return l.writeLocked()
}

func (l *Lock) write() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeLocked()
}

// writeLocked writes the record as one line over the file's start, then
// cuts what an older, longer record left after it: a reader sees the old
// record, the new one, or a line that does not parse (and reads again),
// never an empty file once a record was written.
func (l *Lock) writeLocked() error {
	b, err := json.Marshal(l.rec)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("datalock: write %s: %w", l.f.Name(), err)
	}
	if err := l.f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("datalock: write %s: %w", l.f.Name(), err)
	}
	return nil
}

// Release releases the lock. The record stays in the file (a later holder
// overwrites it); it is not trusted without the lock. Safe to call more
// than once, and on a nil Lock.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the only descriptor releases the flock
	l.f = nil
	return err
}
