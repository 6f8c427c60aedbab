// Command callsheet-replay rebuilds a session from the event log alone (docs/spec.md §8) and
// prints its transcript, or checks the log's integrity.
//
//	go run ./cmd/callsheet-replay --session S [--format markdown|json|html] [--verify]
//	    [--data DIR | --nats URL [--nats-creds FILE]] [--tenant T]
//	go run ./cmd/callsheet-replay --session S --url http://NODE --token T [--format ...] [--verify]
//	go run ./cmd/callsheet-replay --session S --export [--sign] [SOURCE] > session.ndjson
//	go run ./cmd/callsheet-replay --verify --file session.ndjson --pubkey DATA/credentials/signing.pub [--witness W]
//	go run ./cmd/callsheet-replay --witness W [--session S] [--pubkey DATA/credentials/signing.pub] SOURCE
//
// --export writes the session's events as NDJSON, one stored event per line
// (the envelope with its hash link, and the payload resolved), signatures
// included; --sign (with --url) has the node sign the head first. --verify
// --file checks such an export away from the fleet: no NATS, no node. With
// --pubkey (repeatable) every signature is checked and at least one must
// cover the log; --require-chain refuses a log without hash links
// (docs/audit.md).
//
// --verify also checks the log against the session's checkpoints, the heads
// its node signed and kept outside the log (the checkpoint store, or the
// API), and with --witness W against those a witness file holds: a log that
// ends before a checkpoint's head was cut. --witness W without --verify
// follows the tenant's checkpoints (the session's, with --session) and
// appends each new one to W, away from NATS, until interrupted.
//
//	go run ./cmd/callsheet-replay --list [--since T] [--until T] [--tool NAME] [--outcome O]
//	    [--limit N] [--cursor C] [--format json] [SOURCE]
//
// --list lists the tenant's sessions, newest first, from the search index
// the nodes keep as they write the log (GET /v1/sessions through --url).
// It says which tenant it listed; a store holding several tenants needs
// --tenant.
//
//	go run ./cmd/callsheet-replay --deletions [--verify [--pubkey K]] [--export] [--format json] [SOURCE]
//	go run ./cmd/callsheet-replay --deletions --verify --file deletions.ndjson --pubkey signing.pub
//
// --deletions prints the tenant's deletions log, a signed receipt per
// deleted session (GET /v1/deletions through --url); --verify checks its
// chain and, with --pubkey, its signatures; --export writes its receipts
// as stored, to check later with --verify --file (docs/audit.md).
//
// --format json prints exactly the bytes of GET /v1/sessions/{s}/transcript
// for the same log; --format html the timeline page of
// GET /v1/sessions/{s}/timeline; markdown (the default) the same facts as
// the page, as text (docs/audit.md). --verify prints every problem it finds and exits 1 if
// any is not a warning.
//
// Reading the log directly needs the node's NATS credentials (docs/spec.md
// §10). With --data of a running node, replay reads through that node's
// embedded server, whose URL and credentials file the data directory's lock
// record names (internal/datalock); of a stopped node, it takes the lock,
// reads DATA/credentials/nats.nk and starts its own embedded JetStream
// server on DATA's store. --nats and --nats-creds reach any server. A tenant's auditor, who holds the tenant's token
// and not the node's credentials, replays through the API with --url and
// --token (or $CALLSHEET_TOKEN): the same outputs, from the events the API
// serves for that tenant only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/datalock"
	"github.com/callsheet/callsheet/internal/version"
	"github.com/callsheet/callsheet/replay"
	"github.com/callsheet/callsheet/workspace"
)

// Program is the binary's name in --version and the flags' usage.
const Program = "callsheet-replay"

// Defaults of the flags.
const (
	DefaultDataDir = "./data"
	DefaultFormat  = FormatMarkdown
	// connectTimeout bounds connecting to --nats.
	connectTimeout = 5 * time.Second
	// TokenEnv names the environment variable --token defaults to: a
	// token on the command line is visible to every local user (ps,
	// /proc/PID/cmdline), one in the environment only to the user.
	TokenEnv = "CALLSHEET_TOKEN"
)

