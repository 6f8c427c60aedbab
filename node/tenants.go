package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/internal/supervise"
	"github.com/callsheet/callsheet/sandbox"
)

// TenantsPoll is how often a node reads its tenants_file to see whether it
// changed (docs/operations.md, "Rotating tokens"): a change is in force on
// every node within it and the time to read the file.
const TenantsPoll = time.Second

// Tenants is the table of tenants a node serves now: the config's, or its
// tenants_file as last read. A value is never changed; a reload publishes a
// new one, so a caller can tell a change by the pointer.
type Tenants struct {
	// Tenants by name; read only.
	Tenants map[string]config.Tenant
	// Multi: the node authenticates every request (config.MultiTenant):
	// false only for a node without tenants, which serves
	// config.DefaultTenant on loopback.
	Multi bool
	// Version counts the tables this node has put in force, from 1.
	Version uint64
}

// Tenants returns the tenants in force now. Safe for concurrent use.
func (n *Node) Tenants() *Tenants { return n.tenants.current() }

// ReloadTenants reads the tenants_file again now (cmd/callsheet-node does on
// SIGHUP) and puts it in force if it changed. A file that cannot be read or
// is not valid leaves the tenants in force as they were, and the error says
// why (with file, line and column). Without a tenants_file it does nothing.
func (n *Node) ReloadTenants() error {
	if err := n.tenants.reload(); err != nil {
		return &Error{Code: CodeInvalid, Message: err.Error(), err: err}
	}
	return nil
}

// limitsFor is the limits tenant runs under now: the node's, overridden
// field by field by the tenant's own (config.Config.LimitsFor).
func (n *Node) limitsFor(tenant string) config.Limits {
	return n.cfg.LimitsFor(n.Tenants().Tenants, tenant)
}

// tenantsWatch holds the tenants in force and, with a tenants_file, the
// goroutine that reads the file every TenantsPoll and puts a changed,
// valid table in force. close stops it.
type tenantsWatch struct {
	cfg  config.Config
	path string // the tenants_file; "" for the config's own tenants
	log  *slog.Logger
	cur  atomic.Pointer[Tenants]

	mu   sync.Mutex // one reload at a time
	seen [sha256.Size]byte
	// refused is why the content seen was not put in force (nil: it is).
	refused error
	// check, when set, refuses a table the node cannot serve without a
	// restart (Node.checkTenants).
	check func(map[string]config.Tenant) error
	// changed, when set (onChange), is told once a new table is in force;
	// under mu.
	changed func()
}

// newTenantsWatch puts the config's tenants in force, or reads the
// tenants_file (failing when it cannot) and starts watching it.
func newTenantsWatch(cfg config.Config, logger *slog.Logger) (*tenantsWatch, error) {
	w := &tenantsWatch{cfg: cfg, path: cfg.TenantsFile, log: logger}
	if w.path == "" {
		w.cur.Store(&Tenants{Tenants: cfg.Tenants, Multi: cfg.MultiTenant(), Version: 1})
		return w, nil
	}
	data, err := os.ReadFile(w.path)
	if err != nil {
		return nil, fmt.Errorf("node: tenants_file: %w", err)
	}
	ts, err := w.parse(data)
	if err != nil {
		return nil, err
	}
	w.seen = sha256.Sum256(data)
	w.cur.Store(&Tenants{Tenants: ts, Multi: true, Version: 1})
	w.log.Info("tenants_file read; read again periodically and on SIGHUP", "file", w.path, "tenants", describeTenants(ts), "version", 1, "poll", TenantsPoll)
	return w, nil
}

// start starts watching the tenants_file, if there is one, in a goroutine
// of sup, with check (which may be nil) refusing the tables the node
// cannot serve.
func (w *tenantsWatch) start(sup *supervise.Group, check func(map[string]config.Tenant) error) {
	w.check = check
	if w.path == "" {
		return
	}
	sup.Go(w.run)
}

func (w *tenantsWatch) current() *Tenants { return w.cur.Load() }

// onChange has f called after each new table is put in force.
func (w *tenantsWatch) onChange(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changed = f
}

// run reads the file every TenantsPoll until ctx ends.
func (w *tenantsWatch) run(ctx context.Context) {
	t := time.NewTicker(TenantsPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = w.reload()
		}
	}
}

// reload reads the file and puts it in force if its bytes changed and it is
// valid. A failure is logged once for each content of the file, and
// returned again while the file holds that content.
func (w *tenantsWatch) reload() error {
	if w.path == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := os.ReadFile(w.path)
	if err != nil {
		err = fmt.Errorf("node: tenants_file: %w; the tenants in force (version %d) stay", err, w.current().Version)
		if w.seen != ([sha256.Size]byte{}) {
			w.log.Warn("tenants_file unreadable", "err", err)
			w.seen = [sha256.Size]byte{}
		}
		return err
	}
	sum := sha256.Sum256(data)
	if sum == w.seen {
		return w.refused // read before (by the poll, or a SIGHUP)
	}
	w.seen, w.refused = sum, nil
	ts, err := w.parse(data)
	if err == nil && w.check != nil {
		if err = w.check(ts); err != nil {
			err = fmt.Errorf("node: tenants_file %s: %w", w.path, err)
		}
	}
	if err != nil {
		err = fmt.Errorf("%w; the tenants in force (version %d) stay until the file is fixed", err, w.current().Version)
		w.log.Warn("tenants_file refused", "err", err)
		w.refused = err
		return err
	}
	next := &Tenants{Tenants: ts, Multi: true, Version: w.current().Version + 1}
	w.cur.Store(next)
	w.log.Info("tenants_file changed", "file", w.path, "tenants", describeTenants(ts), "version", next.Version)
	if w.changed != nil {
		w.changed()
	}
	return nil
}

// parse checks the file's bytes as the config's tenants; errors name the
// file.
func (w *tenantsWatch) parse(data []byte) (map[string]config.Tenant, error) {
	ts, err := w.cfg.ParseTenants(bytes.Clone(data))
	if err != nil {
		var errs interface{ Unwrap() []error }
		var all []error
		if errors.As(err, &errs) {
			all = errs.Unwrap()
		} else {
			all = []error{err}
		}
		for _, e := range all {
			var ce *config.Error
			if errors.As(e, &ce) {
				ce.File = w.path
			}
		}
		return nil, err
	}
	return ts, nil
}

// describeTenants says how many tenants and tokens a table holds, never
// which tokens.
func describeTenants(ts map[string]config.Tenant) string {
	tokens := 0
	for name, t := range ts {
		tokens += len(t.Principals(name))
	}
	if len(ts) == 0 {
		return "no tenant: every request is refused (401)"
	}
	return fmt.Sprintf("%d tenants, %d tokens", len(ts), tokens)
}

// checkTenants refuses a table of tenants the node cannot serve without a
// restart: one whose tenants' sandbox uids collide (sandbox.Config's check
// at start), or, with a disk per tenant (sandbox.limits.tenant_disk_mb),
// one naming a tenant the node did not start with, whose disk it has not
// made.
func checkTenants(box *sandbox.Sandbox, ts map[string]config.Tenant) error {
	cfg := box.Config()
	started := cfg.Tenants
	cfg.Tenants = slices.Sorted(maps.Keys(ts))
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.TenantDisk > 0 {
		for _, t := range cfg.Tenants {
			if !slices.Contains(started, t) {
				return fmt.Errorf("tenant %q is new, and each tenant's disk (sandbox.limits.tenant_disk_mb) is made at start: restart the node to add a tenant", t)
			}
		}
	}
	return nil
}
