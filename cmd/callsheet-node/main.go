// Command callsheet-node starts one callsheet node (docs/spec.md §8): an embedded JetStream
// server (or a connection to --nats), the default tool surface, and the HTTP
// API. It prints one line, "listening on http://ADDR", once it serves, and
// shuts down cleanly on SIGINT or SIGTERM.
//
//	go run ./cmd/callsheet-node [--data DIR] [--http ADDR] [--workspace-root DIR] [--config FILE]
//	    [--nats URL] [--nats-creds FILE] [--signing-key FILE] [--name NAME]
//	    [--cluster-listen HOST:PORT --routes nats-route://HOST:PORT,...]
//	    [--shared-workspaces] [--advertise URL] [--metrics-listen HOST:PORT]
//	    [--log-level debug|info|warn|error] [--log-format text|json]
//	go run ./cmd/callsheet-node --version
//
// It logs to standard error with log/slog (docs/operations.md, "Logs"), and
// exports traces over OTLP/HTTP when the standard OTEL_* variables name an
// endpoint (docs/operations.md, "Traces"; off without them).
//
// A fleet (docs/spec.md §7) is several nodes on one NATS cluster: each node
// embeds a clustered server (--cluster-listen, --routes: the other nodes'
// route listeners; every node is given the same --nats-creds file, which
// also guards the routes), or every node points --nats at one cluster.
//
// The embedded server admits only the nkey in DATA/credentials/nats.nk (made
// at first start, mode 0600; --nats-creds names another file, such as one
// shared by a fleet's nodes). With --nats, --nats-creds is the nkey seed or
// .creds file presented to that cluster, or the URL carries USER:PASSWORD.
//
// Session heads are signed (docs/audit.md) with the ed25519 key in
// DATA/credentials/signing.key (made at first start, mode 0600, its public
// key in signing.pub); --signing-key names another, existing, file, such as
// a fleet's shared key.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"golang.org/x/net/netutil"

	"github.com/callsheet/callsheet/api"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/internal/logging"
	"github.com/callsheet/callsheet/internal/tracing"
	"github.com/callsheet/callsheet/internal/version"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/sandbox"
)

// Program is the binary's name in --version and the flags' usage.
const Program = "callsheet-node"

// Defaults of the flags and of shutdown.
const (
	// DefaultHTTPAddr is where the API listens: loopback, because a node
	// without tenants serves anyone who can reach it.
	DefaultHTTPAddr = "127.0.0.1:7700"
	// ShutdownTimeout bounds how long Close waits for requests in progress
	// (turns waiting on their calls) before it cuts them off.
	ShutdownTimeout = 30 * time.Second
	// readHeaderTimeout bounds how long a client may take to send headers.
	readHeaderTimeout = 10 * time.Second
)

func main() {
	// First: when re-executed as the shell sandbox helper, this applies
	// Landlock and becomes the command; it never returns then.
	sandbox.Main()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain()
	if err := m.ParseFlags(os.Args[1:]); errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if m.Version {
		fmt.Println(version.Line(Program))
		os.Exit(0)
	}
	// Start-up may wait a long time (a fleet's node waits for a majority of
	// its servers, docs/operations.md): a signal then ends the process at
	// once, as kill -9 would, which the log is built to survive, rather than
	// being ignored until start-up is over.
	started := make(chan error, 1)
	go func() { started <- m.Run(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			_ = m.Close()
			fmt.Fprintln(os.Stderr, "callsheet-node:", err)
			os.Exit(1)
		}
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "callsheet-node: stopped by a signal while starting; nothing was served")
		os.Exit(1)
	}
	// SIGHUP reads the tenants_file again now (docs/operations.md,
	// "Rotating tokens"); without one it changes nothing.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			m.Reload()
		}
	}()
	code := 0
	select {
	case <-ctx.Done():
	case err := <-m.Err():
		fmt.Fprintln(os.Stderr, "callsheet-node: serving HTTP:", err)
		code = 1
	}
	stop() // a second signal ends the process at once
	if err := m.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "callsheet-node: shutdown:", err)
		code = 1
	}
	os.Exit(code)
}

