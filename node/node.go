package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/callsheet/callsheet/internal/gopool"

	"github.com/anthdm/hollywood/actor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/hooks"
	"github.com/callsheet/callsheet/internal/datalock"
	"github.com/callsheet/callsheet/internal/opsmetrics"
	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/tools"
	"github.com/callsheet/callsheet/tools/mcp"
	"github.com/callsheet/callsheet/workspace"
)

// Errors returned by the Node.
var (
	// ErrNotFound: the session, turn or output does not exist for the tenant.
	ErrNotFound = errors.New("node: not found")
	// ErrInvalid: the request is malformed; the message says what and where.
	ErrInvalid = errors.New("node: invalid request")
	// ErrClosed: the node is shutting down.
	ErrClosed = errors.New("node: closed")
	// ErrConflict: the request conflicts with the session's state (an
	// answer to a call that is not asking, a rewind while a turn runs).
	ErrConflict = errors.New("node: conflict")
	// ErrBusy: the session has too many turns waiting.
	ErrBusy = errors.New("node: busy")
)

// Defaults.
const (
	DefaultDataDir = "./data"
	// Node-wide caps of the tool actors, per concurrency class: how many
	// calls of all sessions this node runs at once. The per-session cap is
	// concurrency.tool_calls.
	DefaultExclusiveWorkers  = 64
	DefaultParallelWorkers   = 256
	DefaultBackgroundWorkers = 64
	// DefaultDrain is how long Close lets running calls finish.
	DefaultDrain = 10 * time.Second
	// GroupCommitAt is how many appends must be in flight before an
	// embedded fsync node groups them into one write: bench
	// groupcommit/fsync measured a batch of 8 at 0.43× the separate
	// publishes and one of 34 at 2.2×.
	GroupCommitAt = 32
	// DefaultIdleTimeout is how long an idle session keeps its actor.
	DefaultIdleTimeout = 2 * time.Minute
	// outputBucket is the object store of full outputs and pre-images.
	outputBucket = "cs_outputs"
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
	// Logf logs operational problems; default discards.
	Logf func(format string, args ...any)
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
	// ReadLinger bounds how long a session holds the append of a read-only,
	// safe call's request while the call runs, so that its outcome goes in
	// the same message (docs/architecture.md, "How a call reaches its tool
	// actor"); 0 is the default, 1 ms; negative never holds.
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
}

// Node is one callsheet node. Its methods are safe for concurrent use.
type Node struct {
	opts     Options
	cfg      config.Config
	box      *sandbox.Sandbox
	registry *tool.Registry
	// outsideDefault are registered tools that are not in the default
	// surface (reachable only through an agent's explicit list).
	outsideDefault map[string]bool

	server *cluster.Embedded
	nc     *nats.Conn
	js     jetstream.JetStream
	// replicaCount is the replica count of what this node creates.
	replicaCount int
	log          *natslog.Log
	objects      *natslog.Objects
	index        *natslog.Index
	search       *natslog.Search
	indexer      *indexer
	checkpoints  *checkpointer // nil without checkpoints (checkpoint.go)
	engine       *actor.Engine
	deps         *actors.Deps
	pools        []*actors.Pool
	poolPID      []*actor.PID
	streams      []events.RequestSource
	local        map[string]*actors.LocalRequests // class → its tool actor's requests (requests.go)
	gather       prometheus.Gatherer
	metrics      *actors.Metrics
	hooks        hooks.Set
	signer       ed25519.PrivateKey
	// mcp keeps the configured MCP servers' tools in the registry; nil
	// without any (node/mcp.go).
	mcp *mcp.Manager
	// hub hands harness tools' calls to external workers; harness keeps
	// their registrations (node/harness.go, docs/workers.md).
	hub     *harness.Hub
	harness *harness.Store

	// incarnation names this process of the node (a ULID minted by New):
	// a node restarted under the same name takes its sessions again.
	incarnation string
	// fleet is the node's lease, membership and owners index.
	fleet *fleet

	mu       sync.Mutex
	sessions map[string]*actor.PID    // tenant/session → live actor
	spawned  uint64                   // session actors spawned so far, for unique actor ids
	info     map[string]sessionRecord // tenant/session → index record
	closed   bool

	// quotas counts each tenant against the config's limits (limits.go);
	// watchers are the goroutines that wait for turns to complete to end
	// their count (watchTurn), cancelled by stopWatch in Close.
	quotas    *quotas
	watchers  sync.WaitGroup
	watchCtx  context.Context
	stopWatch context.CancelFunc

	// compactor writes the snapshot of each session that passivates
	// (compact.go).
	compactor *compactor
	// goroutines runs the actors' appends and calls (actors.Deps.Goroutines).
	goroutines *gopool.Pool
	// workspaces keeps one verified workspace handle per session, shared
	// by its calls (workspaces.go).
	workspaces *workspace.Cache
	// dataLock is the data directory's lock, released last by Close
	// (datalock.go).
	dataLock *datalock.Lock
	// ops are the operator's metric families (opsmetrics.go).
	ops *opsmetrics.Set
}

