package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/retry"
	"github.com/callsheet/callsheet/internal/supervise"
	"github.com/callsheet/callsheet/projections"
)

// quotas counts what each tenant holds against its limits. Counts are this
// node's view: at start, the sessions of the index and the outputs of the
// object store; then what this node opens, closes, runs and keeps. In a
// fleet each node counts on its own (docs/operations.md, "Limits"). It is
// safe for concurrent use.
type quotas struct {
	lim config.Limits
	// limitsFor, when set, is the limits a tenant runs under now (its own
	// over lim: Node.limitsFor); else lim.
	limitsFor func(tenant string) config.Limits

	mu     sync.Mutex
	open   map[string]int   // tenant → open sessions
	opened map[string]bool  // tenant/session → counted in open
	flight map[string]int   // tenant → calls of turns received and not completed
	turns  map[turnKey]int  // a turn → its calls, counted in flight
	kept   map[string]int64 // tenant → bytes of full outputs in the object store
}

// key names the config key of the limit name as tenant runs under it:
// its own (tenants.TENANT.limits.NAME) when its config sets one, else the
// node's (limits.NAME).
func (q *quotas) key(tenant, name string) string {
	if q.limitsFor != nil && limitField(q.limitsFor(tenant), name) != limitField(q.lim, name) {
		return "tenants." + tenant + ".limits." + name
	}
	return "limits." + name
}

// limitField is the value of l's field of config key name.
func limitField(l config.Limits, name string) int {
	switch name {
	case "body_bytes":
		return l.BodyBytes
	case "calls_per_turn":
		return l.CallsPerTurn
	case "output_bytes_per_call":
		return l.OutputBytesPerCall
	case "output_bytes_per_tenant":
		return l.OutputBytesPerTenant
	case "sessions_per_tenant":
		return l.SessionsPerTenant
	case "calls_in_flight_per_tenant":
		return l.CallsInFlightPerTenant
	}
	return 0
}

// limits is the limits tenant runs under now.
func (q *quotas) limits(tenant string) config.Limits {
	if q.limitsFor != nil {
		return q.limitsFor(tenant)
	}
	return q.lim
}

func newQuotas(lim config.Limits) *quotas {
	return &quotas{lim: lim, open: map[string]int{}, opened: map[string]bool{}, flight: map[string]int{}, turns: map[turnKey]int{}, kept: map[string]int64{}}
}

// knowSession counts a session found in the index at start, unless it is
// closed.
func (q *quotas) knowSession(tenant, session string, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := key(tenant, session)
	if closed || q.opened[k] {
		return
	}
	q.opened[k] = true
	q.open[tenant]++
}

// reserveSession takes a place for a session the tenant is opening, or
// refuses with ErrLimited. markOpened or release must follow.
func (q *quotas) reserveSession(tenant string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.open[tenant]; n >= q.limits(tenant).SessionsPerTenant {
		k := q.key(tenant, "sessions_per_tenant")
		return fmt.Errorf("%w: tenant %s has %d open sessions, the limit %s: close one (POST /v1/sessions/{s}/close) before opening another, or ask the operator to raise %s",
			ErrLimited, tenant, n, k, k)
	}
	q.open[tenant]++
	return nil
}

// opened records that the reserved place belongs to session.
func (q *quotas) markOpened(tenant, session string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.opened[key(tenant, session)] = true
}

// release gives back a reserved place whose session was not opened.
func (q *quotas) release(tenant string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.open[tenant]--
}

// closed frees the place of a session that was closed.
func (q *quotas) closed(tenant, session string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := key(tenant, session)
	if q.opened[k] {
		delete(q.opened, k)
		q.open[tenant]--
	}
}

// admitTurn counts a turn's calls as in flight, or refuses with ErrLimited
// when they would take the tenant past limits.calls_in_flight_per_tenant.
// A turn already counted (posted again) is admitted without counting it
// twice; counted says whether this call counted it, so the caller knows to
// end it with turnDone.
func (q *quotas) admitTurn(tenant, session, turn string, calls int) (counted bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := turnKey{tenant, session, turn}
	if _, ok := q.turns[k]; ok {
		return false, nil
	}
	if max := q.limits(tenant).CallsInFlightPerTenant; q.flight[tenant]+calls > max {
		n := q.flight[tenant]
		k := q.key(tenant, "calls_in_flight_per_tenant")
		return false, fmt.Errorf("%w: tenant %s has %d calls in flight; this turn's %d would take it past %d, the limit %s: wait for running turns to complete, then retry (or ask the operator to raise %s)",
			ErrLimited, tenant, n, calls, max, k, k)
	}
	q.turns[k] = calls
	q.flight[tenant] += calls
	return true, nil
}