// Main is the node program: flags, then Run, then Close. Its fields are set
// by ParseFlags (or by a test) before Run; it is not safe for concurrent use
// except for Err and Addr after Run.
type Main struct {
	// DataDir holds the embedded JetStream store; default node.DefaultDataDir.
	DataDir string
	// HTTPAddr is where the API listens; port 0 picks a free port. Default
	// DefaultHTTPAddr.
	HTTPAddr string
	// WorkspaceRoot holds the sessions' workspaces; default DATA/workspaces.
	WorkspaceRoot string
	// ConfigPath is the JSON config of docs/spec.md §6; empty means the defaults.
	ConfigPath string
	// NATSURL connects to an existing NATS cluster instead of the embedded
	// server.
	NATSURL string
	// NATSCredentials is the credentials file (node.Options.NATSCredentials):
	// default DATA/credentials/nats.nk for the embedded server, none with
	// NATSURL.
	NATSCredentials string
	// Name names the node in its fleet; default the host name.
	Name string
	// ClusterListen and Routes cluster the embedded server (--cluster-listen
	// HOST:PORT, --routes URL,...).
	ClusterListen string
	Routes        string
	// SharedWorkspaces: the workspace root is shared by every node of the
	// fleet (--shared-workspaces).
	SharedWorkspaces bool
	// Advertise is the URL other nodes forward API calls to; default
	// http://ADDR of the listener (with an unspecified host replaced by the
	// host name).
	Advertise string
	// SigningKey is the key file session heads are signed with
	// (node.Options.SigningKey): default DATA/credentials/signing.key.
	SigningKey string
	// Version: print the build's version (--version) instead of running.
	Version bool
	// MetricsListen is where the operator's listener serves /metrics,
	// /healthz and /readyz without a token (--metrics-listen); empty: none.
	MetricsListen string
	// LogLevel and LogFormat shape the log (--log-level debug, info, warn
	// or error; --log-format text or json); default info and text.
	LogLevel, LogFormat string
	// Getenv reads the OTEL_* variables that switch traces on
	// (internal/tracing); default os.Getenv.
	Getenv func(string) string

	// Stdout receives the one "listening on" line; Stderr the logs.
	Stdout, Stderr io.Writer

	node     *node.Node
	log      *slog.Logger
	tracer   *tracing.Provider
	server   *http.Server
	addr     string
	operator *http.Server
	opsAddr  string
	errc     chan error
	once     sync.Once
	err      error
}

// NewMain returns a Main with the defaults, printing to os.Stdout and
// os.Stderr.
func NewMain() *Main {
	return &Main{
		DataDir:   node.DefaultDataDir,
		HTTPAddr:  DefaultHTTPAddr,
		LogLevel:  logging.DefaultLevel,
		LogFormat: logging.DefaultFormat,
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		errc:      make(chan error, 1),
	}
}

// ParseFlags reads the command line into m. It returns flag.ErrHelp for
// -h, and an error naming the problem for an unknown flag or a stray
// argument.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet(Program, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.StringVar(&m.DataDir, "data", m.DataDir, "directory of the embedded JetStream store")
	fs.StringVar(&m.HTTPAddr, "http", m.HTTPAddr, "address the HTTP API listens on (port 0 picks a free port)")
	fs.StringVar(&m.WorkspaceRoot, "workspace-root", m.WorkspaceRoot, "directory of the sessions' workspaces (default DATA/workspaces)")
	fs.StringVar(&m.ConfigPath, "config", m.ConfigPath, "JSON configuration file (docs/spec.md §6)")
	fs.StringVar(&m.NATSURL, "nats", m.NATSURL, "URL of an existing NATS cluster to use instead of the embedded server (nats://USER:PASSWORD@HOST:PORT for password auth)")
	fs.StringVar(&m.NATSCredentials, "nats-creds", m.NATSCredentials, "NATS credentials file: the nkey seed the embedded server admits (default DATA/credentials/nats.nk, made at first start; give a fleet's nodes the same file), or with --nats the nkey seed or .creds file to present")
	fs.StringVar(&m.Name, "name", m.Name, "this node's name in its fleet: unique, stable across restarts, letters, digits, '_' or '-' (default the host name)")
	fs.StringVar(&m.ClusterListen, "cluster-listen", m.ClusterListen, "HOST:PORT of this node's NATS route listener: clusters the embedded server into a fleet (needs --routes)")
	fs.StringVar(&m.Routes, "routes", m.Routes, "the other nodes' route URLs, nats-route://HOST:PORT, comma-separated")
	fs.BoolVar(&m.SharedWorkspaces, "shared-workspaces", m.SharedWorkspaces, "every node of the fleet sees the same --workspace-root (a shared file system at the same path), so any node may take any session")
	fs.StringVar(&m.Advertise, "advertise", m.Advertise, "the URL other nodes of the fleet forward API calls to (default http:// and the --http address)")
	fs.StringVar(&m.SigningKey, "signing-key", m.SigningKey, "ed25519 key file (PEM PKCS#8, mode 0600) session heads are signed with (default DATA/credentials/signing.key, made at first start; a file named here must exist: give a fleet's nodes the fleet's key)")
	fs.StringVar(&m.MetricsListen, "metrics-listen", m.MetricsListen, "HOST:PORT of the operator's listener: /metrics (every tenant's counts), /healthz and /readyz, without a token; serve it where only operators reach (port 0 picks a free port)")
	fs.StringVar(&m.LogLevel, "log-level", m.LogLevel, "the least severe log lines written: debug, info, warn or error")
	fs.StringVar(&m.LogFormat, "log-format", m.LogFormat, "the log's format on standard error: text (key=value) or json (one object a line)")
	fs.BoolVar(&m.Version, "version", m.Version, "print the version (module, VCS revision and time, Go) and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("callsheet-node: unexpected argument %q: every option is a flag (see -h)", fs.Arg(0))
	}
	if _, err := logging.New(io.Discard, m.LogLevel, m.LogFormat); err != nil {
		return fmt.Errorf("callsheet-node: %w", err)
	}
	return nil
}