// Output formats.
const (
	FormatJSON     = "json"
	FormatMarkdown = "markdown"
	FormatHTML     = "html"
)

// ErrVerifyFailed is returned by Run when --verify found a problem; the
// problems have been printed.
var ErrVerifyFailed = errors.New("replay: the log failed verification")

func main() {
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
	if err := m.Run(ctx); errors.Is(err, ErrVerifyFailed) {
		os.Exit(1)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "callsheet-replay:", err)
		os.Exit(1)
	}
}

// Main is the replay program: ParseFlags, then Run. Not safe for concurrent
// use.
type Main struct {
	// Session is the session to rebuild; required.
	Session string
	// DataDir is the node's data directory, whose jetstream/ holds the
	// store; default DefaultDataDir. Ignored when NATSURL is set.
	DataDir string
	// NATSURL reads the log from a running NATS server instead.
	NATSURL string
	// NATSCredentials is the credentials file presented to NATSURL (an
	// nkey seed, such as a node's DATA/credentials/nats.nk, or a .creds
	// file); empty presents none.
	NATSCredentials string
	// URL reads the session's events through a node's HTTP API instead of
	// the log, as the tenant Token authenticates.
	URL string
	// Token is the tenant's bearer token for URL; default $CALLSHEET_TOKEN.
	Token string
	// Tenant owns the session; default config.DefaultTenant. With URL the
	// token names the tenant.
	Tenant string
	// Format is FormatMarkdown (the default), FormatJSON or FormatHTML.
	Format string
	// Verify checks the log instead of printing the transcript.
	Verify bool
	// Rewind restores Workspace to just before the call with this id, from
	// the checkpoints in the log (it records nothing in the log).
	Rewind     string
	RewindTurn string
	Workspace  string
	// Export writes the session's events as NDJSON instead of a transcript.
	Export bool
	// Sign, with URL, has the node sign the session's head first
	// (POST /v1/sessions/{s}/sign).
	Sign bool
	// File is an export to verify (with Verify), read instead of a log.
	File string
	// PublicKeys are key files signatures are checked with (--pubkey).
	PublicKeys []string
	// RequireChain fails a log without hash links.
	RequireChain bool
	// Witness is a witness file: with Verify, checkpoints to check the log
	// against; without, the file the tenant's checkpoints are appended to.
	Witness string
	// List lists sessions (GET /v1/sessions) instead, with these filters.
	List bool
	// Deletions prints, exports or verifies the tenant's deletions log
	// (GET /v1/deletions) instead.
	Deletions                                  bool
	Since, Until, Tool, Outcome, Limit, Cursor string
	// Version: print the build's version (--version) instead of running.
	Version bool

	// Stdout receives the transcript or the report; Stderr notes about an
	// export.
	Stdout, Stderr io.Writer

	tenantSet bool // --tenant was given
}

// NewMain returns a Main with the defaults, printing to os.Stdout.
func NewMain() *Main {
	return &Main{DataDir: DefaultDataDir, Tenant: config.DefaultTenant, Format: DefaultFormat, Token: os.Getenv(TokenEnv), Stdout: os.Stdout, Stderr: os.Stderr}
}

