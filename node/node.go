package node

import (
	"github.com/nats-io/nats.go"

	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"github.com/callsheet/callsheet/events/natslog"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/callsheet/callsheet/decl"
	"github.com/callsheet/callsheet/internal/datalock"
	"github.com/callsheet/callsheet/internal/gopool"
	"github.com/callsheet/callsheet/internal/logging"
	"github.com/callsheet/callsheet/internal/opsmetrics"
	"github.com/callsheet/callsheet/internal/supervise"
	"github.com/callsheet/callsheet/tools/mcp"

	"github.com/anthdm/hollywood/actor"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/hooks"
	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// Defaults.
const (
	DefaultDataDir = "./data"
	// DefaultDrain is how long Close lets running calls finish.
	DefaultDrain = 10 * time.Second
	// GroupCommitAt is how many appends must be in flight before an
	// embedded fsync node groups them into one write: below it a batch
	// costs more than the separate publishes (docs/performance.md, "Group
	// commit").
	GroupCommitAt = 32
	// DefaultIdleTimeout is how long an idle session keeps its actor.
	DefaultIdleTimeout = 2 * time.Minute
	// replyTimeout bounds how long an API call waits for a session actor
	// to answer a query (not a turn: turns wait as long as their calls).
	replyTimeout = 30 * time.Second
)

// Options configure a Node. The zero value starts an embedded JetStream under
// ./data with the default config.
type Options struct {
	// DataDir holds the embedded JetStream store; default ./data.
	DataDir string
	// WorkspaceRoot holds the sessions' workspaces; default DATA/workspaces.
	WorkspaceRoot string
	// NATSURL uses an existing NATS server or cluster instead of the
	// embedded one.
	NATSURL string
	// NATSCredentials is a credentials file (docs/operations.md, "NATS
	// credentials"). For the embedded server: the nkey seed it admits and
	// the node connects with, created at first start if missing; default
	// DATA/credentials/nats.nk (cluster.DefaultCredentialsPath). Nodes of a
	// fleet are given the same file. With NATSURL: the nkey seed or .creds
	// file the node presents; empty presents none (the URL may carry
	// USER:PASSWORD).
	NATSCredentials string
	// Config is the validated config (config.DefaultConfig() if zero).
	Config *config.Config
	// Tools are extra tools to register beside the built-in ones.
	Tools []*tool.Tool
	// Name names this node in the fleet: in ownership records, claims,
	// request subjects and leases. Unique among the nodes of one NATS
	// cluster, and stable across restarts; 1..64 letters, digits, '_' or
	// '-'. Default: the host name (other characters become '-').
	Name string
	// Registerer receives the metrics; default a new registry (Gatherer
	// exposes it).
	Registerer prometheus.Registerer
	// Logger receives the node's log lines (docs/operations.md, "Logs"):
	// turns, approvals, denials, takeovers, leases, workers, MCP servers,
	// shutdown, and operational problems; default discards.
	Logger *slog.Logger
	// TracerProvider makes the spans of turns and calls (docs/operations.md,
	// "Traces"); default none (no span is made). The node does not shut it
	// down: its owner does, after Close.
	TracerProvider trace.TracerProvider
	// Hooks run around tool calls, before the config's external hooks.
	Hooks hooks.Set
	// Ripgrep is the rg 14+ binary for glob and grep; default: $CALLSHEET_RG,
	// else rg on PATH.
	Ripgrep string
	// Replicas is the replica count of the event stream, KV buckets and
	// object store this node creates (config "replicas" when 0); 0 picks 3
	// on a NATS cluster of 3 or more servers, else 1, and never scales an
	// existing stream down (docs/spec.md §7).
	Replicas int
	// ClusterListen, HOST:PORT, clusters the embedded server: its route
	// listener (--cluster-listen). Routes are the other nodes' route URLs,
	// nats-route://HOST:PORT (--routes). Ignored with NATSURL.
	ClusterListen string
	Routes        []string
	// SharedWorkspaces: every node of the fleet sees the same workspace
	// root (a shared file system at the same path), so any node may own any
	// session (--shared-workspaces). Without it a session stays with the
	// node that keeps its workspace (docs/spec.md §7).
	SharedWorkspaces bool
	// HTTPAdvertise is the URL of this node's API that the other nodes of
	// its fleet forward calls to (kept in its lease); empty: this node
	// cannot be forwarded to (a Go program without the HTTP API).
	HTTPAdvertise string
	// IdleTimeout passivates a session actor that has nothing in memory
	// but what the log holds for this long (it is rebuilt from the log on
	// its next message); default DefaultIdleTimeout, negative never.
	IdleTimeout time.Duration
	// ReadLinger bounds how long of a read-only, safe call's run a session
	// holds the append of its request, so that its outcome goes in the same
	// message, and, times 20, the hold while the call waits to start
	// (docs/architecture.md, "How a call reaches its tool actor"); 0 is
	// the default, 1 ms; negative never holds.
	ReadLinger time.Duration
	// SigningKey is the ed25519 key file session heads are signed with
	// (docs/audit.md): PEM PKCS#8, readable by its owner only. Default
	// DATA/credentials/signing.key, made at first start with its public key
	// beside it (signing.pub). A file named here must exist: nodes of a
	// fleet are given the fleet's key, and a node that made its own would
	// sign with a key nobody checks.
	SigningKey string
	// Sandbox is the sandbox shell and command tools run in; default one
	// built from Config's "sandbox" section, with the data dir, the
	// workspace root and Hidden absent from it.
	Sandbox *sandbox.Sandbox
	// Hidden are more paths sandboxed commands must not see (the config
	// file, credentials kept outside the data dir). Default: none.
	Hidden []string
	// WorkspaceOwner, when set and answering ok, names the uid and gid
	// given to the directories a new workspace of tenant's makes (the node
	// must run as root to give them away). Files and directories the file
	// tools and rewinds create in a workspace later take the owner of the
	// workspace's root directory whenever the node runs as root, so a
	// sandboxed command running as that owner can change them. Default:
	// the uid and gid the tenant's sandboxed commands run as
	// (Sandbox.Owner) on a root node; nothing on a node that is not root
	// (they run as its own uid).
	WorkspaceOwner func(tenant string) (uid, gid int, ok bool)
	// CheckpointInterval is the longest an active session's head waits to
	// be signed into a checkpoint, and CheckpointEvents how many events
	// make one due sooner (node/checkpoint.go; docs/audit.md); 0 takes
	// DefaultCheckpointInterval and DefaultCheckpointEvents. A negative
	// interval keeps no checkpoints (the bench's comparison).
	CheckpointInterval time.Duration
	CheckpointEvents   int
	// RetentionSweep is how often the node deletes the closed sessions
	// past their tenant's retention (node/retention.go); 0 is
	// DefaultRetentionSweep (30 s), negative never sweeps.
	RetentionSweep time.Duration
}

// Node is one callsheet node: the wiring of its collaborators, each a type
// of its own that owns what it starts. Its methods are safe for concurrent
// use.
type Node struct {
	opts        Options
	cfg         config.Config
	incarnation string // this process of the node (a ULID minted by New)
	logger      *slog.Logger

	store       *store    // the NATS connection, the log and the stores (store.go)
	tools       *surface  // the tool surface and the rules calls are planned with (surface.go)
	fleet       *fleet    // lease, members, owners index, caps, takeovers (fleet.go)
	reg         *registry // the session actors (registry.go)
	engine      *actor.Engine
	pools       *actors.Pools    // the tool actors
	ws          *workspaces      // the sessions' workspace handles (workspaces.go)
	quotas      *quotas          // what each tenant holds against its limits (limits.go)
	turns       *turnWatch       // turns whose calls count against limits (limits.go)
	sup         *supervise.Group // the node's own goroutines: the fleet's, turn watches, retries, timers
	hooks       *hookRunner      // before-, middleware and after-tool hooks (hooks.go)
	indexer     *indexer         // the session search index (search.go)
	checkpoints *checkpointer    // signed heads of active sessions; nil without (checkpoint.go)
	compactor   *compactor       // snapshots of passivated sessions (compact.go)
	goroutines  *gopool.Pool     // the actors' appends and calls (internal/gopool)
	metrics     *actors.Metrics
	ops         *opsmetrics.Set // the operator's metric families (opsmetrics.go)
	observer    *observer       // the log lines and spans of turns (observe.go)
	gather      prometheus.Gatherer
	signer      ed25519.PrivateKey
	box         *sandbox.Sandbox // the sandbox New made (nil when Options.Sandbox gave one): Close closes it
	dataLock    *datalock.Lock   // the data directory's lock, released last by Close (datalock.go)
	tenants     *tenantsWatch    // the tenants in force, re-read from a tenants_file (tenants.go)
	// gone are the sessions known to be deleted; deletions is the
	// deletions log, and deletionsSub the subscription that learns of
	// other nodes' deletions (deletion.go).
	gone         *tombstones
	deletions    *natslog.Deletions
	deletionsSub *nats.Subscription
}

// New starts a node: JetStream (embedded unless NATSURL is set), the log and
// the stores, the fleet, the tools, the actor engine and the tool actors;
// then it resumes every session whose log ends with work in flight. It
// assembles each collaborator and hands the actors theirs as interfaces
// (actors.Deps); Close stops them in order.
func New(ctx context.Context, opts Options) (_ *Node, err error) {
	defer code(&err)
	cfg, err := opts.complete()
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, incarnation: ulid.Make().String(), logger: logging.Or(opts.Logger), quotas: newQuotas(cfg.Limits), sup: supervise.New()}
	n.observer = newObserver(n.logger, opts.TracerProvider, opts.Name)
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.dataLock, err = lockData(opts); err != nil {
		return nil, err
	}
	if n.tenants, err = newTenantsWatch(cfg, n.logger.With("component", "tenants")); err != nil {
		return nil, err
	}
	n.gone = newTombstones()
	n.quotas.limitsFor = n.limitsFor
	if err := n.open(ctx, &opts); err != nil {
		return nil, err
	}
	n.opts = opts
	if err := n.startActors(ctx); err != nil {
		return nil, err
	}
	if err := n.startDeletions(ctx); err != nil {
		return nil, err
	}
	// In the background: in a fleet, a consumer whose leader was on a
	// killed server answers only after an election, and nothing waits for it.
	n.sup.Go(func(ctx context.Context) { n.store.dropOldConsumers(ctx, opts.Name, decl.Names(decl.Classes())) })
	if err := n.resume(ctx); err != nil {
		return nil, err
	}
	n.startRetention()
	return n, nil
}