// sessionRecord is a session's entry in the index.
type sessionRecord struct {
	Workspace string    `json:"workspace"`
	Agent     string    `json:"agent,omitempty"`
	Created   time.Time `json:"created"`
}

// New starts a node: JetStream (embedded unless NATSURL is set), the log, the
// tools, the actor engine and the tool actors; then it resumes every session
// it finds in the index, settling what was in flight.
func New(ctx context.Context, opts Options) (_ *Node, err error) {
	if opts.DataDir == "" {
		opts.DataDir = DefaultDataDir
	}
	// Absolute from here on: the sandbox refuses relative paths.
	if opts.DataDir, err = filepath.Abs(opts.DataDir); err != nil {
		return nil, fmt.Errorf("%w: data dir %q: %v", ErrInvalid, opts.DataDir, err)
	}
	if opts.WorkspaceRoot == "" {
		opts.WorkspaceRoot = filepath.Join(opts.DataDir, "workspaces")
	}
	if opts.Name == "" {
		opts.Name = DefaultName()
	}
	if !validName(opts.Name) {
		return nil, fmt.Errorf("%w: node name %q: use 1..64 letters, digits, '_' or '-' (--name)", ErrInvalid, opts.Name)
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	cfg := config.DefaultConfig()
	if opts.Config != nil {
		cfg = *opts.Config
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	wsCache, err := workspace.NewCache()
	if err != nil {
		return nil, err
	}
	n := &Node{opts: opts, cfg: cfg, sessions: map[string]*actor.PID{}, info: map[string]sessionRecord{},
		hooks: hookSet(opts.Hooks, cfg.Hooks), quotas: newQuotas(cfg.Limits), incarnation: ulid.Make().String(),
		workspaces: wsCache}
	n.watchCtx, n.stopWatch = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.dataLock, err = lockData(opts); err != nil {
		return nil, err
	}
	if n.opts.WorkspaceRoot, err = filepath.Abs(opts.WorkspaceRoot); err != nil {
		return nil, err
	}
	// The node's alone (docs/security.md "Workspace"): no local user
	// reaches a workspace, or anything a session left in one.
	if err := os.MkdirAll(n.opts.WorkspaceRoot, 0o700); err != nil {
		return nil, fmt.Errorf("node: workspace root: %w", err)
	}
	if err := os.Chmod(n.opts.WorkspaceRoot, 0o700); err != nil {
		return nil, fmt.Errorf("node: workspace root: %w", err)
	}
	if n.box, err = n.newSandbox(); err != nil {
		return nil, err
	}
	if n.opts.WorkspaceOwner == nil {
		// A root node gives new workspaces to the uid sandboxed commands
		// run as, so that they can write them (and, as package workspace
		// keeps it, what the file tools create in them).
		n.opts.WorkspaceOwner = func(tenant string) (int, int, bool) {
			uid, gid := n.box.Owner(tenant)
			return uid, gid, os.Geteuid() == 0 && uid != 0
		}
	}
	if err := n.registerTools(); err != nil {
		return nil, err
	}
	if err := n.loadSigningKey(); err != nil {
		return nil, err
	}
	if err := n.connect(ctx); err != nil {
		return nil, err
	}
	if err := recordServer(n.dataLock, opts.NATSURL, n.ClientURL(), n.NATSCredentials()); err != nil {
		return nil, err
	}
	reg := opts.Registerer
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, n.gather = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		n.gather = g
	}
	// Before the fleet: its lease counts into the operator's families.
	if err := n.registerOps(reg); err != nil {
		return nil, err
	}
	if err := n.startFleet(ctx, n.js, n.replicaCount); err != nil {
		return nil, err
	}
	if err := n.quotas.countOutputs(ctx, n.objects); err != nil {
		return nil, fmt.Errorf("node: counting kept outputs: %w", err)
	}
	spill, err := spillDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	n.metrics = actors.NewMetrics(reg)
	registerLeaseMetrics(reg, n.fleet.lease)
	n.goroutines = gopool.New(0)
	n.deps = &actors.Deps{
		Goroutines: n.goroutines,
		Log:        n.log,
		Objects:    outputStore{n.objects, n.quotas},
		Settings:   n.settings,
		// Resolve, not Get: a call planned before an MCP server's tool list
		// (or a tenant's harness tools) changed still finds the tool it was
		// planned with.
		Tool:        n.registry.ResolveFor,
		AllTools:    n.searchable,
		Workspace:   n.workspaceOf,
		MaxBytes:    cfg.ToolOutput.MaxBytes,
		MaxLines:    cfg.ToolOutput.MaxLines,
		OutputStore: outputBucket,
		MaxOutput:   int64(cfg.Limits.OutputBytesPerCall),
		SpillDir:    spill,
		OutputQuota: n.quotas.keepOutput,
		Now:         time.Now,
		NewID:       func() string { return ulid.Make().String() },
		Metrics:     n.metrics,
		Logf:        opts.Logf,
		AfterTool:   n.afterTool,
		IdleTimeout: max(opts.IdleTimeout, 0),
		ReadLinger:  opts.ReadLinger,
		Passivate:   n.passivate,
		Node:        opts.Name,
		Incarnation: n.incarnation,
		Gate:        n.gate,
		Place:       n.place,
		Owned:       n.owned,
		Running:     n.running,
		Caps:        fleetCaps{c: n.fleet.caps, node: opts.Name},
		SigningKey:  n.signer,
		Durable:     n.durable,
		Dispatch:    n.dispatch,
		Revive:      n.revive,
		Interrupt: func(tenant, session string, ref events.CallRef) {
			for _, p := range n.pools {
				if p.Interrupt(tenant, session, ref) {
					return
				}
			}
		},
	}
	if n.engine, err = actor.NewEngine(actor.NewEngineConfig()); err != nil {
		return nil, err
	}
	dl := n.engine.Spawn(func() actor.Receiver { return deadLetters{} }, "deadletters")
	n.engine.Subscribe(dl)
	if err := n.startMCP(ctx); err != nil {
		return nil, err
	}
	if err := n.startPools(ctx); err != nil {
		return nil, err
	}
	if err := n.resume(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) registerTools() error {
	reg, _ := tool.NewRegistry()
	n.outsideDefault = map[string]bool{}
	defaults, outside, err := n.builtinTools()
	if err != nil {
		return err
	}
	for _, t := range defaults {
		if err := reg.Register(t); err != nil {
			return err
		}
	}
	for _, t := range outside {
		if err := reg.Register(t); err != nil {
			return err
		}
		n.outsideDefault[t.Name] = true
	}
	for i, ct := range n.cfg.CommandTools {
		t, err := tools.Command(tools.CommandSpec{
			Name: ct.Name, Description: ct.Description, ShortDescription: ct.ShortDescription,
			Guidelines: ct.Guidelines, Snippet: ct.Snippet, InputSchema: ct.InputSchema, Command: ct.Command,
			Effect: ct.Effect, Replay: ct.Replay, Concurrency: ct.Concurrency, Labels: ct.Labels,
			Timeout: ct.Timeout.Std(), Env: ct.Env, FleetCap: ct.FleetCap, FleetCapScope: ct.FleetCapScope,
			Unsandboxed: ct.Sandbox != nil && !*ct.Sandbox, Box: n.box,
			SelfConcurrency: ct.SelfConcurrency, Deferred: ct.Deferred, Escalation: ct.Escalation,
			MutatedPaths: ct.MutatedPaths, TouchedPaths: ct.TouchedPaths,
		})
		if err == nil {
			err = reg.Register(t)
		}
		if err != nil {
			return fmt.Errorf("config: command_tools[%d] (%s): %w", i, ct.Name, err)
		}
	}
	for _, t := range n.opts.Tools {
		if err := reg.Register(t); err != nil {
			return err
		}
	}
	// tool_search appears when deferred tools exist.
	for _, t := range reg.All() {
		if t.Deferred {
			ts, err := tools.ToolSearchTool()
			if err == nil {
				err = reg.Register(ts)
			}
			if err != nil {
				return err
			}
			break
		}
	}
	n.registry = reg
	return nil
}

// builtinTools returns the default tool surface and the registered slots
// outside it (reachable only through an agent's explicit tools list).
func (n *Node) builtinTools() (defaults, outside []*tool.Tool, err error) {
	add := func(dst *[]*tool.Tool, ts ...*tool.Tool) { *dst = append(*dst, ts...) }
	core, err := tools.Builtins()
	if err != nil {
		return nil, nil, err
	}
	for _, t := range core {
		if t.Name != "shell" {
			add(&defaults, t)
		}
	}
	shell, err := tools.ShellTool(tools.ShellOptions{Sandbox: n.cfg.Shell.Sandbox, Network: n.cfg.Shell.Network, Box: n.box})
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, shell)
	// glob and grep drive rg 14+; without it the node refuses to start
	// (the error says how to install it) rather than fall back to a slower
	// walker.
	rg := n.opts.Ripgrep
	if rg == "" {
		if rg, _, err = tools.FindRipgrep(); err != nil {
			return nil, nil, err
		}
	}
	// rg is confined by Landlock, or in the sandbox on a kernel without it.
	searchOpts := []tools.RipgrepOption{tools.RipgrepSandbox(n.box)}
	if slices.Contains(n.cfg.Sandbox.AcceptWeaker, sandbox.BoundaryLandlock) {
		searchOpts = append(searchOpts, tools.RipgrepUnconfined())
	}
	search, err := tools.SearchTools(rg, searchOpts...)
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, search...)
	patch, err := tools.PatchTool()
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, patch)
	fetch, err := tools.WebFetch(tools.WebOptions{AllowHosts: n.cfg.Web.AllowHosts})
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, fetch)
	// web_search and skill need a backend and directories from config;
	// without them they are not registered, so a call is blocked as
	// unavailable.
	if n.cfg.Web.SearchEndpoint != "" {
		ws, err := tools.WebSearch(n.cfg.Web.SearchEndpoint)
		if err != nil {
			return nil, nil, err
		}
		add(&defaults, ws)
	}
	if len(n.cfg.Skills.Dirs) > 0 {
		sk, err := tools.Skills(n.cfg.Skills.Dirs)
		if err != nil {
			return nil, nil, err
		}
		add(&defaults, sk)
	}
	work, err := tools.WorkStateTools()
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, work...)
	jobs, err := tools.JobTools()
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, jobs...)
	q, err := tools.QuestionTool()
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, q)
	if n.cfg.Memory {
		m, err := tools.MemoryProposeTool()
		if err != nil {
			return nil, nil, err
		}
		add(&defaults, m)
	}
	if ep := n.cfg.Delegate.Endpoint; ep != "" {
		t, err := tools.TaskTool(ep, n.cfg.Concurrency.Delegations, nil)
		if err != nil {
			return nil, nil, err
		}
		add(&defaults, t)
	}
	slots, err := tools.UnbackedSlots()
	if err != nil {
		return nil, nil, err
	}
	add(&outside, slots...)
	edit, err := tools.EditTool()
	if err != nil {
		return nil, nil, err
	}
	add(&outside, edit)
	return defaults, outside, nil
}

