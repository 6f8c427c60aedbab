package main

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Namespace is the namespace the dev server creates and the peer uses.
const Namespace = "default"

// TunedPollRPS is what the tuned setting raises the history service's queue
// processors' poll rates to. Their default, 20 polls a second
// (history.transferProcessorMaxPollRPS and its siblings), is what bounds a
// default round trip near 50 ms: a task written by one call waits up to a
// poll period before the processor reads it (docs/performance.md, "peer").
const TunedPollRPS = 10_000

// pollRateKeys are the dynamic config keys TunedPollRPS sets: every queue
// processor of the history service that a workflow or a standalone activity
// goes through (transfer: workflow and activity tasks to matching; timer:
// timeouts; visibility: the executions' records; outbound: CHASM's tasks).
var pollRateKeys = []string{
	"history.transferProcessorMaxPollRPS",
	"history.timerProcessorMaxPollRPS",
	"history.visibilityProcessorMaxPollRPS",
	"history.outboundProcessorMaxPollRPS",
}

// Setting is one configuration of the peer: the server's dynamic config and
// SQLite's pragmas.
type Setting struct {
	// Name names the setting in rows ("default", "tuned-fsync", ...).
	Name string
	// PollRPS, if not 0, is the queue processors' poll rate (see
	// TunedPollRPS); 0 keeps the server's default.
	PollRPS int
	// Pragmas are SQLite pragmas passed through the connect attributes, as
	// the temporal CLI's --sqlite-pragma does; none keeps SQLite's defaults
	// (rollback journal, synchronous=FULL).
	Pragmas map[string]string
	// VisibilityApart puts the visibility store (the executions' list, with
	// some 80 indexes and two full-text tables in SQLite) in a database
	// file of its own: the dev server shares one file and one connection
	// between it and the executions, so a call's own writes queue behind
	// the visibility writes of the calls before it.
	VisibilityApart bool
	// Memory keeps the database in memory, as the temporal CLI's dev server
	// does without --db-filename: nothing survives the process.
	Memory bool
	// Persists says, for a row's conditions, what a commit makes durable.
	Persists string
}

// The settings the peer knows. default is the dev server as
// `temporal server start-dev --db-filename` runs it; the tuned ones are what
// an operator who wants speed would set, one per callsheet durability
// (docs/spec.md §4): fsync at every commit, or a periodic sync.
var settings = []Setting{
	{
		Name:     "default",
		Persists: "SQLite file with its defaults: rollback journal, synchronous=FULL (fsync at every commit); server's default poll rates (20/s)",
	},
	{
		Name:            "tuned-fsync",
		PollRPS:         TunedPollRPS,
		Pragmas:         map[string]string{"journal_mode": "wal", "synchronous": "full"},
		VisibilityApart: true,
		Persists:        fmt.Sprintf("SQLite files (executions; visibility apart), journal_mode=wal, synchronous=FULL (the WAL fsynced at every commit); queue processors' poll rates raised to %d/s", TunedPollRPS),
	},
	{
		Name:            "tuned-interval",
		PollRPS:         TunedPollRPS,
		Pragmas:         map[string]string{"journal_mode": "wal", "synchronous": "normal"},
		VisibilityApart: true,
		Persists:        fmt.Sprintf("SQLite files (executions; visibility apart), journal_mode=wal, synchronous=NORMAL (no fsync per commit: the WAL is fsynced at checkpoints); queue processors' poll rates raised to %d/s", TunedPollRPS),
	},
	{
		// Not durable: for reference, to show what the disk costs (the CLI's
		// default without --db-filename). Not in DefaultConfig.
		Name:            "tuned-memory",
		PollRPS:         TunedPollRPS,
		Memory:          true,
		VisibilityApart: true,
		Persists:        fmt.Sprintf("SQLite in memory (nothing survives the process: not durable), visibility apart; queue processors' poll rates raised to %d/s", TunedPollRPS),
	},
}

// settingNamed returns the setting called name.
func settingNamed(name string) (Setting, error) {
	for _, s := range settings {
		if s.Name == name {
			return s, nil
		}
	}
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = s.Name
	}
	return Setting{}, fmt.Errorf("unknown setting %q: use one of %s", name, strings.Join(names, ", "))
}

// DevServer is a Temporal server running in this process, built as the
// temporal CLI's dev server builds it (its internal/devserver package):
// frontend, history, matching and worker services on loopback ports, one
// history shard, SQLite persistence, no UI. Unlike the CLI's default, the
// database is a file, so that what it acknowledges is on disk.
type DevServer struct {
	// HostPort is the frontend's gRPC address.
	HostPort string
	srv      temporal.Server
}