// complete fills in the defaults of o and returns the config in force,
// validated; ErrInvalid for a bad node name.
func (o *Options) complete() (config.Config, error) {
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	// Absolute from here on: the sandbox refuses relative paths.
	var err error
	if o.DataDir, err = filepath.Abs(o.DataDir); err != nil {
		return config.Config{}, fmt.Errorf("%w: data dir %q: %v", ErrInvalid, o.DataDir, err)
	}
	if o.WorkspaceRoot == "" {
		o.WorkspaceRoot = filepath.Join(o.DataDir, "workspaces")
	}
	if o.Name == "" {
		o.Name = DefaultName()
	}
	if !validName(o.Name) {
		return config.Config{}, fmt.Errorf("%w: node name %q: use 1..64 letters, digits, '_' or '-' (--name)", ErrInvalid, o.Name)
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	cfg := config.DefaultConfig()
	if o.Config != nil {
		cfg = *o.Config
	}
	if err := cfg.Validate(); err != nil {
		return config.Config{}, err
	}
	if o.WorkspaceRoot, err = filepath.Abs(o.WorkspaceRoot); err != nil {
		return config.Config{}, err
	}
	return cfg, nil
}

// open opens what the node keeps and runs beside its actors: the workspace
// root, the sandbox and the tool surface, the signing key, the store and
// what is kept in it (the search index, the checkpoints, the snapshots, the
// harness tools). It completes opts with the workspace owner and the
// credentials used.
func (n *Node) open(ctx context.Context, opts *Options) (err error) {
	// The node's alone (docs/security.md "Workspace"): no local user
	// reaches a workspace, or anything a session left in one.
	if err := os.MkdirAll(opts.WorkspaceRoot, 0o700); err != nil {
		return fmt.Errorf("node: workspace root: %w", err)
	}
	if err := os.Chmod(opts.WorkspaceRoot, 0o700); err != nil {
		return fmt.Errorf("node: workspace root: %w", err)
	}
	// The sandbox knows the tenants in force at start (a tenants_file's).
	scfg := n.cfg
	scfg.Tenants = n.Tenants().Tenants
	box, err := newSandbox(*opts, scfg)
	if err != nil {
		return err
	}
	n.tenants.start(n.sup, func(ts map[string]config.Tenant) error { return checkTenants(box, ts) })
	if opts.Sandbox == nil {
		n.box = box
	}
	if opts.WorkspaceOwner == nil {
		// A root node gives new workspaces to the uid the tenant's
		// sandboxed commands run as, so that they can write them (and, as
		// package workspace keeps it, what the file tools create in them).
		opts.WorkspaceOwner = func(tenant string) (int, int, bool) {
			uid, gid := box.Owner(tenant)
			return uid, gid, os.Geteuid() == 0 && uid != 0
		}
	}
	if n.tools, err = newSurface(n.cfg, box, opts.Ripgrep, opts.Tools, n.logger); err != nil {
		return err
	}
	n.tools.limitsFor = n.limitsFor
	if n.signer, err = loadSigningKey(*opts, n.logger); err != nil {
		return err
	}
	if n.store, err = openStore(ctx, opts, n.cfg, n.logger); err != nil {
		return err
	}
	if err := recordServer(n.dataLock, opts.NATSURL, n.store.clientURL(), opts.NATSCredentials); err != nil {
		return err
	}
	n.indexer = newIndexer(n.store.search, n.store.log, n.logger.With("component", "search"))
	n.indexer.gone = n.gone
	if n.checkpoints, err = openCheckpoints(ctx, n.store, *opts, n.signer, n.gone, n.logger.With("component", "checkpoints")); err != nil {
		return err
	}
	n.compactor = newCompactor(n.store.log, n.logger)
	n.compactor.gone = n.gone
	if err := n.tools.startHarness(ctx, n.store.nc, n.store.js, n.store.replicas, n.store.await, n.taskSettled); err != nil {
		return err
	}
	if err := n.quotas.countOutputs(ctx, n.store.objects); err != nil {
		return fmt.Errorf("node: counting kept outputs: %w", err)
	}
	return nil
}

// startActors starts the actor engine and the collaborators the actors
// are given (actors.Deps): the session registry, the workspaces, the
// fleet, the hooks, the MCP servers' tools; then the tool actors.
func (n *Node) startActors(ctx context.Context) (err error) {
	opts, cfg := n.opts, n.cfg
	reg := opts.Registerer
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, n.gather = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		n.gather = g
	}
	n.metrics = actors.NewMetrics(reg)
	if err := n.registerOps(reg); err != nil {
		return err
	}
	n.indexer.setOps(n.ops)
	if n.engine, err = actor.NewEngine(actor.NewEngineConfig()); err != nil {
		return err
	}
	n.engine.Subscribe(n.engine.Spawn(func() actor.Receiver { return deadLetters{} }, "deadletters"))
	wsCache, err := workspace.NewCache(workspace.WithMaxIdle(workspaceHandles()))
	if err != nil {
		return err
	}
	n.reg = &registry{engine: n.engine, index: n.store.index, metrics: n.metrics, sup: n.sup, logger: n.logger, gone: n.gone,
		pids: map[cluster.SessionKey]*actor.PID{}, records: map[cluster.SessionKey]sessionRecord{}, onPassivate: n.compactor.add}
	n.ws = &workspaces{root: opts.WorkspaceRoot, owner: opts.WorkspaceOwner, cache: wsCache, reg: n.reg}
	n.reg.onStop = n.ws.drop
	if n.fleet, err = openFleet(ctx, n.store, n.reg, n.sup, opts, cfg.Fleet.LeaseTTL.Std(), n.incarnation, n.logger.With("component", "fleet"), n.ops, n.observer); err != nil {
		return err
	}
	registerLeaseMetrics(reg, n.fleet.lease)
	n.turns = &turnWatch{q: n.quotas, reg: n.reg, fleet: n.fleet, sup: n.sup}
	spill, err := spillDir(opts.DataDir)
	if err != nil {
		return err
	}
	n.hooks = &hookRunner{set: hookSet(opts.Hooks, cfg.Hooks), tools: n.tools, logger: n.logger}
	n.goroutines = gopool.New(0)
	deps := &actors.Deps{
		Log:        timedLog{n.store.log, n.ops},
		Objects:    outputStore{n.store.objects, n.quotas},
		Rules:      n.tools,
		Tools:      n.tools,
		Workspaces: n.ws,
		Clock:      clock{},
		Sessions:   n.reg,
		Fleet:      n.fleet,
		Quota:      n.quotas,
		Durable:    durables{n.indexer, n.checkpoints, n.observer, n.gone, n.compactor},
		Caps:       fleetCaps{c: n.fleet.caps, node: opts.Name, reaper: &n.fleet.reaper, logger: n.logger},
		Logger:     n.logger,
		Goroutines: n.goroutines,
		Metrics:    n.metrics,
		SigningKey: n.signer,
		Outputs: actors.Outputs{MaxBytes: cfg.ToolOutput.MaxBytes, MaxLines: cfg.ToolOutput.MaxLines, Store: outputBucket,
			MaxOutput: int64(cfg.Limits.OutputBytesPerCall), SpillDir: spill,
			MaxOutputFor: func(tenant string) int64 { return int64(n.limitsFor(tenant).OutputBytesPerCall) }},
		Node: opts.Name, Incarnation: n.incarnation,
		IdleTimeout: max(opts.IdleTimeout, 0),
		ReadLinger:  opts.ReadLinger,
	}
	if len(n.hooks.set.After) > 0 {
		deps.After = n.hooks
	}
	n.reg.deps = deps
	if err := n.tools.startMCP(ctx); err != nil {
		return err
	}
	n.pools = actors.NewPools(deps, n.workerSlots())
	deps.Calls = n.pools
	n.pools.Spawn(n.engine)
	// A new tenants table may change a tenant's share of the workers: a
	// request the old share held back may take a free worker now.
	n.tenants.onChange(n.pools.Reconsider)
	return nil
}