func (n *Node) connect(ctx context.Context) error {
	var err error
	if n.opts.NATSURL != "" {
		n.nc, err = n.dial("callsheet-node-" + n.opts.Name)
	} else {
		if n.opts.NATSCredentials == "" {
			n.opts.NATSCredentials = cluster.DefaultCredentialsPath(n.opts.DataDir)
		}
		// The embedded server admits only these credentials (docs/spec.md
		// §10 "Log"); cmd/replay reads the same file. In a fleet they also
		// guard the routes, so every node is given the same file.
		creds, cerr := cluster.EnsureCredentials(n.opts.NATSCredentials)
		if cerr != nil {
			return fmt.Errorf("node: nats credentials: %w", cerr)
		}
		n.server, err = cluster.StartEmbedded(cluster.EmbeddedOptions{
			StoreDir:      filepath.Join(n.opts.DataDir, "jetstream"),
			SyncAlways:    n.cfg.Durability != config.DurabilityInterval,
			ServerName:    n.opts.Name,
			Credentials:   creds,
			ClusterListen: n.opts.ClusterListen,
			Routes:        n.opts.Routes,
			Logf:          n.logf,
		})
		if err == nil {
			n.nc, err = n.server.Connect("callsheet-node")
		}
	}
	if err != nil {
		return fmt.Errorf("node: nats: %w", err)
	}
	js, err := jetstream.New(n.nc)
	if err != nil {
		return err
	}
	// A node started into a cluster waits until JetStream answers (a meta
	// leader needs a majority of the servers), and says what it waits for.
	if err := cluster.WaitJetStream(ctx, js, n.logf, n.clusterDetail); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	// Sequential appends: an atomic batch costs ~3 ms on a single-node file
	// store (the server stages each batch in a temporary store), a chain of
	// guarded publishes ~0.1 ms. The core decides every step from state, so a
	// log holding only the first part of an append resumes correctly.
	replicas := n.replicas(ctx, js)
	n.js, n.replicaCount = js, replicas
	logOpts := []natslog.Option{natslog.WithSequentialAppends(true), natslog.WithReplicas(replicas),
		natslog.WithWriter(n.opts.Name), natslog.WithDispatch(false)}
	if n.server != nil && replicas == 1 && n.cfg.Durability != config.DurabilityInterval {
		// fsync on a single-replica file store: every message is its own
		// fsync, so appends in flight together share one (natslog group
		// commit; docs/performance.md, "Group commit").
		logOpts = append(logOpts, natslog.WithGroupCommit(GroupCommitAt))
	}
	if n.inFleet() {
		logOpts = append(logOpts, natslog.WithTimeout(fleetLogTimeout))
	}
	what := fmt.Sprintf("the event stream %s (%d replicas)", natslog.DefaultStream, replicas)
	if err := n.await(ctx, what, func(ctx context.Context) (err error) {
		n.log, err = natslog.New(ctx, js, logOpts...)
		return err
	}); err != nil {
		return err
	}
	if err := n.await(ctx, "the object store "+outputBucket, func(ctx context.Context) (err error) {
		n.objects, err = n.log.Objects(ctx, outputBucket)
		return err
	}); err != nil {
		return err
	}
	if err := n.await(ctx, "the session index "+natslog.DefaultIndexBucket, func(ctx context.Context) (err error) {
		n.index, err = n.log.Index(ctx)
		return err
	}); err != nil {
		return err
	}
	if err := n.await(ctx, "the search index "+natslog.DefaultSearchBucket, func(ctx context.Context) (err error) {
		n.search, err = n.log.Search(ctx)
		return err
	}); err != nil {
		return err
	}
	n.indexer = newIndexer(n.search, n.log, n.logf)
	if err := n.startCheckpoints(ctx); err != nil {
		return err
	}
	n.compactor = newCompactor(n.log, n.logf)
	return n.startHarness(ctx, js, replicas)
}