// admitCalls counts a batch of a streamed turn's calls as in flight, or
// refuses with ErrLimited when they would take the tenant past
// limits.calls_in_flight_per_tenant. first says the turn was not counted
// before: the caller starts its watch once the batch is recorded, or gives
// the count back with uncount.
func (q *quotas) admitCalls(tenant, session, turn string, calls int) (first bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := turnKey{tenant, session, turn}
	if n := q.flight[tenant]; n+calls > q.lim.CallsInFlightPerTenant {
		return false, fmt.Errorf("%w: tenant %s has %d calls in flight; this batch's %d would take it past %d, the limit limits.calls_in_flight_per_tenant: wait for running turns to complete, then retry (or ask the operator to raise limits.calls_in_flight_per_tenant)",
			ErrLimited, tenant, n, calls, q.lim.CallsInFlightPerTenant)
	}
	_, counted := q.turns[k]
	q.turns[k] += calls
	q.flight[tenant] += calls
	return !counted, nil
}

// uncount gives back the count of a batch that was not recorded (refused,
// or sent again); the turn's whole count when the batch was its first.
func (q *quotas) uncount(tenant, session, turn string, calls int, first bool) {
	if first {
		q.turnDone(tenant, session, turn)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k := turnKey{tenant, session, turn}
	if n, ok := q.turns[k]; ok {
		calls = min(calls, n)
		q.turns[k] = n - calls
		q.flight[tenant] -= calls
	}
}

// turnDone ends a counted turn: its calls are no longer in flight.
func (q *quotas) turnDone(tenant, session, turn string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := turnKey{tenant, session, turn}
	if n, ok := q.turns[k]; ok {
		delete(q.turns, k)
		q.flight[tenant] -= n
	}
}

// inFlight returns the tenant's calls in flight.
func (q *quotas) inFlight(tenant string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.flight[tenant]
}

// KeepOutput says why the tenant may not keep another full output, or nil
// (actors.OutputQuota).
func (q *quotas) KeepOutput(tenant string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n, max := q.kept[tenant], q.limits(tenant).OutputBytesPerTenant; n >= int64(max) {
		return fmt.Errorf("the tenant's kept full outputs hold %d bytes, the limit %s is %d", n, q.key(tenant, "output_bytes_per_tenant"), max)
	}
	return nil
}

// outputKept counts an object the actors stored. Names start with the
// tenant; file pre-images (TENANT/SESSION/ckpt/...) are not outputs.
func (q *quotas) outputKept(name string, size int64) {
	tenant, rest, ok := strings.Cut(name, "/")
	if !ok || isCheckpoint(rest) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.kept[tenant] += size
}

// isCheckpoint reports whether SESSION/... names a file pre-image.
func isCheckpoint(rest string) bool {
	_, after, _ := strings.Cut(rest, "/")
	return strings.HasPrefix(after, "ckpt/")
}

// countOutputs counts what the object store already holds for each tenant.
func (q *quotas) countOutputs(ctx context.Context, objects *natslog.Objects) error {
	infos, err := objects.List(ctx)
	if err != nil {
		return err
	}
	for _, in := range infos {
		q.outputKept(in.Name, in.Size)
	}
	return nil
}

// outputStore is the actors' object store: full outputs, large images and
// file pre-images, with each tenant's outputs counted against
// limits.output_bytes_per_tenant.
type outputStore struct {
	o *natslog.Objects
	q *quotas
}

func (s outputStore) Put(ctx context.Context, name string, r io.Reader) (int64, error) {
	n, _, err := s.o.Put(ctx, name, r)
	if err == nil {
		s.q.outputKept(name, n)
	}
	return n, err
}

// checkCallsPerTurn refuses a turn of more calls than the tenant's
// limits.calls_per_turn.
func (q *quotas) checkCallsPerTurn(tenant string, calls int) error {
	if max := q.limits(tenant).CallsPerTurn; calls > max {
		k := q.key(tenant, "calls_per_turn")
		return fmt.Errorf("%w: the turn has %d calls; a turn holds at most %d (%s): split the calls over several turns, or ask the operator to raise %s",
			ErrTooLarge, calls, max, k, k)
	}
	return nil
}

// turnWatch ends the count of each turn's calls in flight once the turn is
// done with: at once when its submission was refused (nothing was
// recorded) or answered complete; else when the turn completes, which a
// goroutine of the node's supervisor waits for (watch).
type turnWatch struct {
	q     *quotas
	reg   *registry
	fleet *fleet
	sup   *supervise.Group
}

// afterSubmit ends the count of a turn's calls, now or once it completes.
func (w *turnWatch) afterSubmit(tenant, session, id string, calls []events.CallSpec, r actors.TurnReply, err error) {
	switch {
	case err == nil && r.Err == nil && r.Turn.Status == projections.StatusComplete:
		w.q.turnDone(tenant, session, id)
	case err == nil && r.Err != nil && refusedTurn(r.Err):
		w.q.turnDone(tenant, session, id)
	case err == nil && errors.Is(r.Err, actors.ErrSessionFailed):
		// The actor panicked on it: posting it again could panic again.
		// Waiting records nothing, and ends at once if it was not recorded.
		w.watch(tenant, session, id, nil, true)
	default:
		w.watch(tenant, session, id, calls, false)
	}
}

// refusedTurn reports a submission the session refused without recording it.
func refusedTurn(err error) bool {
	return errors.Is(err, core.ErrTurnInvalid) || errors.Is(err, core.ErrSessionClosed) || errors.Is(err, actors.ErrBusy) || errors.Is(err, events.ErrNotFound)
}

// errTurnRunning: the watched turn has not completed yet.
var errTurnRunning = errors.New("node: the turn runs")

// watch waits until the turn completes, then ends the count of its calls
// in flight. It waits by posting the turn id again with wait: a recorded
// turn answers once complete and runs nothing. An actor that stops
// meanwhile (passivated, failed, or taken over) is asked again after a
// pause. The node closing ends the wait (and the count).
//
// A streamed turn (calls nil) is waited for with actors.WaitTurn, which
// records nothing: an id the session does not hold ends the wait. So is a
// turn whose session actor panicked (actors.ErrSessionFailed) on its
// submission (failed) or while watched; a second panic ends the wait, so
// a session that fails each time it is loaded is not polled for ever.
func (w *turnWatch) watch(tenant, session, id string, calls []events.CallSpec, failed bool) {
	started := w.sup.Go(func(ctx context.Context) {
		defer w.q.turnDone(tenant, session, id)
		_ = retry.Do(ctx, retry.Backoff{Initial: watchRetry}, 0, func(ctx context.Context, _ int) error {
			r, err := ask(ctx, w.reg, w.fleet, tenant, session, func(reply chan actors.TurnReply) actors.Message {
				if calls == nil {
					return actors.WaitTurn{ID: id, Reply: reply}
				}
				return actors.SubmitTurn{ID: id, Calls: calls, Wait: true, Reply: reply}
			}, turnErr)
			switch {
			case ctx.Err() != nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrClosed):
				return retry.Permanent(err)
			case err == nil && r.Err == nil && (r.Turn.Status == projections.StatusComplete || !r.Found):
				return nil // complete, or (a streamed turn's wait) never recorded
			case err == nil && r.Err != nil && refusedTurn(r.Err) && !errors.Is(r.Err, actors.ErrBusy):
				return nil
			case err == nil && errors.Is(r.Err, actors.ErrSessionFailed):
				if failed {
					return retry.Permanent(r.Err)
				}
				failed, calls = true, nil
			}
			return errTurnRunning
		})
	})
	if !started {
		w.q.turnDone(tenant, session, id)
	}
}