// workerSlots are the tool actors' workers of each class (limits.workers),
// and how many of them one tenant may hold, with the tenants in force
// (Config.TenantWorkers; a tenants_file's change applies at once:
// startActors has the pools reconsider their waiting requests).
func (n *Node) workerSlots() map[decl.Class]actors.Slots {
	slots := map[decl.Class]actors.Slots{}
	for _, c := range decl.Classes() {
		slots[c] = actors.Slots{Workers: n.cfg.Limits.Workers.Of(c), PerTenant: func(tenant string) int {
			return n.cfg.TenantWorkers(n.Tenants().Tenants, tenant, c)
		}}
	}
	return slots
}

// unopenedAfter is how old an index entry with nothing logged must be for
// a node starting to remove it (resume): an opening indexes its session
// before its first event, and one that failed between the two left the
// entry. A variable for tests.
var unopenedAfter = time.Hour

// resume spawns the actor of every session in the index that this node
// adopts (cluster.Route) and whose log ends with work in flight: each
// rebuilds from its log, takes ownership at the next epoch, and settles what
// its previous owner left running. The others are rebuilt from the log when
// next used.
func (n *Node) resume(ctx context.Context) error {
	entries, err := n.store.index.List(ctx)
	if err != nil {
		return fmt.Errorf("node: listing sessions: %w", err)
	}
	lasts := map[string]lastEvent{}
	defer func() { n.indexer.reconcile(lasts) }()
	for _, e := range entries {
		var rec sessionRecord
		if json.Unmarshal(e.Info, &rec) != nil {
			continue
		}
		if !n.fleet.adopts(e.Tenant, e.Session, false, "") {
			n.reg.remember(e.Tenant, e.Session, rec)
			continue
		}
		last, ok, err := n.store.log.Last(ctx, e.Tenant, e.Session)
		if err != nil {
			return fmt.Errorf("node: resuming session %s: %w", e.Session, err)
		}
		if ok {
			lasts[key(e.Tenant, e.Session)] = lastEvent{e.Tenant, e.Session, last.Seq}
		}
		// A session with nothing logged never opened (its opening failed
		// after it was indexed, and its caller was told so): it takes no
		// place and has nothing to settle; once it is old enough that no
		// opening can still be under way, its entry goes, and the empty
		// workspace the opening made for it.
		if !ok && time.Since(e.Created) >= unopenedAfter {
			gone, err := n.store.index.DeleteAt(ctx, e.Tenant, e.Session, e.Revision)
			if err != nil {
				n.logger.Warn("an unopened session's index entry stays", "tenant", e.Tenant, "session", e.Session, "err", err)
			}
			if gone {
				if err := n.ws.dropUnopened(e.Tenant, e.Session, rec.Workspace); err != nil {
					n.logger.Warn("an unopened session's workspace stays", "tenant", e.Tenant, "session", e.Session, "err", err)
				}
				continue
			}
		}
		n.reg.remember(e.Tenant, e.Session, rec)
		n.quotas.knowSession(e.Tenant, e.Session, !ok || closedBy(last))
		if !ok || settled(last.Type) {
			continue
		}
		if _, err := n.reg.Route(e.Tenant, e.Session); err != nil {
			return err
		}
	}
	return nil
}

