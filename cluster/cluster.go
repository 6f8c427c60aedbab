package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Defaults for EmbeddedOptions.
const (
	// DefaultHost is the interface the embedded server listens on.
	DefaultHost = "127.0.0.1"
	// DefaultServerName names the embedded server when none is given.
	DefaultServerName = "callsheet"
	// ReadyTimeout bounds how long StartEmbedded waits for the server to
	// accept connections.
	ReadyTimeout = 10 * time.Second
	// ReconnectWait is the pause between reconnect attempts of Connect.
	ReconnectWait = 250 * time.Millisecond
	// DefaultClusterName names the NATS cluster a fleet's embedded servers
	// form (docs/spec.md §7).
	DefaultClusterName = "callsheet"
	// RouteUser is the user a fleet's servers present to each other on their
	// routes; the password is derived from the fleet's shared credentials.
	RouteUser = "callsheet-route"
	// RoutePingInterval and RouteMaxPingsOut are how a clustered embedded
	// server notices a peer that stopped answering: it pings each route
	// every RoutePingInterval and closes it after RouteMaxPingsOut pings
	// without an answer.
	RoutePingInterval = time.Second
	RouteMaxPingsOut  = 3
)

// Durability names, as the JSON configuration spells them (docs/spec.md §6).
const (
	DurabilityFsync    = "fsync"
	DurabilityInterval = "interval"
)

// ErrInvalidOption is wrapped by every error about a bad EmbeddedOptions field.
var ErrInvalidOption = errors.New("cluster: invalid option")

// EmbeddedOptions configures StartEmbedded. The zero value is not usable:
// StoreDir is required.
type EmbeddedOptions struct {
	// StoreDir is the directory of JetStream's file store; required. Data in
	// it survives a restart of the server on the same directory.
	StoreDir string
	// Host is the interface to listen on; default DefaultHost (loopback).
	Host string
	// Port is the client port. 0 and -1 (server.RANDOM_PORT) both pick a free
	// port; ClientURL reports the one chosen.
	Port int
	// SyncAlways makes the server fsync every write before acknowledging it
	// (durability "fsync"); false leaves JetStream's periodic sync
	// (durability "interval"), which can lose the last acknowledged writes on
	// power loss.
	SyncAlways bool
	// ServerName names the server; default DefaultServerName.
	ServerName string
	// Credentials are the nkey user the server admits, the only identity
	// that may connect (over TCP or in-process: no anonymous client, no
	// other user), and the one Connect presents. Default: fresh credentials
	// made by NewCredentials for this server alone, so nothing but Connect
	// gets in. A node passes the credentials of its data dir
	// (EnsureCredentials), so cmd/callsheet-replay can reach the server too; a .creds
	// file with a JWT is refused (the embedded server has no operator).
	//
	// A clustered server also protects its route port with them: its routes
	// authenticate as RouteUser with a password derived from the seed, so
	// only servers given the same credentials form the cluster.
	Credentials *Credentials
	// ClusterListen, HOST:PORT, is this server's route listener; set, it
	// turns clustering on (docs/spec.md §7, --cluster-listen). Port 0 picks
	// a free port (ClusterAddr reports it).
	ClusterListen string
	// Routes are the other servers' route URLs, nats-route://HOST:PORT
	// (--routes). A server may be given its own among them.
	Routes []string
	// ClusterName names the cluster; default DefaultClusterName. Every
	// server of one cluster must use the same.
	ClusterName string
	// Logger tells what the server's store healing does (heal.go); nil
	// discards.
	Logger *slog.Logger
	// StoreRoom is the free space the store's file system must have before
	// JetStream is restarted after a write error; default DefaultStoreRoom.
	StoreRoom int64
}

// Clustered reports whether the options start a clustered server.
func (o EmbeddedOptions) Clustered() bool { return o.ClusterListen != "" }

// Durability reports the docs/spec.md §4 durability name the options give:
// DurabilityFsync or DurabilityInterval.
func (o EmbeddedOptions) Durability() string {
	if o.SyncAlways {
		return DurabilityFsync
	}
	return DurabilityInterval
}