// ParseFlags reads the command line into m. It returns flag.ErrHelp for -h
// and an error saying what to fix for a missing --session, an unknown
// format, more than one of --data, --nats and --url, --nats-creds without
// --nats, --tenant with --url, a flag without the one it goes with, or a
// stray argument. A token is not required with --url: a node without
// tenants needs none, and one with tenants answers 401 naming it.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet(Program, flag.ContinueOnError)
	fs.StringVar(&m.Session, "session", m.Session, "session to rebuild (required)")
	fs.StringVar(&m.DataDir, "data", m.DataDir, "a node's data directory: while the node runs, replay reads through its embedded server, else it opens the store itself (needs the node's NATS credentials, DATA/credentials/nats.nk: run as the node's user)")
	fs.StringVar(&m.NATSURL, "nats", m.NATSURL, "URL of the NATS server holding the log (a running node's, or a cluster; nats://USER:PASSWORD@HOST:PORT for password auth)")
	fs.StringVar(&m.NATSCredentials, "nats-creds", m.NATSCredentials, "with --nats: the credentials file to present (a node's DATA/credentials/nats.nk, or a .creds file)")
	fs.StringVar(&m.URL, "url", m.URL, "base URL of a node's HTTP API (http://HOST:PORT): replay the events it serves to --token's tenant")
	fs.StringVar(&m.Token, "token", m.Token, "with --url: the tenant's bearer token (default $"+TokenEnv+", which other local users cannot see)")
	fs.StringVar(&m.Tenant, "tenant", m.Tenant, "tenant that owns the session (not with --url: the token names it)")
	fs.StringVar(&m.Format, "format", m.Format, "output format: markdown, json (byte-identical to GET /v1/sessions/{s}/transcript) or html (the timeline page of GET /v1/sessions/{s}/timeline)")
	fs.BoolVar(&m.Verify, "verify", m.Verify, "check the log's integrity instead; exit 1 if anything is wrong")
	fs.StringVar(&m.Rewind, "rewind", m.Rewind, "restore --workspace to just before this call id, from the log's checkpoints")
	fs.StringVar(&m.RewindTurn, "turn", m.RewindTurn, "with --rewind: the call's turn (default: the latest call with that id)")
	fs.StringVar(&m.Workspace, "workspace", m.Workspace, "with --rewind: the directory to restore (a copy, or the session's workspace while its node is stopped)")
	fs.BoolVar(&m.Export, "export", m.Export, "write the session's events as NDJSON (with their hash links and signatures), to check later with --verify --file")
	fs.BoolVar(&m.Sign, "sign", m.Sign, "with --url: have the node sign the session's head first (POST /v1/sessions/{s}/sign)")
	fs.StringVar(&m.File, "file", m.File, "with --verify: an export (callsheet-replay --export) to check, away from the fleet: no NATS, no node")
	fs.Func("pubkey", "with --verify: a public key file (the node's DATA/credentials/signing.pub) to check signatures with; repeat for several keys", func(v string) error {
		m.PublicKeys = append(m.PublicKeys, v)
		return nil
	})
	fs.BoolVar(&m.RequireChain, "require-chain", m.RequireChain, "with --verify: refuse a log whose events carry no hash links (written before the chain), instead of warning")
	fs.StringVar(&m.Witness, "witness", m.Witness, "a witness file of signed heads: with --verify, check the log against it (a log that ends before a witnessed head was cut); without, follow the tenant's checkpoints (the session's, with --session) and append each new one to it, away from NATS, until interrupted")
	fs.BoolVar(&m.List, "list", m.List, "list the tenant's sessions, newest first, as GET /v1/sessions does (filters: --since --until --tool --outcome --limit --cursor; --format json for the API's JSON)")
	fs.BoolVar(&m.Deletions, "deletions", m.Deletions, "the tenant's deletions log (GET /v1/deletions): print its receipts, or with --export write them as NDJSON, with --verify check their chain and (--pubkey) signatures, with --verify --file check an export")
	fs.StringVar(&m.Since, "since", m.Since, "with --list: sessions opened at or after this time (RFC 3339, or a date: its start in UTC)")
	fs.StringVar(&m.Until, "until", m.Until, "with --list: sessions opened before this time")
	fs.StringVar(&m.Tool, "tool", m.Tool, "with --list: sessions that called this tool (with --outcome: where a call of it ended so)")
	fs.StringVar(&m.Outcome, "outcome", m.Outcome, "with --list: sessions with a result of this outcome: ok, error, blocked or indeterminate")
	fs.StringVar(&m.Limit, "limit", m.Limit, "with --list: sessions per page (default 50, at most 1000)")
	fs.StringVar(&m.Cursor, "cursor", m.Cursor, "with --list: the next page, as the previous page printed it")
	fs.BoolVar(&m.Version, "version", m.Version, "print the version (module, VCS revision and time, Go) and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if m.Version {
		return nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	m.tenantSet = set["tenant"]
	sources := 0
	for _, name := range []string{"data", "nats", "url"} {
		if set[name] {
			sources++
		}
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("callsheet-replay: unexpected argument %q: every option is a flag (see -h)", fs.Arg(0))
	case m.Deletions && (m.Session != "" || m.List || m.Rewind != "" || m.Witness != "" || m.Sign || m.RequireChain):
		return errors.New("callsheet-replay: --deletions reads the tenant's deletions log: give it without --session, --list, --rewind, --witness, --sign or --require-chain")
	case m.Deletions && m.Format == FormatHTML:
		return errors.New("callsheet-replay: --deletions prints a table, or with --format json the API's JSON")
	case m.File != "" && !m.Verify:
		return errors.New("callsheet-replay: --file goes with --verify: callsheet-replay --verify --file EXPORT [--pubkey KEY]")
	case m.File != "" && sources > 0:
		return errors.New("callsheet-replay: --file is read instead of a log: give it without --data, --nats or --url")
	case m.RequireChain && !m.Verify:
		return errors.New("callsheet-replay: --require-chain goes with --verify")
	case len(m.PublicKeys) > 0 && !m.Verify && m.Witness == "":
		return errors.New("callsheet-replay: --pubkey goes with --verify (or --witness, whose checkpoints it then checks)")
	case m.Witness != "" && !m.Verify && (m.Export || m.Rewind != "" || m.List || m.File != "" || set["format"]):
		return errors.New("callsheet-replay: --witness without --verify follows the checkpoints into the file; give it without --export, --rewind, --list, --file or --format")
	case m.Witness != "" && !m.Verify && sources == 0:
		return errors.New("callsheet-replay: --witness FILE follows a node's checkpoints: give --nats (with --nats-creds) or --url")
	case m.Sign && m.URL == "":
		return errors.New("callsheet-replay: --sign needs --url: the node signs with its key (replay never writes the log)")
	case m.Export && (m.Verify || m.Rewind != "" || set["format"]):
		return errors.New("callsheet-replay: --export writes the events; give it without --verify, --rewind or --format")
	case !m.List && (m.Since != "" || m.Until != "" || m.Tool != "" || m.Outcome != "" || m.Limit != "" || m.Cursor != ""):
		return errors.New("callsheet-replay: --since, --until, --tool, --outcome, --limit and --cursor go with --list")
	case m.List && (m.Session != "" || m.Verify || m.Export || m.Rewind != "" || m.File != ""):
		return errors.New("callsheet-replay: --list lists sessions: give it without --session, --verify, --export, --rewind or --file")
	case m.List && m.Format == FormatHTML:
		return errors.New("callsheet-replay: --list prints a table, or with --format json the API's JSON")
	case m.Session == "" && m.File == "" && !m.List && !m.Deletions && (m.Witness == "" || m.Verify):
		return errors.New("callsheet-replay: --session is required: name the session to rebuild (or --list to find one)")
	case checkFormat(m.Format) != nil:
		return checkFormat(m.Format)
	case sources > 1:
		return errors.New("callsheet-replay: give one of --data, --nats and --url, not several")
	case m.NATSCredentials != "" && m.NATSURL == "":
		return errors.New("callsheet-replay: --nats-creds goes with --nats (with --data, replay reads DATA/credentials/nats.nk itself)")
	case m.URL != "" && set["tenant"]:
		return errors.New("callsheet-replay: --tenant does not go with --url: the token names the tenant")
	case m.Rewind != "" && m.Workspace == "":
		return errors.New("callsheet-replay: --rewind needs --workspace DIR, the directory to restore")
	}
	return nil
}