func (n *Node) startPools(ctx context.Context) error {
	classes := []struct {
		class string
		cap   int
	}{
		{string(tool.ConcurrencyExclusive), DefaultExclusiveWorkers},
		{string(tool.ConcurrencyParallelSafe), DefaultParallelWorkers},
		{string(tool.ConcurrencyIsolatedBackground), DefaultBackgroundWorkers},
	}
	names := make([]string, 0, len(classes))
	for _, c := range classes {
		names = append(names, c.class)
		src := n.requests(c.class)
		p := actors.NewPool(n.deps, c.class, c.cap, src, n.route, n.opts.Name)
		n.pools = append(n.pools, p)
		n.poolPID = append(n.poolPID, n.engine.Spawn(p.Producer(), "tools", actor.WithID(c.class), actor.WithInboxSize(16)))
	}
	// In the background: in a fleet, a consumer whose leader was on a
	// killed server answers only after an election, and nothing waits for it.
	go n.dropOldConsumers(context.WithoutCancel(ctx), n.js, natslog.DefaultStream, names)
	return nil
}

// resume spawns the actor of every session in the index that this node
// should own and whose log ends with work in flight: each rebuilds from its
// log, takes ownership at the next epoch, and settles what its previous
// owner left running. Sessions a live node owns are its own; sessions of no
// live node go to the node Rendezvous picks.
func (n *Node) resume(ctx context.Context) error {
	entries, err := n.index.List(ctx)
	if err != nil {
		return fmt.Errorf("node: listing sessions: %w", err)
	}
	live := n.fleet.members.Names()
	if !slices.Contains(live, n.opts.Name) {
		live = append(live, n.opts.Name)
	}
	lasts := map[string]lastEvent{}
	defer func() { n.indexer.reconcile(lasts) }()
	for _, e := range entries {
		var rec sessionRecord
		if json.Unmarshal(e.Info, &rec) != nil {
			continue
		}
		n.mu.Lock()
		n.info[key(e.Tenant, e.Session)] = rec
		n.mu.Unlock()
		own, hinted := n.fleet.owners.Get(e.Tenant, e.Session)
		switch {
		case hinted && own.Node == n.opts.Name:
			// This node's, from an earlier process.
		case hinted && !own.Released && n.alive(own.Node):
			continue // a live node's
		case cluster.Rendezvous(e.Tenant, e.Session, live, own.WorkspaceNode, n.opts.SharedWorkspaces) != n.opts.Name:
			continue
		}
		// Only sessions whose log ends mid-work need their actor now; the
		// others are rebuilt from the log when next used.
		last, ok, err := n.log.Last(ctx, e.Tenant, e.Session)
		if err != nil {
			return fmt.Errorf("node: resuming session %s: %w", e.Session, err)
		}
		if ok {
			lasts[key(e.Tenant, e.Session)] = lastEvent{e.Tenant, e.Session, last.Seq}
		}
		n.quotas.knowSession(e.Tenant, e.Session, ok && closedBy(last))
		if ok && settled(last.Type) {
			continue
		}
		if _, err := n.route(e.Tenant, e.Session); err != nil {
			return err
		}
	}
	return nil
}