// settled reports whether a log ending with an event of type t has no work
// in flight (a background job claimed before its turn completed is the
// exception: it is settled when the session is next used).
func settled(t events.Type) bool {
	switch t {
	case events.TypeTurnCompleted, events.TypeSessionOpened, events.TypeWorkspaceRewound, events.TypeSessionClosed, events.TypeHeadSigned:
		return true
	}
	return false
}

// Close stops the node, each collaborator after those that use it: the
// node's own goroutines (the fleet's, turn watches, retries, timers); the
// tool actors (they stop fetching and get DefaultDrain to finish their
// calls); in a fleet, the hand-over of every session and the release of the
// lease; the MCP servers and harness stores; the actors; the indexer and
// the compactor; the goroutine pool and the workspace handles; last the
// connection and the embedded server.
func (n *Node) Close() error {
	if n.reg != nil {
		if n.reg.isClosed() {
			return nil
		}
		n.reg.close()
	}
	if n.deletionsSub != nil {
		_ = n.deletionsSub.Unsubscribe()
	}
	n.sup.Close()
	if n.pools != nil {
		n.pools.Stop(DefaultDrain)
	}
	if n.fleet != nil {
		if n.engine != nil && n.fleet.lease != nil && n.store.inFleet() {
			// Hand the sessions over (docs/spec.md §7): the calls that
			// finished within the drain are recorded; each session records
			// OwnershipReleased, so the fleet takes it at once.
			n.fleet.releaseAll()
		}
		n.fleet.close()
		n.fleet.release()
	}
	if n.tools != nil {
		n.tools.close() // after the pools: no call runs on an MCP session or waits for a worker
	}
	if n.engine != nil {
		if n.pools != nil {
			n.pools.Poison()
		}
		for _, pid := range n.reg.live() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			<-n.engine.PoisonCtx(ctx, pid).Done()
			cancel()
		}
	}
	// The turns still open were not seen to their end here: their spans
	// end now, so that the tracer's owner flushes them after Close.
	n.observer.abandon("the node closed")
	if n.indexer != nil {
		n.indexer.stop()
	}
	if n.checkpoints != nil {
		n.checkpoints.stop()
	}
	if n.compactor != nil {
		n.compactor.stop()
	}
	if n.goroutines != nil {
		// After the pools and the session actors: nothing hands it work.
		n.goroutines.Close()
	}
	if n.ws != nil {
		// After the pools: no call holds a handle.
		_ = n.ws.cache.Close()
	}
	if n.box != nil {
		// After the workspaces: the tenants' disks it mounted.
		if err := n.box.Close(); err != nil {
			n.logger.Warn("closing the sandbox failed", "err", err)
		}
	}
	if n.store != nil {
		n.store.close()
	}
	_ = n.dataLock.Release() // last: the store is closed
	return nil
}

