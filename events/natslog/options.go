package natslog

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Defaults for Options.
const (
	// DefaultStream is the name of the event stream.
	DefaultStream = "CALLSHEET"
	// DefaultSnapshotStream is the stream of the event stream's session
	// snapshots (snapshot.go): a Log on stream S keeps them in S + "_SNAP".
	DefaultSnapshotStream = DefaultStream + snapStreamSuffix
	// DefaultSubjectPrefix is the subject prefix of every event.
	DefaultSubjectPrefix = "cs.ev"
	// DefaultReplicas is the stream's replica count: 1, a single node.
	DefaultReplicas = 1
	// DefaultDuplicateWindow is how long JetStream remembers a message id.
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultWatchBuffer is the capacity of a Watch channel.
	DefaultWatchBuffer = 256
	// DefaultCacheSize bounds the per-session position cache.
	DefaultCacheSize = 100_000
	// DefaultSnapshotCache bounds the bytes of the snapshot tips a Log
	// remembers (WithSnapshotCache).
	DefaultSnapshotCache = 64 << 20
	// DefaultTimeout bounds one request to the server when ctx has no deadline.
	DefaultTimeout = 5 * time.Second
	// MaxAppend is the most messages one atomic Append may publish: the
	// server's atomic batch limit. Events are packed several to a message,
	// and an Append WithSequentialAppends publishes its messages one by one,
	// so it has no such limit.
	MaxAppend = 1000
)

// ErrInvalidOption is wrapped by every error about a bad option.
var ErrInvalidOption = errors.New("natslog: invalid option")

type config struct {
	stream      string
	prefix      string
	replicas    int
	duplicates  time.Duration
	watchBuffer int
	cacheSize   int
	snapCache   int
	timeout     time.Duration
	sequential  bool
	group       int
	writer      string
	// payloadBucket and refThreshold: events stored by reference (refs.go).
	payloadBucket string
	refThreshold  int
}

func defaultConfig() config {
	return config{
		stream:      DefaultStream,
		prefix:      DefaultSubjectPrefix,
		replicas:    DefaultReplicas,
		duplicates:  DefaultDuplicateWindow,
		watchBuffer: DefaultWatchBuffer,
		cacheSize:   DefaultCacheSize,
		snapCache:   DefaultSnapshotCache,
		timeout:     DefaultTimeout,

		payloadBucket: DefaultPayloadBucket,
		refThreshold:  DefaultRefThreshold,
	}
}

// Option configures New. Options validate their argument and return an error
// wrapping ErrInvalidOption.
type Option func(*config) error

var (
	streamNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	tokenRE      = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// WithStream names the event stream; default DefaultStream. Names are 1..64
// of A-Z a-z 0-9 _ -.
func WithStream(name string) Option {
	return func(c *config) error {
		if !streamNameRE.MatchString(name) {
			return fmt.Errorf("%w: stream name %q: use 1..64 letters, digits, '_' or '-'", ErrInvalidOption, name)
		}
		c.stream = name
		return nil
	}
}

// WithSubjectPrefix sets the subject prefix of every event; default
// DefaultSubjectPrefix. It is one or more dot-separated tokens of letters,
// digits, '_' or '-'. Two Logs on one server need different streams and
// prefixes.
func WithSubjectPrefix(prefix string) Option {
	return func(c *config) error {
		toks := strings.Split(prefix, ".")
		for _, t := range toks {
			if !tokenRE.MatchString(t) {
				return fmt.Errorf("%w: subject prefix %q: use dot-separated tokens of letters, digits, '_' or '-'", ErrInvalidOption, prefix)
			}
		}
		c.prefix = prefix
		return nil
	}
}

// WithReplicas sets the replica count of the stream, the object stores and
// the index; default DefaultReplicas. A fleet on a NATS cluster uses 3.
func WithReplicas(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas %d: use 1..5", ErrInvalidOption, n)
		}
		c.replicas = n
		return nil
	}
}