// watchRetry is the pause before a turn watch asks a session again.
const watchRetry = time.Second

// spillDir makes DATA/spill, where tools spill output too large for memory,
// empty: files left there belong to calls that ended with a crash.
func spillDir(data string) (string, error) {
	dir, err := filepath.Abs(filepath.Join(data, "spill"))
	if err == nil {
		err = os.RemoveAll(dir)
	}
	if err == nil {
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		return "", fmt.Errorf("node: spill directory: %w", err)
	}
	return dir, nil
}

// errPreImage marks a rewind that failed reading a pre-image from the
// object store: the node's fault, not the caller's.
type errPreImage struct{ err error }

func (e errPreImage) Error() string { return e.err.Error() }
func (e errPreImage) Unwrap() error { return e.err }

// preImages reads checkpointed pre-images for a rewind.
type preImages struct{ objects *natslog.Objects }

func (p preImages) get(ctx context.Context, name string) ([]byte, error) {
	b, err := p.objects.Get(ctx, name)
	if err != nil {
		return nil, errPreImage{err}
	}
	return b, nil
}

// rewindRefused words a rewind that could not restore the workspace. A
// failure to read a pre-image is ours, and stays an internal error; any
// other failure is the workspace refusing (a file replaced by a directory,
// a path that now leads out of the workspace through a symlink): the
// caller's to resolve, a conflict with what the session did since, said
// with workspace-relative paths.
func rewindRefused(err error, call, ws string) error {
	var pre errPreImage
	if errors.As(err, &pre) {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), ws+string(os.PathSeparator), "")
	msg = strings.ReplaceAll(msg, ws, ".")
	return fmt.Errorf("%w: the workspace cannot be rewound to before call %s as it is now: %s; move what is in the way and rewind again (files restored before the failure stay restored)", ErrConflict, call, msg)
}