// clock is the actors' Clock: the system's time and ULIDs.
type clock struct{}

func (clock) Now() time.Time { return time.Now() }
func (clock) NewID() string  { return ulid.Make().String() }

// Gatherer returns the metrics registry when the node made its own.
func (n *Node) Gatherer() prometheus.Gatherer { return n.gather }

// Registry returns the node's tool registry.
func (n *Node) Registry() *tool.Registry { return n.tools.registry }

// Config returns the config in force.
func (n *Node) Config() config.Config { return n.cfg }

// Name names this node in the fleet.
func (n *Node) Name() string { return n.opts.Name }

// DefaultName is a node's name when none is given: the host name, with
// every character that cannot be in a name replaced by '-', at most 64
// characters; "node" when the host name is unknown.
func DefaultName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "node"
	}
	b := []byte(h)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

func validName(name string) bool { return len(name) <= 64 && events.ValidID(name) }

// NATSCredentials is the credentials file the node connects with (for the
// embedded server, the one it admits), or "" for none.
func (n *Node) NATSCredentials() string { return n.opts.NATSCredentials }

// ClientURL is the NATS URL other processes (cmd/callsheet-replay) can use, with the
// credentials of NATSCredentials, or "".
func (n *Node) ClientURL() string { return n.store.clientURL() }