// Run loads the config, starts the node and serves the API, then prints
// "listening on http://ADDR" and returns; the server goes on until Close.
// ctx bounds the start-up only. It fails with the config's error (naming
// the file, field and reason), when no tenants are configured and HTTPAddr
// is not a loopback address, or when the node or the listener cannot start.
func (m *Main) Run(ctx context.Context) error {
	if m.errc == nil {
		m.errc = make(chan error, 1)
	}
	cfg := config.DefaultConfig()
	if m.ConfigPath != "" {
		var err error
		if cfg, err = config.Load(m.ConfigPath); err != nil {
			return err
		}
	}
	if !cfg.MultiTenant() && !loopback(m.HTTPAddr) {
		return fmt.Errorf("--http %s listens beyond loopback, but no tenants are configured, so anyone who can reach it could use the node: listen on 127.0.0.1, or configure \"tenants\" (or \"tenants_file\") with bearer tokens", m.HTTPAddr)
	}
	logger, err := logging.New(m.Stderr, m.LogLevel, m.LogFormat)
	if err != nil {
		return err
	}
	m.log = logger
	// Traces, when the OTEL_* variables ask for them: the provider's
	// batcher is Main's, shut down (flushed) in Close after the node.
	instance := m.Name
	if instance == "" {
		instance = node.DefaultName()
	}
	if m.tracer, err = tracing.FromEnv(ctx, m.Getenv, version.Short(), instance); err != nil {
		return err
	}
	if m.tracer.Enabled() {
		// The SDK reports export failures through its one error handler.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("exporting traces failed", "err", err) }))
		logger.Info("traces: exporting spans over OTLP/HTTP", "endpoint", m.tracer.Where())
	}
	// Sandboxed commands must not see the config (it holds the tenants'
	// tokens) nor credentials kept outside the data dir.
	var hidden []string
	for _, p := range []string{m.ConfigPath, m.NATSCredentials} {
		if p != "" {
			hidden = append(hidden, p)
		}
	}
	// A node already on this data directory: say so, rather than that
	// its port is in use (node.New takes the lock).
	if err := node.CheckDataDir(m.DataDir); err != nil {
		return err
	}
	// Listen first: the node's lease carries the address the fleet
	// forwards to (docs/spec.md §7).
	ln, err := net.Listen("tcp", m.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on --http %s: %w", m.HTTPAddr, err)
	}
	m.addr = ln.Addr().String()
	// The operator's listener answers /healthz from now on, and /readyz
	// "starting" until the node serves: a fleet's node may wait minutes
	// for its peers, and a liveness probe must not kill it meanwhile.
	var ops *api.Operator
	if m.MetricsListen != "" {
		oln, err := net.Listen("tcp", m.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen on --metrics-listen %s: %w", m.MetricsListen, err)
		}
		m.opsAddr = oln.Addr().String()
		ops = api.NewOperator()
		m.operator = &http.Server{Handler: ops, ReadHeaderTimeout: readHeaderTimeout, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
		go func() {
			if err := m.operator.Serve(oln); !errors.Is(err, http.ErrServerClosed) {
				select {
				case m.errc <- fmt.Errorf("operator listener: %w", err):
				default: // the API's error is being reported
				}
			}
		}()
		logger.Info("operator listener on http://"+m.opsAddr+": /metrics, /healthz, /readyz (no token)", "addr", m.opsAddr)
	}
	advertise := m.Advertise
	if advertise == "" {
		advertise = advertiseURL(m.addr)
	}
	var routes []string
	for _, r := range strings.Split(m.Routes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			routes = append(routes, r)
		}
	}
	n, err := node.New(context.WithoutCancel(ctx), node.Options{
		DataDir:          m.DataDir,
		WorkspaceRoot:    m.WorkspaceRoot,
		NATSURL:          m.NATSURL,
		NATSCredentials:  m.NATSCredentials,
		SigningKey:       m.SigningKey,
		Config:           &cfg,
		Logger:           logger,
		TracerProvider:   m.tracer.Node(),
		Hidden:           hidden,
		Name:             m.Name,
		ClusterListen:    m.ClusterListen,
		Routes:           routes,
		SharedWorkspaces: m.SharedWorkspaces,
		HTTPAdvertise:    advertise,
	})
	if err != nil {
		ln.Close()
		return err
	}
	m.node = n
	if ops != nil {
		ops.Serve(n)
	}
	reportSandbox(logger, cfg, n.Sandbox())
	if u := n.ClientURL(); u != "" && m.NATSURL == "" {
		// The embedded server listens on loopback only and admits the node's
		// credentials only; replay reaches the log through it with them
		// (replay --nats URL --nats-creds FILE).
		store := filepath.Join(m.DataDir, "jetstream")
		logger.Info(fmt.Sprintf("embedded JetStream at %s (store %s, credentials %s)", u, store, n.NATSCredentials()),
			"url", u, "store", store, "credentials", n.NATSCredentials())
	}
	_, keyID := n.SigningKey()
	logger.Info("signing session heads with key "+keyID, "key_id", keyID)
	handler, err := api.New(n, api.WithLogger(logger.With("component", "api")))
	if err != nil {
		ln.Close()
		return err
	}
	// No ReadTimeout or WriteTimeout: they would cut held worker polls,
	// event streams and long turns. Headers are bounded here, each body by
	// the API (http.body_timeout), idle keep-alive connections by
	// http.idle_timeout, and how many connections are open at once by
	// http.max_connections (more wait to be accepted).
	conns, nofile := connectionLimit(cfg.HTTP.MaxConnections)
	logger.Info(fmt.Sprintf("http: at most %d connections at once (http.max_connections %d, file descriptor limit %d), idle ones closed after %s, each request body read within %s",
		conns, cfg.HTTP.MaxConnections, nofile, cfg.HTTP.IdleTimeout, cfg.HTTP.BodyTimeout), "max_connections", conns)
	m.server = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       cfg.HTTP.IdleTimeout.Std(),
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	m.server.RegisterOnShutdown(handler.CloseStreams)
	limited := netutil.LimitListener(ln, conns)
	go func() {
		if err := m.server.Serve(limited); !errors.Is(err, http.ErrServerClosed) {
			m.errc <- err
		}
	}()
	fmt.Fprintf(m.Stdout, "listening on http://%s\n", m.addr)
	return nil
}

