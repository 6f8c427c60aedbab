// Command replay rebuilds a session from the event log alone (docs/spec.md §8) and
// prints its transcript, or checks the log's integrity.
//
//	go run ./cmd/replay --session S [--data DIR | --nats URL] [--tenant T]
//	    [--format json|markdown] [--verify]
//
// --format json prints exactly the bytes of GET /v1/sessions/{s}/transcript
// for the same log. --verify prints every problem it finds and exits 1 if
// any is not a warning.
//
// With --data, replay starts its own embedded JetStream server on DATA's
// store, which must not be in use: while a node runs on that directory,
// connect to the node's server with --nats instead.
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
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/replay"
	"github.com/callsheet/callsheet/workspace"
)

// Defaults of the flags.
const (
	DefaultDataDir = "./data"
	DefaultFormat  = FormatMarkdown
	// connectTimeout bounds connecting to --nats.
	connectTimeout = 5 * time.Second
)

// Output formats.
const (
	FormatJSON     = "json"
	FormatMarkdown = "markdown"
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
	if err := m.Run(ctx); errors.Is(err, ErrVerifyFailed) {
		os.Exit(1)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "callsheet replay:", err)
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
	// Tenant owns the session; default config.DefaultTenant.
	Tenant string
	// Format is FormatMarkdown (the default) or FormatJSON.
	Format string
	// Verify checks the log instead of printing the transcript.
	Verify bool
	// Rewind restores Workspace to just before the call with this id, from
	// the checkpoints in the log (it records nothing in the log).
	Rewind     string
	RewindTurn string
	Workspace  string

	// Stdout receives the transcript or the report.
	Stdout io.Writer
}

// NewMain returns a Main with the defaults, printing to os.Stdout.
func NewMain() *Main {
	return &Main{DataDir: DefaultDataDir, Tenant: config.DefaultTenant, Format: DefaultFormat, Stdout: os.Stdout}
}

// ParseFlags reads the command line into m. It returns flag.ErrHelp for -h
// and an error saying what to fix for a missing --session, an unknown
// format, both --data and --nats, or a stray argument.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("callsheet-replay", flag.ContinueOnError)
	fs.StringVar(&m.Session, "session", m.Session, "session to rebuild (required)")
	fs.StringVar(&m.DataDir, "data", m.DataDir, "data directory of a stopped node")
	fs.StringVar(&m.NATSURL, "nats", m.NATSURL, "URL of the NATS server holding the log (a running node's, or a cluster)")
	fs.StringVar(&m.Tenant, "tenant", m.Tenant, "tenant that owns the session")
	fs.StringVar(&m.Format, "format", m.Format, "output format: markdown or json (json is byte-identical to GET /v1/sessions/{s}/transcript)")
	fs.BoolVar(&m.Verify, "verify", m.Verify, "check the log's integrity instead; exit 1 if anything is wrong")
	fs.StringVar(&m.Rewind, "rewind", m.Rewind, "restore --workspace to just before this call id, from the log's checkpoints")
	fs.StringVar(&m.RewindTurn, "turn", m.RewindTurn, "with --rewind: the call's turn (default: the latest call with that id)")
	fs.StringVar(&m.Workspace, "workspace", m.Workspace, "with --rewind: the directory to restore (a copy, or the session's workspace while its node is stopped)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dataSet := false
	fs.Visit(func(f *flag.Flag) { dataSet = dataSet || f.Name == "data" })
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("callsheet replay: unexpected argument %q: every option is a flag (see -h)", fs.Arg(0))
	case m.Session == "":
		return errors.New("callsheet replay: --session is required: name the session to rebuild")
	case m.Format != FormatJSON && m.Format != FormatMarkdown:
		return fmt.Errorf("callsheet replay: --format %q: use markdown or json", m.Format)
	case dataSet && m.NATSURL != "":
		return errors.New("callsheet replay: give --data or --nats, not both")
	case m.Rewind != "" && m.Workspace == "":
		return errors.New("callsheet replay: --rewind needs --workspace DIR, the directory to restore")
	}
	return nil
}

