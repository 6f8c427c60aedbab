package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/callsheet/callsheet/tool"
)

// Defaults of the Manager's options.
const (
	// DefaultMaxInFlight caps the calls in flight to one server (config
	// concurrency.mcp_connections).
	DefaultMaxInFlight = 8
	// DefaultConnectTimeout bounds one attempt to start or reach a server
	// and finish the initialize handshake and the first tools/list.
	DefaultConnectTimeout = 30 * time.Second
	// DefaultInitialBackoff and DefaultMaxBackoff bound the wait between
	// attempts to (re)start a server: it doubles from the first to the
	// second, with ±20% jitter, and resets once a session stayed up for
	// stableAfter.
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	// DefaultKeepAlive is how often an idle session is pinged, so that a
	// server that stopped answering is noticed and reconnected.
	DefaultKeepAlive = 30 * time.Second
	// stableAfter is how long a session must last for the backoff to reset.
	stableAfter = 30 * time.Second
)

// ErrInvalidOption is wrapped by the error New returns for a bad option or
// server description.
var ErrInvalidOption = errors.New("mcp: invalid option")

// Server describes one MCP server (config mcp_servers.NAME): either Command
// (a program started and spoken to over stdio) or URL (a streamable HTTP
// endpoint).
type Server struct {
	// Name is the server's name, the SERVER of mcp__SERVER__TOOL.
	Name string
	// Command is the program and its arguments; Env adds to its minimal
	// environment (minimalEnv) and Dir is its working directory.
	Command []string
	Env     map[string]string
	Dir     string
	// URL is the streamable HTTP endpoint; Headers go with every request.
	URL     string
	Headers map[string]string
	// TrustAnnotations lets the server's annotations declare (see Declare).
	TrustAnnotations bool
	// Overrides are declarations by the server's own tool names.
	Overrides map[string]Override
}

// Registry is where a Manager registers each server's tools, as one source
// per server ("mcp:NAME"); *tool.Registry implements it.
type Registry interface {
	Replace(source string, tools []*tool.Tool) error
}

var _ Registry = (*tool.Registry)(nil)

// Option configures New.
type Option func(*Manager) error

// WithLogger sets where the Manager logs connections, exits, restarts and
// refused tools; default: discarded.
func WithLogger(l *slog.Logger) Option {
	return func(m *Manager) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		m.log = l
		return nil
	}
}

// WithMaxInFlight caps the calls in flight to each server; default
// DefaultMaxInFlight.
func WithMaxInFlight(n int) Option {
	return func(m *Manager) error {
		if n < 1 {
			return fmt.Errorf("%w: max in flight %d: use at least 1", ErrInvalidOption, n)
		}
		m.maxInFlight = n
		return nil
	}
}

// WithBackoff sets the first and the longest wait between attempts to
// (re)start a server; defaults DefaultInitialBackoff, DefaultMaxBackoff.
func WithBackoff(initial, maxDelay time.Duration) Option {
	return func(m *Manager) error {
		if initial <= 0 || maxDelay < initial {
			return fmt.Errorf("%w: backoff %s..%s: use a positive initial delay and a maximum at least as long", ErrInvalidOption, initial, maxDelay)
		}
		m.initialBackoff, m.maxBackoff = initial, maxDelay
		return nil
	}
}

// WithConnectTimeout bounds one connection attempt; default
// DefaultConnectTimeout.
func WithConnectTimeout(d time.Duration) Option {
	return func(m *Manager) error {
		if d <= 0 {
			return fmt.Errorf("%w: connect timeout %s: use a positive duration", ErrInvalidOption, d)
		}
		m.connectTimeout = d
		return nil
	}
}

// WithKeepAlive sets how often a session is pinged (0 turns pings off);
// default DefaultKeepAlive.
func WithKeepAlive(d time.Duration) Option {
	return func(m *Manager) error {
		if d < 0 {
			return fmt.Errorf("%w: keep-alive %s is negative", ErrInvalidOption, d)
		}
		m.keepAlive = d
		return nil
	}
}