// StartDevServer starts a dev server with its SQLite file in dir and waits
// until it serves. Stop it with Stop.
func StartDevServer(dir string, s Setting) (*DevServer, error) {
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	front, frontHTTP := ports[0], ports[1]
	const ip = "127.0.0.1"
	const clusterName = "active"
	sqlFile := func(name string) (*config.SQL, error) {
		if s.Memory {
			return &config.SQL{PluginName: sqliteplugin.PluginName, DatabaseName: name + strconv.Itoa(front),
				ConnectAttributes: map[string]string{"mode": "memory", "cache": "shared"}}, nil
		}
		c := &config.SQL{
			PluginName:        sqliteplugin.PluginName,
			DatabaseName:      filepath.Join(dir, name),
			ConnectAttributes: map[string]string{"mode": "rwc"},
		}
		maps.Copy(c.ConnectAttributes, s.Pragmas)
		if err := sqliteschema.SetupSchema(c); err != nil {
			return nil, fmt.Errorf("sqlite schema in %s: %w", c.DatabaseName, err)
		}
		return c, nil
	}
	sqlConf, err := sqlFile("temporal.db")
	if err != nil {
		return nil, err
	}
	stores := map[string]config.DataStore{"sqlite-default": {SQL: sqlConf}}
	visibility := "sqlite-default"
	if s.VisibilityApart {
		vis, err := sqlFile("visibility.db")
		if err != nil {
			return nil, err
		}
		visibility = "sqlite-visibility"
		stores[visibility] = config.DataStore{SQL: vis}
	}
	ns, err := sqliteschema.NewNamespaceConfig(clusterName, Namespace, false, nil)
	if err != nil {
		return nil, err
	}
	if err := sqliteschema.CreateNamespaces(sqlConf, ns); err != nil {
		return nil, fmt.Errorf("namespace %s: %w", Namespace, err)
	}

	var conf config.Config
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = ip
	conf.Persistence.DefaultStore = "sqlite-default"
	conf.Persistence.VisibilityStore = visibility
	conf.Persistence.NumHistoryShards = 1
	conf.Persistence.DataStores = stores
	conf.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             net.JoinHostPort(ip, strconv.Itoa(front)),
				HTTPAddress:            net.JoinHostPort(ip, strconv.Itoa(frontHTTP)),
				ClusterID:              "callsheet-bench-peer",
			},
		},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	svc := func(grpc, http int) config.Service {
		var c config.Service
		c.RPC.GRPCPort, c.RPC.HTTPPort, c.RPC.BindOnIP = grpc, http, ip
		return c
	}
	conf.Services = map[string]config.Service{
		"frontend": svc(front, frontHTTP),
		"history":  svc(ports[2], 0),
		"matching": svc(ports[3], 0),
		"worker":   svc(ports[4], 0),
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = net.JoinHostPort(ip, strconv.Itoa(front))

	hosts := map[primitives.ServiceName]static.Hosts{}
	for name, port := range map[primitives.ServiceName]int{
		primitives.FrontendService: front,
		primitives.HistoryService:  ports[2],
		primitives.MatchingService: ports[3],
		primitives.WorkerService:   ports[4],
	} {
		hosts[name] = static.SingleLocalHost(net.JoinHostPort(ip, strconv.Itoa(port)))
	}

	// The dev server's own dynamic config (the CLI sets these two), then
	// the setting's poll rates.
	dyn := dynamicconfig.StaticClient{
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                 8096,
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
	}
	if s.PollRPS > 0 {
		for _, k := range pollRateKeys {
			dyn[dynamicconfig.MakeKey(k)] = s.PollRPS
		}
	}

	srv, err := temporal.NewServer(
		temporal.WithConfig(&conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(serverLogger()),
		temporal.WithDynamicConfigClient(dyn),
	)
	if err != nil {
		return nil, fmt.Errorf("temporal server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start temporal server: %w", err)
	}
	return &DevServer{HostPort: conf.PublicClient.HostPort, srv: srv}, nil
}

// Stop stops every service of the server.
func (d *DevServer) Stop() error { return d.srv.Stop() }

// serverLogger writes the server's errors to stderr and drops the rest: at
// info level it logs every service's start-up and every shard movement.
func serverLogger() log.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.ErrorLevel)
	return log.NewZapLogger(zap.New(core))
}

// freePorts returns n distinct loopback ports that were free a moment ago,
// as the temporal CLI picks its services' ports: the server wants port
// numbers in its config, not listeners. All n are held open together, so
// they are distinct.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