// Run reads the session's log, then prints its transcript in m.Format, or
// with m.Verify the problems Verify finds (returning ErrVerifyFailed when
// one is not a warning). It fails when the store cannot be opened (a data
// directory a node is using is refused, naming --nats), or when the session
// has no events.
func (m *Main) Run(ctx context.Context) error {
	if err := natslog.ValidateIDs(m.Tenant, m.Session); err != nil {
		return fmt.Errorf("--tenant %q --session %q: %w", m.Tenant, m.Session, err)
	}
	nc, closeStore, err := m.open()
	if err != nil {
		return err
	}
	defer closeStore()
	evs, err := m.read(ctx, nc)
	if err != nil {
		return err
	}
	if m.Verify {
		return m.report(evs)
	}
	if m.Rewind != "" {
		return m.rewind(ctx, nc, evs)
	}
	tr, err := projections.Fold(m.Session, evs)
	if err != nil {
		return fmt.Errorf("rebuilding the transcript: %w (run with --verify for the log's problems)", err)
	}
	var out []byte
	if m.Format == FormatJSON {
		if out, err = projections.Marshal(tr); err != nil {
			return err
		}
	} else {
		out = replay.Markdown(tr)
	}
	_, err = m.Stdout.Write(out)
	return err
}

// open connects to the log's NATS server: --nats, or an embedded server on
// DATA/jetstream. The returned func releases what open started.
func (m *Main) open() (*nats.Conn, func(), error) {
	if m.NATSURL != "" {
		nc, err := nats.Connect(m.NATSURL, nats.Name("callsheet-replay"), nats.Timeout(connectTimeout))
		if err != nil {
			return nil, nil, fmt.Errorf("connect to --nats %s: %w", m.NATSURL, err)
		}
		return nc, nc.Close, nil
	}
	store := filepath.Join(m.DataDir, "jetstream")
	if fi, err := os.Stat(store); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("no JetStream store at %s: give the node's --data directory, or --nats with its server's URL", store)
	}
	if pid, ok := storeInUse(store); ok {
		return nil, nil, fmt.Errorf("the store %s is in use by process %d (a running node?): replay cannot open it beside the node without risking the node's data; read through the node's server instead with --nats <its URL>", store, pid)
	}
	srv, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: store, Port: -1, ServerName: "callsheet-replay"})
	if err != nil {
		return nil, nil, fmt.Errorf("open the store %s: %w (if a node is running on it, use --nats <its URL>)", store, err)
	}
	nc, err := srv.Connect("callsheet-replay")
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	return nc, func() { nc.Close(); srv.Shutdown() }, nil
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

// report prints Verify's problems and a summary line.
func (m *Main) report(evs []events.Event) error {
	ps := replay.Verify(m.Tenant, m.Session, evs)
	for _, p := range ps {
		fmt.Fprintln(m.Stdout, p)
	}
	failed := replay.Failed(ps)
	problems := 0
	for _, p := range ps {
		if !p.Warning {
			problems++
		}
	}
	if !failed {
		fmt.Fprintf(m.Stdout, "verified %d events of session %s (tenant %s): ok, %d warnings\n", len(evs), m.Session, m.Tenant, len(ps))
		return nil
	}
	fmt.Fprintf(m.Stdout, "verified %d events of session %s (tenant %s): %d problems, %d warnings\n", len(evs), m.Session, m.Tenant, problems, len(ps)-problems)
	return ErrVerifyFailed
}

// rewind restores m.Workspace to just before the call m.Rewind: the same
// plan and restore the node's POST /v1/sessions/{s}/rewind uses.
func (m *Main) rewind(ctx context.Context, nc *nats.Conn, evs []events.Event) error {
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
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	objects, err := js.ObjectStore(ctx, "cs_outputs")
	if err != nil {
		return fmt.Errorf("the store has no checkpoint objects (cs_outputs): %w", err)
	}
	get := func(ctx context.Context, name string) ([]byte, error) { return objects.GetBytes(ctx, name) }
	// The directory is the operator's; inside it, every path is confined
	// as the node's own rewind confines it (docs/security.md, "Workspace").
	ws, err := workspace.OpenDir(m.Workspace)
	if err != nil {
		return fmt.Errorf("--workspace: %w", err)
	}
	defer ws.Close()
	res, err := replay.Restore(ctx, get, ws, files)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "rewound %s to just before call %s: restored %v, removed %v\n", ws.Path(), m.Rewind, res.Restored, res.Removed)
	return nil
}