// reportSandbox logs the start-up report of docs/operations.md: one line per
// boundary of the sandbox (available or not, and why), then what runs in it.
func reportSandbox(logger *slog.Logger, cfg config.Config, box *sandbox.Sandbox) {
	for _, b := range box.Report() {
		logger.Info("sandbox: "+b.String(), "boundary", b.Name, "available", b.Available)
	}
	say := func(msg string) { logger.Info(msg) }
	ready := box.Ready()
	switch {
	case cfg.Shell.Sandbox == config.SandboxOff:
		say("shell: sandbox off (config shell.sandbox): shell commands run with the node's own rights")
	case ready != nil:
		say(fmt.Sprintf("shell: every call will be refused, nothing run: %v", ready))
	default:
		say("shell: commands run in the sandbox (escalated calls, once approved, outside it)")
	}
	switch {
	case box.Report().Get(sandbox.BoundaryLandlock).Available:
		say("glob, grep: rg reads only the workspace (Landlock)")
	case ready == nil:
		say("glob, grep: rg runs in the sandbox, which shows it the workspace only (no Landlock: a sandbox per search)")
	case slices.Contains(cfg.Sandbox.AcceptWeaker, sandbox.BoundaryLandlock):
		say("glob, grep: rg runs unconfined (no Landlock; accepted by sandbox.accept_weaker): a command racing a search could lead rg out of the workspace")
	default:
		say("glob, grep: every call will be refused: they confine rg with Landlock, which this kernel lacks, or in the sandbox, which cannot run; accept with sandbox.accept_weaker [\"landlock\"]")
	}
	sandboxed := 0
	for _, ct := range cfg.CommandTools {
		if ct.Sandbox == nil || *ct.Sandbox {
			sandboxed++
		}
	}
	if len(cfg.CommandTools) > 0 {
		say(fmt.Sprintf("command tools: %d of %d run in the sandbox (the others declare \"sandbox\": false)", sandboxed, len(cfg.CommandTools)))
	}
}