func key(tenant, session string) string { return tenant + "/" + session }

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

// passivate forgets a session's actor, if pid is still the one routed to.
func (n *Node) passivate(tenant, session string, pid *actor.PID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cur, ok := n.sessions[key(tenant, session)]; ok && cur == pid {
		delete(n.sessions, key(tenant, session))
	}
	if n.compactor != nil {
		n.compactor.add(tenant, session)
	}
}

// route returns the live actor of a session, spawning it if needed.
func (n *Node) route(tenant, session string) (*actor.PID, error) {
	k := key(tenant, session)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if pid, ok := n.sessions[k]; ok {
		return pid, nil
	}
	var pid *actor.PID
	stopped := func() {
		n.mu.Lock()
		if n.sessions[k] == pid {
			delete(n.sessions, k)
		}
		n.mu.Unlock()
		n.metrics.SessionLive(-1)
		// Passivated, retired, moved to another node or stopped with the
		// node: its workspace handle goes too (workspaces.go).
		n.workspaces.Drop(k)
	}
	// A session's inbox holds at most its queued turns, one claim and one
	// outcome per running call and one append ack: small by construction.
	//
	// Each incarnation gets its own actor id: a passivated actor lingers for
	// its retire grace under its old id, and hollywood answers a spawn with
	// an id still in use with that old, retired actor.
	n.spawned++
	pid = n.engine.Spawn(actors.NewSession(n.deps, tenant, session, stopped), "session",
		actor.WithID(fmt.Sprintf("%s.%s.%d", tenant, session, n.spawned)), actor.WithInboxSize(32), actor.WithMaxRestarts(0))
	n.sessions[k] = pid
	n.metrics.SessionLive(1)
	return pid, nil
}