// Run reads the session's log (or, with m.URL, the events the API serves),
// then prints its transcript in m.Format, or with m.Verify the problems
// Verify finds (returning ErrVerifyFailed when one is not a warning). It
// fails when the store cannot be opened (a data directory a node is using
// is refused, naming --nats; credentials this process cannot read are
// refused, naming --url), when the server or the API refuses the
// credentials or token, or when the session has no events.
func (m *Main) Run(ctx context.Context) error {
	if m.Deletions {
		if err := natslog.ValidateIDs(m.Tenant, "x"); err != nil {
			return fmt.Errorf("--tenant %q: %w", m.Tenant, err)
		}
		return m.deletions(ctx)
	}
	if m.File != "" {
		return m.verifyFile()
	}
	if m.List {
		if err := natslog.ValidateIDs(m.Tenant, "x"); err != nil {
			return fmt.Errorf("--tenant %q: %w", m.Tenant, err)
		}
		return m.list(ctx)
	}
	if m.Witness != "" && !m.Verify && m.Session == "" {
		if err := natslog.ValidateIDs(m.Tenant, "x"); err != nil {
			return fmt.Errorf("--tenant %q: %w", m.Tenant, err)
		}
	} else if err := natslog.ValidateIDs(m.Tenant, m.Session); err != nil {
		return fmt.Errorf("--tenant %q --session %q: %w", m.Tenant, m.Session, err)
	}
	var src source
	if m.URL != "" {
		api, err := newAPISource(m.URL, m.Token)
		if err != nil {
			return err
		}
		if m.Sign {
			if err := m.sign(ctx, api); err != nil {
				return err
			}
			if !m.Export && !m.Verify {
				return nil
			}
		}
		src = api
	} else {
		nc, closeStore, err := m.open()
		if err != nil {
			return err
		}
		defer closeStore()
		src = &logSource{m: m, nc: nc}
	}
	if m.Witness != "" && !m.Verify {
		return m.witness(ctx, src)
	}
	evs, err := src.events(ctx, m.Session)
	if err != nil {
		return err
	}
	if m.URL != "" {
		// The API served the token's tenant's events; the envelope names it.
		m.Tenant = evs[0].Tenant
	}
	if m.Export {
		return m.export(evs)
	}
	if m.Verify {
		cps, err := src.checkpoints(ctx, m.Session)
		if err != nil {
			return fmt.Errorf("the session's checkpoints: %w", err)
		}
		return m.report(evs, cps, true)
	}
	if m.Rewind != "" {
		return m.rewind(ctx, src, evs)
	}
	out, err := render(m.Format, m.Tenant, m.Session, evs)
	if err != nil {
		return err
	}
	_, err = m.Stdout.Write(out)
	return err
}