// newSandbox builds the node's sandbox from the config (opts.Sandbox when
// given): the data dir, the workspace root, opts.Hidden, the signing key
// and the tenants_file are absent inside it.
func newSandbox(opts Options, cfg config.Config) (*sandbox.Sandbox, error) {
	if opts.Sandbox != nil {
		return opts.Sandbox, nil
	}
	sb := cfg.Sandbox
	if sb.Limits.TenantDiskMB > 0 && opts.SharedWorkspaces {
		return nil, fmt.Errorf("%w: sandbox.limits.tenant_disk_mb gives each tenant a disk on this node, which --shared-workspaces cannot share with the fleet: drop one", ErrInvalid)
	}
	var hidden []string
	paths := append([]string{opts.DataDir, opts.WorkspaceRoot}, opts.Hidden...)
	if opts.SigningKey != "" {
		// A key outside the data dir: whoever reads it can sign as the
		// node (docs/audit.md).
		paths = append(paths, opts.SigningKey)
	}
	if cfg.TenantsFile != "" {
		// The tenants' tokens (or their digests).
		paths = append(paths, cfg.TenantsFile)
	}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("node: sandbox: hidden path %q: %w", p, err)
		}
		hidden = append(hidden, abs)
	}
	tenants := slices.Sorted(maps.Keys(cfg.Tenants))
	if len(tenants) == 0 {
		tenants = []string{config.DefaultTenant}
	}
	box, err := sandbox.New(sandbox.Config{
		Network: sb.Network, UID: sb.UID, GID: sb.GID, ReadOnly: sb.ReadOnly, Hidden: hidden,
		UIDs:    sandbox.IDRange{First: sb.UIDs.First, Count: sb.UIDs.Count},
		Tenants: tenants, WorkspaceRoot: opts.WorkspaceRoot, RunDir: filepath.Join(opts.DataDir, "sandbox"),
		Cgroups: sb.Cgroups, TenantDisk: sb.Limits.TenantDiskMB << 20, DiskDir: filepath.Join(opts.DataDir, "disks"),
		Limits: sandbox.Limits{
			Processes:       sb.Limits.Processes,
			FileSize:        sb.Limits.FileSizeMB << 20,
			Memory:          sb.Limits.MemoryMB << 20,
			CPU:             time.Duration(sb.Limits.CPUSeconds) * time.Second,
			SandboxMemory:   sb.Limits.SandboxMemoryMB << 20,
			TenantProcesses: sb.Limits.TenantProcesses,
			TenantMemory:    sb.Limits.TenantMemoryMB << 20,
			NodeProcesses:   sb.Limits.NodeProcesses,
			NodeMemory:      sb.Limits.NodeMemoryMB << 20,
		},
		AcceptWeaker: sb.AcceptWeaker,
	})
	if err != nil {
		return nil, fmt.Errorf("node: sandbox: %w", err)
	}
	return box, nil
}

