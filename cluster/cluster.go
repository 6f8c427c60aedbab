package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
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
	// (EnsureCredentials), so cmd/replay can reach the server too; a .creds
	// file with a JWT is refused (the embedded server has no operator).
	Credentials *Credentials
}

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
	if o.Credentials != nil && o.Credentials.JWT() {
		return fmt.Errorf("%w: credentials %s hold a user JWT, which only an operator-mode server admits: give the embedded server an nkey seed file (one line SU..., nk -gen user)", ErrInvalidOption, o.Credentials.Path())
	}
	return nil
}

// Embedded is a running embedded nats-server with JetStream. Its methods are
// safe for concurrent use.
type Embedded struct {
	srv  *server.Server
	opts EmbeddedOptions
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
	srv, err := server.NewServer(&server.Options{
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
	})
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(ReadyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("start embedded nats: not ready for connections after %s (store dir %s, %s:%d)", ReadyTimeout, dir, opts.Host, opts.Port)
	}
	return &Embedded{srv: srv, opts: opts}, nil
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