// Validate reports a missing store directory, an out-of-range port or JWT
// credentials, wrapping ErrInvalidOption.
func (o EmbeddedOptions) Validate() error {
	if o.StoreDir == "" {
		return fmt.Errorf("%w: StoreDir is empty: give the directory of the JetStream file store", ErrInvalidOption)
	}
	if o.Port < server.RANDOM_PORT || o.Port > 65535 {
		return fmt.Errorf("%w: Port %d is out of range: use -1 (or 0) for a free port, or 1..65535", ErrInvalidOption, o.Port)
	}
	if o.StoreRoom < 0 {
		return fmt.Errorf("%w: StoreRoom %d is negative: give the free bytes the store needs before JetStream restarts, or 0 for %d", ErrInvalidOption, o.StoreRoom, DefaultStoreRoom)
	}
	if o.Credentials != nil && o.Credentials.JWT() {
		return fmt.Errorf("%w: credentials %s hold a user JWT, which only an operator-mode server admits: give the embedded server an nkey seed file (one line SU..., nk -gen user)", ErrInvalidOption, o.Credentials.Path())
	}
	if o.ClusterListen == "" {
		if len(o.Routes) > 0 {
			return fmt.Errorf("%w: routes %v without a route listener: give --cluster-listen HOST:PORT too", ErrInvalidOption, o.Routes)
		}
		return nil
	}
	if _, _, err := splitHostPort(o.ClusterListen); err != nil {
		return fmt.Errorf("%w: --cluster-listen %q: %v: give HOST:PORT, such as 10.0.0.1:6222", ErrInvalidOption, o.ClusterListen, err)
	}
	if len(o.Routes) == 0 {
		return fmt.Errorf("%w: --cluster-listen %s without routes: a clustered JetStream server needs the other nodes' route URLs (--routes nats-route://HOST:PORT,...; its own may be among them)", ErrInvalidOption, o.ClusterListen)
	}
	if o.Credentials == nil {
		return fmt.Errorf("%w: a clustered server needs the fleet's credentials (its routes authenticate with them): give every node the same --nats-creds file", ErrInvalidOption)
	}
	for _, r := range o.Routes {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "nats-route" && u.Scheme != "nats") || u.Host == "" || u.Port() == "" {
			return fmt.Errorf("%w: route %q: give nats-route://HOST:PORT, another node's --cluster-listen", ErrInvalidOption, r)
		}
		if u.User != nil {
			return fmt.Errorf("%w: route %q carries a user: routes authenticate with the fleet's --nats-creds, so give nats-route://HOST:PORT", ErrInvalidOption, r)
		}
	}
	if o.ClusterName != "" && !validToken(o.ClusterName) {
		return fmt.Errorf("%w: cluster name %q: use letters, digits, '_' or '-'", ErrInvalidOption, o.ClusterName)
	}
	return nil
}

// splitHostPort parses HOST:PORT with a port of 0..65535.
func splitHostPort(hp string) (string, int, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("port %q is not 0..65535", port)
	}
	return host, n, nil
}

func validToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Embedded is a running embedded nats-server with JetStream, and the
// goroutine that restarts its JetStream once its store takes writes again
// after a fault (heal.go). Its methods are safe for concurrent use.
type Embedded struct {
	srv  *server.Server
	so   *server.Options // what the server was started with
	opts EmbeddedOptions

	healer
}

