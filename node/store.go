package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/retry"
)

// store is where a node keeps what must outlive it: the NATS connection
// (to its embedded server, or to a cluster), and on it the event log, the
// object store of full outputs and pre-images, the session index and the
// session search index. openStore opens it; close drains the connection
// and stops the embedded server.
type store struct {
	server  *cluster.Embedded // nil with Options.NATSURL
	url     string            // Options.NATSURL
	routes  []string
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *natslog.Log
	objects *natslog.Objects
	index   *natslog.Index
	search  *natslog.Search
	// replicas is the replica count of what this node creates.
	replicas int
	logger   *slog.Logger
}

// outputBucket is the object store of full outputs and pre-images.
const outputBucket = "cs_outputs"

// fleetLogTimeout bounds each request of a fleet node's event log made
// without a deadline of its own (natslog.WithTimeout; a node alone keeps
// natslog.DefaultTimeout, 5 s): a request sent while the stream elects a
// leader is never answered, and only the next try reaches the new leader.
// Reads and guarded appends are safe to repeat, and an answer takes
// milliseconds when the stream has a leader.
const fleetLogTimeout = 2 * time.Second

// awaitAttempt bounds one try of await: a JetStream API request sent while
// a cluster's meta leader settles can go unanswered, and the next try does
// better than waiting on it.
const awaitAttempt = 5 * time.Second