// Close stops the node: the tool actors stop fetching and get DefaultDrain to
// finish their calls, the session actors stop, then JetStream.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.stopWatch()
	pids := make([]*actor.PID, 0, len(n.sessions))
	for _, pid := range n.sessions {
		pids = append(pids, pid)
	}
	n.mu.Unlock()
	n.watchers.Wait()
	for _, p := range n.pools {
		p.Stop(DefaultDrain)
	}
	for _, st := range n.streams {
		st.Stop()
	}
	if n.engine != nil && n.fleet != nil && n.fleet.lease != nil && n.inFleet() {
		// Hand the sessions over (docs/spec.md §7): the calls that finished
		// within the drain are recorded; each session records
		// OwnershipReleased, so the fleet takes it at once.
		n.releaseAll()
	}
	if n.fleet != nil {
		n.fleet.close()
		if n.fleet.lease != nil {
			// Delete the lease: the fleet takes what is left of this node's
			// sessions at once, not a TTL later.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := n.fleet.lease.Release(ctx); err != nil {
				n.logf("%v", err)
			}
			cancel()
		}
	}
	if n.mcp != nil {
		// After the pools: no call is left running on an MCP session.
		_ = n.mcp.Close()
	}
	if n.harness != nil {
		n.harness.Close()
	}
	if n.hub != nil {
		n.hub.Close() // after the pools: no harness call waits
	}
	if n.engine != nil {
		for _, pid := range n.poolPID {
			<-n.engine.Poison(pid).Done()
		}
		for _, pid := range pids {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			<-n.engine.PoisonCtx(ctx, pid).Done()
			cancel()
		}
	}
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
	if n.workspaces != nil {
		// After the pools: no call holds a handle.
		_ = n.workspaces.Close()
	}
	if n.box != nil && n.opts.Sandbox == nil {
		// After the workspaces: the tenants' disks it mounted.
		if err := n.box.Close(); err != nil {
			n.logf("%v", err)
		}
	}
	if n.nc != nil {
		_ = n.nc.Drain()
		n.nc.Close()
	}
	if n.server != nil {
		// In a fleet, hand the RAFT leaderships this server holds to the
		// others first, so they need not wait for an election.
		n.server.LameDuck()
	}
	_ = n.dataLock.Release() // last: the store is closed
	return nil
}