// StartEmbedded starts a nats-server with JetStream and a file store under
// opts.StoreDir, without logging or signal handlers, and waits up to
// ReadyTimeout until it accepts connections. The caller must call Shutdown.
// It returns an error wrapping ErrInvalidOption for bad options, or the
// server's error when it cannot start.
func StartEmbedded(opts EmbeddedOptions) (*Embedded, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Host == "" {
		opts.Host = DefaultHost
	}
	if opts.StoreRoom == 0 {
		opts.StoreRoom = DefaultStoreRoom
	}
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if opts.ServerName == "" {
		opts.ServerName = DefaultServerName
	}
	if opts.Credentials == nil {
		c, err := NewCredentials()
		if err != nil {
			return nil, fmt.Errorf("start embedded nats: %w", err)
		}
		opts.Credentials = c
	}
	dir, err := filepath.Abs(opts.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: store dir %q: %w", opts.StoreDir, err)
	}
	opts.StoreDir = dir
	so := &server.Options{
		ServerName: opts.ServerName,
		Host:       opts.Host,
		Port:       opts.Port,
		JetStream:  true,
		StoreDir:   dir,
		SyncAlways: opts.SyncAlways,
		NoLog:      true,
		NoSigs:     true,
		// One nkey user, and with it authentication on: the server refuses
		// every client that does not sign its nonce with this key's seed
		// (docs/spec.md §10 "Log"). In-process connections are checked the
		// same way.
		Nkeys: []*server.NkeyUser{{Nkey: opts.Credentials.PublicKey()}},
	}
	if opts.Clustered() {
		// Lame duck (LameDuck, at shutdown): hand leaderships over, then
		// close the few clients (a node's own connection is closed first)
		// within seconds rather than the default two minutes.
		so.LameDuckDuration, so.LameDuckGracePeriod = 5*time.Second, time.Second
		if err := clusterOptions(so, &opts); err != nil {
			return nil, fmt.Errorf("start embedded nats: %w", err)
		}
	}
	srv, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: %w", err)
	}
	logs := &serverLog{log: opts.Logger}
	srv.SetLogger(logs, false, false)
	go srv.Start()
	if err := waitReady(srv, logs); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("start embedded nats: %w (store dir %s, %s:%d)", err, dir, opts.Host, opts.Port)
	}
	e := &Embedded{srv: srv, so: so, opts: opts}
	e.startHealing()
	return e, nil
}

// waitReady waits up to ReadyTimeout for srv to accept connections, and
// returns at once with the server's own words when it gave up starting
// (a port another process holds: nats-server logs it as fatal and never
// becomes ready, so without its log the wait ran out saying nothing).
func waitReady(srv *server.Server, logs *serverLog) error {
	deadline := time.Now().Add(ReadyTimeout)
	for !srv.ReadyForConnections(50 * time.Millisecond) {
		if msg := logs.first(); msg != "" {
			return fmt.Errorf("the server could not start: %s", msg)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready for connections after %s", ReadyTimeout)
		}
	}
	return nil
}

// serverLog is the embedded server's logger: its errors and warnings go to
// the node's log (its notices only at debug level: a start alone writes
// thirty), and it keeps the first fatal message, after which nats-server
// stops serving what failed (waitReady says it).
type serverLog struct {
	log *slog.Logger // nil discards

	mu  sync.Mutex
	msg string
}

func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if l.msg == "" {
		l.msg = msg
	}
	l.mu.Unlock()
	l.write(slog.LevelError, "%s", msg)
}

func (l *serverLog) first() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.msg
}

func (l *serverLog) Errorf(format string, v ...any) { l.write(slog.LevelError, format, v...) }
func (l *serverLog) Warnf(format string, v ...any)  { l.write(slog.LevelWarn, format, v...) }
func (l *serverLog) Noticef(format string, v ...any) {
	l.write(slog.LevelDebug, format, v...)
}
func (*serverLog) Debugf(string, ...any) {}
func (*serverLog) Tracef(string, ...any) {}

// write logs one of the server's lines at level, when the node's log takes
// that level.
func (l *serverLog) write(level slog.Level, format string, v ...any) {
	if l.log == nil || !l.log.Enabled(context.Background(), level) {
		return
	}
	l.log.Log(context.Background(), level, "nats-server: "+fmt.Sprintf(format, v...))
}