// openStore connects to NATS (starting the embedded server unless
// opts.NATSURL is set, with the credentials it admits, made at first
// start), waits until JetStream answers, and opens the log and the stores,
// each as soon as the cluster can make it. It may update
// opts.NATSCredentials to the default file it used.
func openStore(ctx context.Context, opts *Options, cfg config.Config, logger *slog.Logger) (_ *store, err error) {
	s := &store{url: opts.NATSURL, routes: opts.Routes, logger: logger}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if opts.NATSURL != "" {
		nopts, cerr := credentialsOption(opts.NATSCredentials)
		if cerr != nil {
			return nil, cerr
		}
		s.nc, err = cluster.Connect(opts.NATSURL, "callsheet-node-"+opts.Name, nopts...)
	} else {
		if opts.NATSCredentials == "" {
			opts.NATSCredentials = cluster.DefaultCredentialsPath(opts.DataDir)
		}
		// The embedded server admits only these credentials (docs/spec.md
		// §10 "Log"); cmd/callsheet-replay reads the same file. In a fleet they also
		// guard the routes, so every node is given the same file.
		creds, cerr := cluster.EnsureCredentials(opts.NATSCredentials)
		if cerr != nil {
			return nil, fmt.Errorf("node: nats credentials: %w", cerr)
		}
		s.server, err = cluster.StartEmbedded(cluster.EmbeddedOptions{
			StoreDir:      filepath.Join(opts.DataDir, "jetstream"),
			SyncAlways:    cfg.Durability != config.DurabilityInterval,
			ServerName:    opts.Name,
			Credentials:   creds,
			ClusterListen: opts.ClusterListen,
			Routes:        opts.Routes,
			Logger:        logger.With("component", "jetstream"),
		})
		if err == nil {
			s.nc, err = s.server.Connect("callsheet-node")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("node: nats: %w", err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		return nil, err
	}
	// A node started into a cluster waits until JetStream answers (a meta
	// leader needs a majority of the servers), and says what it waits for.
	if err := cluster.WaitJetStream(ctx, s.js, logger, s.clusterDetail); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	s.replicas = s.replicaCount(ctx, opts, cfg)
	what := fmt.Sprintf("the event stream %s (%d replicas)", natslog.DefaultStream, s.replicas)
	if err := s.await(ctx, what, func(ctx context.Context) (err error) {
		s.log, err = natslog.New(ctx, s.js, s.logOptions(opts.Name, cfg)...)
		return err
	}); err != nil {
		return nil, err
	}
	if err := s.await(ctx, "the object store "+outputBucket, func(ctx context.Context) (err error) {
		s.objects, err = s.log.Objects(ctx, outputBucket)
		return err
	}); err != nil {
		return nil, err
	}
	if err := s.await(ctx, "the session index "+natslog.DefaultIndexBucket, func(ctx context.Context) (err error) {
		s.index, err = s.log.Index(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	if err := s.await(ctx, "the search index "+natslog.DefaultSearchBucket, func(ctx context.Context) (err error) {
		s.search, err = s.log.Search(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// logOptions are the options a node opens its log with; the conformance
// suite runs both modes they make (events/natslog, forModes): sequential
// appends (an atomic batch costs ~3 ms on a single-node file store, a chain
// of guarded publishes ~0.1 ms; the core decides every step from state, so
// a log holding only the first part of an append resumes correctly), and on
// an embedded single-replica store with fsync, the same through the group
// committer (every message is its own fsync there, so appends in flight
// together share one).
func (s *store) logOptions(name string, cfg config.Config) []natslog.Option {
	opts := []natslog.Option{natslog.WithSequentialAppends(true), natslog.WithReplicas(s.replicas), natslog.WithWriter(name)}
	if s.server != nil && s.replicas == 1 && cfg.Durability != config.DurabilityInterval {
		opts = append(opts, natslog.WithGroupCommit(GroupCommitAt))
	}
	if s.inFleet() {
		opts = append(opts, natslog.WithTimeout(fleetLogTimeout))
	}
	return opts
}

// inFleet reports whether other nodes may share this node's NATS: a
// clustered embedded server, or --nats. A node alone on its own embedded
// server has nobody to hand sessions to.
func (s *store) inFleet() bool {
	return s.url != "" || (s.server != nil && s.server.Options().Clustered())
}

// standalone reports whether the node runs the only server there is: its
// store is locked by this process.
func (s *store) standalone() bool {
	return s.server != nil && !s.server.Options().Clustered()
}

// clientURL is the NATS URL other processes (cmd/callsheet-replay) can use.
func (s *store) clientURL() string {
	if s.server != nil {
		return s.server.ClientURL()
	}
	return s.url
}

// clusterDetail says, while the node waits for JetStream, how far the
// embedded server got with its routes.
func (s *store) clusterDetail() string {
	if s.server == nil || !s.server.Options().Clustered() {
		return "no route to wait for"
	}
	return fmt.Sprintf("%d route connections up (routes %v; every node of a fleet needs the same --nats-creds)", s.server.Routes(), s.routes)
}

// await runs f until it succeeds or ctx ends, saying every
// cluster.WaitEvery what it waits for. A cluster creates streams only once
// it has enough servers for their replicas, and elects their leaders in its
// own time.
func (s *store) await(ctx context.Context, what string, f func(ctx context.Context) error) error {
	return s.awaitWithin(ctx, what, awaitAttempt, f)
}

// awaitWithin is await with each try bounded by attempt. An error marked
// permanent, and any error of a node without a NATS server to wait for, is
// returned at once.
func (s *store) awaitWithin(ctx context.Context, what string, attempt time.Duration, f func(ctx context.Context) error) error {
	var last time.Time
	given := false // the error is returned as it is, not as a wait that ended
	err := retry.Do(ctx, awaitBackoff, 0, func(ctx context.Context, _ int) error {
		fctx, cancel := context.WithTimeout(ctx, attempt)
		err := f(fctx)
		cancel()
		var perm permanent
		switch {
		case err == nil, ctx.Err() != nil:
			return err
		case errors.As(err, &perm):
			given = true
			return retry.Permanent(perm.error)
		case s.server == nil && s.url == "":
			given = true
			return retry.Permanent(err)
		}
		if time.Since(last) >= cluster.WaitEvery {
			s.logger.Info("waiting", "for", what, "err", err, "detail", s.clusterDetail())
			last = time.Now()
		}
		return err
	})
	if err != nil && !given {
		return fmt.Errorf("node: waiting for %s: %w", what, err)
	}
	return err
}

// awaitBackoff spaces await's tries.
var awaitBackoff = retry.Backoff{Initial: 250 * time.Millisecond}

// permanent marks an error await does not retry.
type permanent struct{ error }

// replicaCount is the replica count of what this node creates: the
// configured one, else 3 on a cluster of 3 or more servers, else 1; an
// existing stream keeps a larger count, so a node started without saying
// never scales a fleet's log down.
func (s *store) replicaCount(ctx context.Context, opts *Options, cfg config.Config) int {
	want := opts.Replicas
	if want == 0 {
		want = cfg.Replicas
	}
	if want > 0 {
		return want
	}
	want = 1
	if s.clusterSize(opts) >= 3 {
		want = 3
	}
	if st, err := s.js.Stream(ctx, natslog.DefaultStream); err == nil {
		want = max(want, st.CachedInfo().Config.Replicas)
	}
	return want
}

// clusterSize is how many servers the node's NATS cluster has, as far as it
// can tell at start: with --nats, the servers the connection knows of; with
// a clustered embedded server, its routes' distinct addresses plus itself.
func (s *store) clusterSize(opts *Options) int {
	if opts.NATSURL != "" {
		return len(s.nc.Servers())
	}
	if opts.ClusterListen == "" {
		return 1
	}
	self := opts.ClusterListen
	if a := s.server.ClusterAddr(); a != nil {
		self = a.String()
	}
	seen := map[string]bool{}
	for _, r := range opts.Routes {
		u, err := url.Parse(r)
		if err != nil {
			continue
		}
		seen[u.Host] = true
	}
	if !seen[self] && !seen[loopbackAlias(self)] {
		seen[self] = true
	}
	return len(seen)
}

// loopbackAlias spells a loopback HOST:PORT the other usual way (localhost
// and 127.0.0.1), so a node given its own route is not counted twice.
func loopbackAlias(hp string) string {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return hp
	}
	switch host {
	case "127.0.0.1":
		return net.JoinHostPort("localhost", port)
	case "localhost":
		return net.JoinHostPort("127.0.0.1", port)
	}
	return hp
}

// dropOldConsumers deletes the JetStream request consumers an earlier
// version of callsheet kept for this node (one per class, replicated in a
// fleet): nothing reads them now, and each replicated consumer is a Raft
// group the servers keep. Best effort: a consumer left behind goes away by
// itself after its inactive threshold (24 h).
func (s *store) dropOldConsumers(ctx context.Context, name string, classes []string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, c := range classes {
		err := s.js.DeleteConsumer(ctx, natslog.DefaultStream, "cs-req-"+c+"-"+name)
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			s.logger.Info("dropping an old request consumer failed; it expires by itself", "class", c, "err", err)
		}
	}
}

// close closes the log (its watches and group committer end), drains the
// connection, then hands the embedded server's RAFT leaderships over (in a
// fleet) and stops it.
func (s *store) close() {
	if s.log != nil {
		_ = s.log.Close()
	}
	if s.nc != nil {
		_ = s.nc.Drain()
		s.nc.Close()
	}
	if s.server != nil {
		s.server.LameDuck()
	}
}