// Reload reads the node's tenants_file again (on SIGHUP) and logs what
// came of it; without a tenants_file it says so. Safe once Run has
// returned.
func (m *Main) Reload() {
	switch {
	case m.node == nil:
	case m.node.Config().TenantsFile == "":
		m.log.Info("SIGHUP: no tenants_file to read again (tenants in the config change with a restart)")
	default:
		if err := m.node.ReloadTenants(); err != nil {
			m.log.Warn("SIGHUP: tenants_file not put in force", "err", err)
			return
		}
		m.log.Info("SIGHUP: tenants_file read", "version", m.node.Tenants().Version)
	}
}

// Addr returns the address the API listens on, once Run has returned.
func (m *Main) Addr() string { return m.addr }

// MetricsAddr returns the address the operator's listener listens on, once
// Run has returned; "" without --metrics-listen.
func (m *Main) MetricsAddr() string { return m.opsAddr }

// Err delivers an error if the HTTP server stops on its own.
func (m *Main) Err() <-chan error { return m.errc }

// Close shuts down gracefully: the HTTP server stops accepting, ends the
// followed event streams and waits up to ShutdownTimeout for the requests
// in progress; then the node drains its calls and stops. It is safe to call
// more than once, and after a failed Run.
func (m *Main) Close() error {
	m.once.Do(func() {
		start := time.Now()
		if m.log != nil && m.node != nil {
			m.log.Info("shutting down: no new requests; those in progress get up to " + ShutdownTimeout.String() + ", running calls " + node.DefaultDrain.String())
		}
		if m.server != nil {
			ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
			if err := m.server.Shutdown(ctx); err != nil {
				m.err = errors.Join(m.err, fmt.Errorf("http shutdown: %w", err), m.server.Close())
			}
			cancel()
		}
		if m.node != nil {
			m.err = errors.Join(m.err, m.node.Close())
		}
		if m.tracer != nil {
			// After the node: its last spans are flushed.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			m.err = errors.Join(m.err, m.tracer.Shutdown(ctx))
			cancel()
		}
		if m.operator != nil {
			// Last: /readyz answers "shutting down" while the node drains.
			m.err = errors.Join(m.err, m.operator.Close())
		}
		if m.log != nil && m.node != nil {
			m.log.Info("shut down", "took_ms", time.Since(start).Milliseconds(), "err", m.err)
		}
	})
	return m.err
}

// advertiseURL is the URL of a listener at addr for other machines: an
// unspecified host (0.0.0.0, ::) is replaced by the host name.
func advertiseURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// connectionLimit is how many connections the API may hold at once: the
// configured http.max_connections, but never more than half the process's
// file descriptor limit (RLIMIT_NOFILE, which the Go runtime raises to its
// hard limit at start), so connections alone cannot take the descriptors
// the node needs for its log, workspaces and commands. It also returns that
// limit, 0 when unknown.
func connectionLimit(configured int) (int, uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return configured, 0
	}
	return int(min(uint64(configured), max(rl.Cur/2, 1))), rl.Cur
}

// loopback reports whether addr listens on a loopback interface only: a
// loopback IP or "localhost". An empty host listens on every interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