// Manager connects to MCP servers and keeps their tools registered (see the
// package doc). It is safe for concurrent use.
type Manager struct {
	reg            Registry
	log            *slog.Logger
	maxInFlight    int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	connectTimeout time.Duration
	keepAlive      time.Duration

	conns map[string]*conn // by server name; fixed after New

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New returns a Manager for servers that registers into reg. Nothing starts
// until Start. It fails (wrapping ErrInvalidOption) for a bad option or a
// server that names neither or both of a command and a URL, or two servers
// of one name.
func New(reg Registry, servers []Server, opts ...Option) (*Manager, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: nil registry", ErrInvalidOption)
	}
	m := &Manager{
		reg:            reg,
		log:            slog.New(slog.DiscardHandler),
		maxInFlight:    DefaultMaxInFlight,
		initialBackoff: DefaultInitialBackoff,
		maxBackoff:     DefaultMaxBackoff,
		connectTimeout: DefaultConnectTimeout,
		keepAlive:      DefaultKeepAlive,
		conns:          map[string]*conn{},
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(m); err != nil {
			return nil, err
		}
	}
	for _, s := range servers {
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("%w: a server without a name", ErrInvalidOption)
		case (len(s.Command) == 0) == (s.URL == ""):
			return nil, fmt.Errorf("%w: server %q: give exactly one of a command and a URL", ErrInvalidOption, s.Name)
		}
		if _, dup := m.conns[s.Name]; dup {
			return nil, fmt.Errorf("%w: two servers named %q", ErrInvalidOption, s.Name)
		}
		m.conns[s.Name] = newConn(m, s)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// Status is what a Manager knows of one server, for logs and tests.
type Status struct {
	// Server is the server's name; Transport "stdio" or "http".
	Server, Transport string
	// Connected is true while a session is up; Starting while the first
	// attempt to connect has not finished.
	Connected, Starting bool
	// Reason says why the server is not connected (its start failure, or
	// how it exited); empty while connected.
	Reason string
	// Tools are the callsheet names of its registered tools, sorted.
	Tools []string
	// Refused maps a server tool's own name to why it was not registered.
	Refused map[string]string
	// PID is the process id of a stdio server's program while it runs.
	PID int
	// Sessions counts the sessions established so far (1 after the first
	// start, 2 after one restart, ...).
	Sessions int
}

// Start starts one supervising goroutine per server and waits until each
// has finished its first attempt to connect, or until wait has passed, or
// ctx ends, whichever is first; it returns the servers' statuses then,
// sorted by name, for the start-up log. The supervisors go on until Close.
// Call it once.
func (m *Manager) Start(ctx context.Context, wait time.Duration) []Status {
	for _, c := range m.conns {
		m.wg.Add(1)
		go c.supervise(m.ctx)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for _, c := range m.sorted() {
		select {
		case <-c.firstDone:
		case <-deadline.C:
			return m.Status()
		case <-ctx.Done():
			return m.Status()
		}
	}
	return m.Status()
}

// Status returns every server's status, sorted by name.
func (m *Manager) Status() []Status {
	out := make([]Status, 0, len(m.conns))
	for _, c := range m.sorted() {
		out = append(out, c.status())
	}
	return out
}

func (m *Manager) sorted() []*conn {
	names := slices.Sorted(maps.Keys(m.conns))
	out := make([]*conn, len(names))
	for i, n := range names {
		out[i] = m.conns[n]
	}
	return out
}

// Unavailable says why there is no registered tool called name, when name
// has the form of an MCP tool: no such server, the server could not start
// or is not connected, the server does not offer such a tool (with the
// names it offers), or the tool was refused. It returns "" for a name that
// is not an MCP tool's, so the caller keeps its generic reason.
func (m *Manager) Unavailable(name string) string {
	server, ok := ServerOf(name)
	if !ok {
		return ""
	}
	c, ok := m.conns[server]
	if !ok {
		return fmt.Sprintf("no MCP server named %q is configured on this node (servers: %s)", server, listOr(slices.Sorted(maps.Keys(m.conns)), "none"))
	}
	return c.unavailable(name)
}

// Close ends every server's session (a stdio server's program gets its
// stdin closed, then SIGTERM, then SIGKILL) and waits for the supervisors.
// It is safe to call more than once.
func (m *Manager) Close() error {
	m.once.Do(func() {
		m.cancel()
		m.wg.Wait()
	})
	return nil
}

// backoff returns the wait before the next attempt after delay, with ±20%
// jitter, and the delay to use after that one.
func (m *Manager) backoff(delay time.Duration) (wait, next time.Duration) {
	wait = time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64()))
	return wait, min(delay*2, m.maxBackoff)
}

// listOr joins names for a message, or says none.
func listOr(names []string, none string) string {
	if len(names) == 0 {
		return none
	}
	const most = 20
	if len(names) > most {
		return strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
	}
	return strings.Join(names, ", ")
}