// Gatherer returns the metrics registry when the node made its own.
func (n *Node) Gatherer() prometheus.Gatherer { return n.gather }

// Registry returns the node's tool registry.
func (n *Node) Registry() *tool.Registry { return n.registry }

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

// ClientURL is the NATS URL other processes (cmd/replay) can use, with the
// credentials of NATSCredentials, or "".
func (n *Node) ClientURL() string {
	if n.server != nil {
		return n.server.ClientURL()
	}
	return n.opts.NATSURL
}

// tenantRoot is the directory under which tenant's workspaces live:
// ROOT/TENANT, apart from every other tenant's (docs/spec.md §10).
func (n *Node) tenantRoot(tenant string) string {
	return filepath.Join(n.opts.WorkspaceRoot, tenant)
}

// newSandbox builds the node's sandbox from the config (Options.Sandbox
// when given): the data dir, the workspace root, Options.Hidden and the
// signing key are absent inside it.
func (n *Node) newSandbox() (*sandbox.Sandbox, error) {
	if n.opts.Sandbox != nil {
		return n.opts.Sandbox, nil
	}
	sb := n.cfg.Sandbox
	if sb.Limits.TenantDiskMB > 0 && n.opts.SharedWorkspaces {
		return nil, fmt.Errorf("%w: sandbox.limits.tenant_disk_mb gives each tenant a disk on this node, which --shared-workspaces cannot share with the fleet: drop one", ErrInvalid)
	}
	var hidden []string
	paths := append([]string{n.opts.DataDir, n.opts.WorkspaceRoot}, n.opts.Hidden...)
	if n.opts.SigningKey != "" {
		// A key outside the data dir: whoever reads it can sign as the
		// node (docs/audit.md).
		paths = append(paths, n.opts.SigningKey)
	}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("node: sandbox: hidden path %q: %w", p, err)
		}
		hidden = append(hidden, abs)
	}
	tenants := slices.Sorted(maps.Keys(n.cfg.Tenants))
	if len(tenants) == 0 {
		tenants = []string{config.DefaultTenant}
	}
	box, err := sandbox.New(sandbox.Config{
		Network: sb.Network, UID: sb.UID, GID: sb.GID, ReadOnly: sb.ReadOnly, Hidden: hidden,
		UIDs:    sandbox.IDRange{First: sb.UIDs.First, Count: sb.UIDs.Count},
		Tenants: tenants, WorkspaceRoot: n.opts.WorkspaceRoot, RunDir: filepath.Join(n.opts.DataDir, "sandbox"),
		Cgroups: sb.Cgroups, TenantDisk: sb.Limits.TenantDiskMB << 20, DiskDir: filepath.Join(n.opts.DataDir, "disks"),
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
func (n *Node) Sandbox() *sandbox.Sandbox { return n.box }

// record returns a session's index record, from the cache or the index.
func (n *Node) record(ctx context.Context, tenant, session string) (sessionRecord, error) {
	k := key(tenant, session)
	n.mu.Lock()
	rec, ok := n.info[k]
	n.mu.Unlock()
	if ok {
		return rec, nil
	}
	b, err := n.index.Get(ctx, tenant, session)
	if err != nil {
		return sessionRecord{}, fmt.Errorf("%w: session %q of tenant %q", ErrNotFound, session, tenant)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return sessionRecord{}, fmt.Errorf("node: session %s index record: %w", session, err)
	}
	n.mu.Lock()
	n.info[k] = rec
	n.mu.Unlock()
	return rec, nil
}

// deadLetters answers session messages that reached an actor after it
// stopped, so no caller waits for a reply that cannot come.
type deadLetters struct{}

func (deadLetters) Receive(c *actor.Context) {
	if ev, ok := c.Message().(actor.DeadLetterEvent); ok {
		actors.Refuse(ev.Message, fmt.Errorf("%w: the session actor stopped; retry", actors.ErrSessionUnavailable))
	}
}

// LiveSessions returns how many session actors this node holds in memory.
func (n *Node) LiveSessions() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.sessions)
}

// searchable lists the tools tool_search may offer: every registered tool
// (deferred ones included) that is not switched off and has something
// behind it. An agent's own list still decides what a call may use.
func (n *Node) searchable() []*tool.Tool {
	var out []*tool.Tool
	for _, t := range n.registry.All() {
		if on, set := n.cfg.Tools[t.Name]; (set && !on) || tools.IsUnbacked(t.Name) || n.outsideDefault[t.Name] {
			continue
		}
		out = append(out, t)
	}
	return out
}