// source is where replay reads a session: the log (logSource) or a node's
// API (apiSource).
type source interface {
	// events returns every event of the session, or an error saying why
	// there are none.
	events(ctx context.Context, session string) ([]events.Event, error)
	// object returns an object of the output store (a checkpoint's
	// pre-image).
	object(ctx context.Context, name string) ([]byte, error)
	// checkpoints returns the session's checkpoints the source holds
	// (witness.go); follow delivers the tenant's as they come.
	checkpoints(ctx context.Context, session string) ([]replay.Checkpoint, error)
	follow(ctx context.Context, session string) (<-chan events.Checkpoint, error)
}

// logSource reads the log through a NATS connection.
type logSource struct {
	m  *Main
	nc *nats.Conn
}

func (s *logSource) events(ctx context.Context, _ string) ([]events.Event, error) {
	return s.m.read(ctx, s.nc)
}

func (s *logSource) object(ctx context.Context, name string) ([]byte, error) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	objects, err := js.ObjectStore(ctx, "cs_outputs")
	if err != nil {
		return nil, fmt.Errorf("the store has no checkpoint objects (cs_outputs): %w", err)
	}
	return objects.GetBytes(ctx, name)
}

// open connects to the log's NATS server: --nats, or an embedded server on
// DATA/jetstream. The returned func releases what open started.
func (m *Main) open() (*nats.Conn, func(), error) {
	if m.NATSURL != "" {
		opts := []nats.Option{nats.Name("callsheet-replay"), nats.Timeout(connectTimeout)}
		if m.NATSCredentials != "" {
			creds, err := cluster.LoadCredentials(m.NATSCredentials)
			if err != nil {
				return nil, nil, fmt.Errorf("--nats-creds: %w", err)
			}
			opts = append(opts, creds.Option())
		}
		nc, err := nats.Connect(m.NATSURL, opts...)
		if cluster.RefusedCredentials(err) {
			given := "none were given"
			if m.NATSCredentials != "" {
				given = "it refused " + m.NATSCredentials
			}
			return nil, nil, fmt.Errorf("connect to --nats %s: the server requires the node's credentials and %s (%v): give --nats-creds FILE (a node's are DATA/credentials/nats.nk), or replay through the node's API with --url and the tenant's token", m.NATSURL, given, err)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("connect to --nats %s: %w", m.NATSURL, err)
		}
		return nc, nc.Close, nil
	}
	store := filepath.Join(m.DataDir, "jetstream")
	if fi, err := os.Stat(store); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("no JetStream store at %s: give the node's --data directory, or --nats with its server's URL", store)
	}
	// The data directory's lock (internal/datalock), as a node takes it: held
	// by a running node, replay reads through that node's embedded server;
	// free, replay holds it while its own server has the store open, so no
	// node starts on the store meanwhile.
	lock, err := datalock.Acquire(m.DataDir, datalock.Record{Program: datalock.ProgramReplay})
	var held *datalock.LockedError
	switch {
	case errors.As(err, &held):
		return m.openRunning(held)
	case errors.Is(err, os.ErrPermission):
		return nil, nil, fmt.Errorf("%w\nreading the log directly needs the node's user, who alone may read its NATS credentials: run replay as that user, or replay through the node's API with --url URL and the tenant's token ($%s)", err, TokenEnv)
	case err != nil:
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			lock.Release()
		}
	}()
	// The credentials first: a process that may not read them may not read
	// the log either, and should hear why rather than what failed later.
	credPath := cluster.DefaultCredentialsPath(m.DataDir)
	creds, err := cluster.EnsureCredentials(credPath)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, nil, fmt.Errorf("cannot read the node's NATS credentials: %w\nreading the log directly needs them: run replay as the node's user, or replay through the node's API with --url URL and the tenant's token ($%s)", err, TokenEnv)
		}
		return nil, nil, fmt.Errorf("the node's NATS credentials: %w", err)
	}
	// A process that has the store open without the lock (a node older
	// than the lock, or a program embedding a server on it).
	if pid, inUse := storeInUse(store); inUse {
		return nil, nil, fmt.Errorf("the store %s is in use by process %d, which does not hold %s: replay cannot open it beside that process without risking its data; read through its server instead with --nats <its URL>", store, pid, filepath.Join(m.DataDir, datalock.FileName))
	}
	srv, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: store, Port: -1, ServerName: "callsheet-replay", Credentials: creds})
	if err != nil {
		return nil, nil, fmt.Errorf("open the store %s: %w (if a node is running on it, use --nats <its URL>)", store, err)
	}
	nc, err := srv.Connect("callsheet-replay")
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	ok = true
	return nc, func() { nc.Close(); srv.Shutdown(); lock.Release() }, nil
}