// Sandbox returns the sandbox shell and command tools run in: its Report is
// the start-up report of docs/operations.md.
func (n *Node) Sandbox() *sandbox.Sandbox { return n.tools.box }

// LiveSessions returns how many session actors this node holds in memory.
func (n *Node) LiveSessions() int { return n.reg.count() }

// ToolsFor returns the tools a model of agent in tenant's sessions is
// given, sorted by name: available to the agent (the tenant's harness tools
// included) and not deferred. ErrInvalid for an agent that is not
// configured.
func (n *Node) ToolsFor(tenant, agent string) (_ []*tool.Tool, err error) {
	defer code(&err)
	return n.tools.toolsFor(tenant, agent)
}

// MCPStatus returns the state of each configured MCP server, sorted by name
// (nil without any).
func (n *Node) MCPStatus() []mcp.Status {
	if n.tools.mcp == nil {
		return nil
	}
	return n.tools.mcp.Status()
}

// durables hands the session actors' durable batches to the search
// indexer, the checkpointer and the observer (actors.Durable).
type durables struct {
	index *indexer
	ckpt  *checkpointer // nil without checkpoints
	obs   *observer
	gone  *tombstones
	snap  *compactor
}

func (d durables) Durable(tenant, session string, evs []events.Event) {
	if d.gone.has(tenant, session) {
		return // deleted (deletion.go): nothing derived is written again
	}
	d.index.Durable(tenant, session, evs)
	if d.ckpt != nil {
		d.ckpt.durable(tenant, session, evs)
	}
	d.obs.Durable(tenant, session, evs)
	d.snap.durable(tenant, session, evs)
}

// timedLog is the event log, each append timed into
// callsheet_append_seconds.
type timedLog struct {
	events.Log
	ops *opsmetrics.Set
}

func (l timedLog) Append(ctx context.Context, tenant, session string, expectedLast uint64, evs []events.Event) error {
	start := time.Now()
	err := l.Log.Append(ctx, tenant, session, expectedLast, evs)
	if err == nil {
		l.ops.Appended(time.Since(start))
	}
	return err
}

// taskSettled counts how a harness tool's task settled, for the outcomes
// the API does not see (a worker's post counts completed and failed).
func (n *Node) taskSettled(tenant string, outcome harness.Settled) {
	switch outcome {
	case harness.SettledTimedOut:
		n.ops.Task(opsmetrics.TaskTimedOut, tenant, 1)
	case harness.SettledLost:
		n.ops.Task(opsmetrics.TaskLost, tenant, 1)
	}
}