// WithDuplicateWindow sets how long the stream remembers message ids; default
// DefaultDuplicateWindow. Appends retried within it are de-duplicated by id
// as well as by the guard.
func WithDuplicateWindow(d time.Duration) Option {
	return func(c *config) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("%w: duplicate window %s: use at least 100ms", ErrInvalidOption, d)
		}
		c.duplicates = d
		return nil
	}
}

// WithWatchBuffer sets the capacity of Watch channels; default
// DefaultWatchBuffer. A watcher that falls this far behind holds up its
// own watch only.
func WithWatchBuffer(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: watch buffer %d: use at least 1", ErrInvalidOption, n)
		}
		c.watchBuffer = n
		return nil
	}
}

// WithCacheSize bounds how many sessions' last positions the Log remembers;
// default DefaultCacheSize. A miss costs one request to the stream leader.
func WithCacheSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: cache size %d: use at least 1", ErrInvalidOption, n)
		}
		c.cacheSize = n
		return nil
	}
}

// WithSnapshotCache bounds the bytes of the session snapshot tips the Log
// remembers (each the snapshot's last two chunks, at most about 1 MiB, and
// its guard: snapcache.go), least recently used first out; default
// DefaultSnapshotCache, 0 remembers none. A session whose tip is not
// remembered compacts by reading its whole snapshot again.
func WithSnapshotCache(bytes int) Option {
	return func(c *config) error {
		if bytes < 0 {
			return fmt.Errorf("%w: snapshot cache %d bytes: use 0 or more", ErrInvalidOption, bytes)
		}
		c.snapCache = bytes
		return nil
	}
}

// WithTimeout bounds each server request made with a context that has no
// deadline; default DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %s: use a positive duration", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// WithSequentialAppends makes a multi-event Append a chain of guarded
// publishes (each guarded on the one before) instead of one atomic batch.
// Default false (atomic batches).
//
// Why it exists: on an R1 file-backed stream nats-server 2.15 stages every
// atomic batch in a file store of its own, created and deleted per batch,
// which measured 2.7 ms p50 and up to 0.8 s p99 for a 3-event append against
// about 60 µs for three guarded publishes (see BenchmarkAppend). Replicated
// streams stage batches in memory and commit them in one RAFT proposal.
//
// The price: a crash between the publishes of one Append leaves a stored
// prefix of its events, which readers see. Retrying the same Append stores
// the rest (Append resumes a stored prefix with the same ids); a writer that
// never retries leaves the prefix as the session's tail.
func WithSequentialAppends(on bool) Option {
	return func(c *config) error {
		c.sequential = on
		return nil
	}
}

// WithGroupCommit makes the Log store the appends of several sessions that
// are in flight together as one atomic batch, once at least n appends are in
// flight (group.go); 0, the default, never. It pays with SyncAlways, where a
// file-backed single replica fsyncs every message on its own and a batch's
// commit once: bench groupcommit/fsync. With WithSequentialAppends each of
// an append's messages is grouped on its own.
func WithGroupCommit(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: group commit threshold %d: use 0 (off) or a number of appends in flight", ErrInvalidOption, n)
		}
		c.group = n
		return nil
	}
}

// WriterHeader is the message header that names the node that published a
// message, when the Log was opened WithWriter: an audit of a fleet's log
// can tell which node appended what (every message a node appended after it
// lost a session is one a guard should have refused).
const WriterHeader = "Callsheet-Writer"

// WithWriter names the writer (a node) in the WriterHeader of every message
// the Log publishes; default none. The name is a token: letters, digits,
// '_' or '-'.
func WithWriter(name string) Option {
	return func(c *config) error {
		if name != "" && !tokenRE.MatchString(name) {
			return fmt.Errorf("%w: writer %q: use letters, digits, '_' or '-'", ErrInvalidOption, name)
		}
		c.writer = name
		return nil
	}
}