// openRunning connects to the embedded server of the node holding the data
// directory's lock, with the credentials its record names. It refuses when
// the holder serves no embedded server there (it is starting, it is another
// replay, or the node uses --nats).
func (m *Main) openRunning(held *datalock.LockedError) (*nats.Conn, func(), error) {
	rec := held.Record
	switch {
	case !held.Known:
		return nil, nil, fmt.Errorf("%w: replay cannot open the store beside it; try again when it has stopped, or read through its server with --nats <its URL>", held)
	case rec.Program != datalock.ProgramNode:
		return nil, nil, fmt.Errorf("%w: replay cannot open the store beside it; try again when it has ended", held)
	case rec.NATS == "":
		return nil, nil, fmt.Errorf("%w, which runs no embedded JetStream server there (yet: a node records its server's URL once it listens; with --nats its log is on that cluster): try again in a moment, or give --nats <the cluster's URL> and --nats-creds", held)
	}
	credPath := rec.NATSCredentials
	if credPath == "" {
		credPath = cluster.DefaultCredentialsPath(m.DataDir)
	}
	creds, err := cluster.LoadCredentials(credPath)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, nil, fmt.Errorf("the data directory is in use by %s; reading through its server needs its NATS credentials: %w\nrun replay as the node's user, or replay through the node's API with --url URL and the tenant's token ($%s)", rec, err, TokenEnv)
		}
		return nil, nil, fmt.Errorf("the node's NATS credentials: %w", err)
	}
	nc, err := nats.Connect(rec.NATS, nats.Name("callsheet-replay"), nats.Timeout(connectTimeout), creds.Option())
	if err != nil {
		return nil, nil, fmt.Errorf("%w; its embedded server at %s did not answer: %v (is the node still starting, or stuck?)", held, rec.NATS, err)
	}
	fmt.Fprintf(m.Stderr, "callsheet-replay: %s is in use by %s: reading through its embedded JetStream at %s\n", held.Dir, rec, rec.NATS)
	return nc, nc.Close, nil
}