// clusterOptions fills a server's cluster section as nats-server's own
// test template for a JetStream cluster does (server_name, a store dir of
// its own, cluster name, listen and routes): every option set in code, the
// same fields a config file would set (nats-server issue #6890 reports
// streams left without a leader after a restart when they were not). The
// route port admits only RouteUser with the password derived from the
// credentials, and the routes present the same.
func clusterOptions(so *server.Options, opts *EmbeddedOptions) error {
	if opts.ClusterName == "" {
		opts.ClusterName = DefaultClusterName
	}
	host, port, _ := splitHostPort(opts.ClusterListen)
	if port == 0 {
		port = server.RANDOM_PORT
	}
	secret, err := opts.Credentials.routeSecret()
	if err != nil {
		return err
	}
	so.Cluster = server.ClusterOpts{
		Name:     opts.ClusterName,
		Host:     host,
		Port:     port,
		Username: RouteUser,
		Password: secret,
		// A stopped peer (SIGSTOP, a partition) keeps its TCP connections
		// open and answers nothing; until its routes close, the requests
		// the cluster hands its queue subscriptions (direct gets of every
		// stream it replicates) go unanswered. nats-server's default (a
		// ping every 30 s for routes, two unanswered) left reads hanging
		// for over a minute; this closes such a route within a few
		// seconds, about a lease TTL (docs/facts.md, "Fleet facts").
		PingInterval: RoutePingInterval,
		MaxPingsOut:  RouteMaxPingsOut,
	}
	for _, r := range opts.Routes {
		u, _ := url.Parse(r)
		u.User = url.UserPassword(RouteUser, secret)
		so.Routes = append(so.Routes, u)
	}
	return nil
}

// ClusterAddr returns the route listener's address, or nil when the server
// is not clustered.
func (e *Embedded) ClusterAddr() net.Addr {
	if !e.opts.Clustered() {
		return nil
	}
	return e.srv.ClusterAddr()
}

// Routes reports how many route connections the server has now.
func (e *Embedded) Routes() int { return e.srv.NumRoutes() }

// LameDuck shuts the server down gracefully: in a cluster it first hands
// over the leadership of every RAFT group it leads (the event stream, the
// buckets, the consumers), so the others carry on without waiting for an
// election (docs/facts.md, "Fleet facts"); then it stops. It waits until the
// server has stopped.
func (e *Embedded) LameDuck() {
	e.stopHealing()
	if e.opts.Clustered() {
		e.srv.LameDuckShutdown()
	}
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// Server returns the underlying nats-server, for monitoring and tests.
func (e *Embedded) Server() *server.Server { return e.srv }

// Options returns the options the server runs with, defaults filled in.
func (e *Embedded) Options() EmbeddedOptions { return e.opts }

// ClientURL returns the nats:// URL other processes can connect to, with
// the server's credentials (Credentials).
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Credentials are the ones the server admits.
func (e *Embedded) Credentials() *Credentials { return e.opts.Credentials }

// Connect opens an in-process connection to the embedded server, presenting
// its credentials: no TCP loopback, which docs/facts.md measured at about
// half the latency of a publish.
func (e *Embedded) Connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect("", nats.InProcessServer(e.srv), nats.Name(name), e.opts.Credentials.Option())
	if err != nil {
		return nil, fmt.Errorf("connect in-process to embedded nats: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server and waits until it has stopped. It is safe to
// call more than once.
func (e *Embedded) Shutdown() {
	e.stopHealing()
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// Connect connects to an external NATS server or cluster at url (a
// comma-separated list is accepted). It keeps trying when the first connect
// fails and reconnects forever, every ReconnectWait, so a node rides out a
// server restart; requests made while disconnected fail with their context.
// opts come last, so they may override those; credentials travel as one
// (Credentials.Option), or as user:password in the URL.
//
// A server that refuses the credentials is not retried: Connect returns an
// error wrapping nats.ErrAuthorization at once, saying what to give.
func Connect(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	if url == "" {
		return nil, fmt.Errorf("connect to nats: empty URL: give --nats nats://host:port")
	}
	base := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
	}
	// Once without retrying, to tell refused credentials (which retrying
	// cannot fix, and which nats.go would otherwise retry in silence) from a
	// server that is not up yet.
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err == nil {
		return nc, nil
	}
	if RefusedCredentials(err) {
		return nil, fmt.Errorf("connect to nats %s: the server refused the credentials: %w (give the cluster's with --nats-creds FILE, an nkey seed or .creds file, or as nats://USER:PASSWORD@HOST:PORT)", url, err)
	}
	nc, err = nats.Connect(url, append(append(base, nats.RetryOnFailedConnect(true)), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	return nc, nil
}

// RefusedCredentials reports whether err is a server's refusal of a client's
// credentials (or of their absence).
func RefusedCredentials(err error) bool {
	for _, e := range []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired, nats.ErrNkeysNotSupported} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