// read returns every event of the session, refusing a store without the
// event stream (so replay never creates one) or a session without events.
func (m *Main) read(ctx context.Context, nc *nats.Conn) ([]events.Event, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, natslog.DefaultStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("the store has no callsheet event log (stream %s): is this a callsheet node's store?", natslog.DefaultStream)
	} else if err != nil {
		return nil, fmt.Errorf("looking up the event stream: %w", err)
	}
	// natslog.New updates the stream to the configuration it is given: give
	// it the stream's own, so a reader never changes a fleet's replicas.
	sc := stream.CachedInfo().Config
	log, err := natslog.New(ctx, js, natslog.WithReplicas(max(sc.Replicas, 1)), natslog.WithDuplicateWindow(sc.Duplicates))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	evs, err := log.Read(ctx, m.Tenant, m.Session, 0)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("session %s of tenant %s has no events in the log: check --session and --tenant", m.Session, m.Tenant)
	}
	return evs, nil
}

// rewind restores m.Workspace to just before the call m.Rewind: the same
// plan and restore the node's POST /v1/sessions/{s}/rewind uses, with the
// pre-images from src.
func (m *Main) rewind(ctx context.Context, src source, evs []events.Event) error {
	st := core.NewSession(m.Tenant, m.Session)
	for _, ev := range evs {
		if err := st.Apply(ev); err != nil {
			return fmt.Errorf("rebuilding the session: %w (run with --verify)", err)
		}
	}
	_, files, err := core.RewindPlan(st, m.RewindTurn, m.Rewind)
	if err != nil {
		return err
	}
	// The directory is the operator's; inside it, every path is confined
	// as the node's own rewind confines it (docs/security.md, "Workspace").
	ws, err := workspace.OpenDir(m.Workspace)
	if err != nil {
		return fmt.Errorf("--workspace: %w", err)
	}
	defer ws.Close()
	res, err := replay.Restore(ctx, src.object, ws, files)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "rewound %s to just before call %s: restored %v, removed %v\n", ws.Path(), m.Rewind, res.Restored, res.Removed)
	return nil
}
