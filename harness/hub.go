package harness

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"

	"github.com/callsheet/callsheet/tool"
)

// Errors the Hub returns to the API.
var (
	// ErrNotWaiting: the task token names no attempt waiting for a worker's
	// answer (settled, of another tenant, or never minted): HTTP 409.
	ErrNotWaiting = errors.New("harness: task is not waiting")
	// ErrTooLarge: a body is too large to carry to the waiting call: HTTP 413.
	ErrTooLarge = errors.New("harness: too large")
	// ErrInvalid: a poll or a result is malformed; the message says what
	// and where: HTTP 400.
	ErrInvalid = errors.New("harness: invalid request")
	// ErrInvalidOption wraps every error about a bad Option.
	ErrInvalidOption = errors.New("harness: invalid option")
)

// Defaults of the Hub.
const (
	// DefaultSettledBucket is the KV bucket of settled task tokens: it
	// lets a post to a settled attempt's token say why it is 409.
	DefaultSettledBucket = "cs_tasks"
	// DefaultSettledTTL is how long a settled token's record is kept.
	DefaultSettledTTL = time.Hour
	// MaxWait bounds a poll's wait_ms (docs/spec.md §7).
	MaxWait = 60 * time.Second
	// MaxTasks bounds a poll's max.
	MaxTasks = 64
	// MaxPollsPerTenant bounds the polls one tenant holds on one node at
	// once (a held poll is a goroutine and a few NATS requests every
	// recheckEvery): one more is ErrLimit.
	MaxPollsPerTenant = 256
	// MaxParts bounds a completed result's parts; MaxErrorBytes a failure's
	// message, MaxDetailsBytes a heartbeat's details.
	MaxParts        = 256
	MaxErrorBytes   = 16 << 10
	MaxDetailsBytes = 16 << 10
	// recheckEvery is how often a waiting poll asks again even without a
	// sign of a new task, in case a sign was missed.
	recheckEvery = 2 * time.Second
	// askTimeout bounds one request to a waiting call over NATS.
	askTimeout = 5 * time.Second
	// offerTimeout bounds a poll's ask of a waiting call, which records
	// the call's claim before it answers (a durable append).
	offerTimeout = 30 * time.Second
)

// subjects: offer.T.TOOL (a waiting task, queue group "offer"), ready.T.TOOL
// (a sign that a task was offered), task.T.ID (complete, fail, heartbeat).
// Tenants and tool names match ^[a-zA-Z0-9_-]{1,64}$ (config, ValidName),
// so neither can add a subject token or a wildcard.
const subjectPrefix = "cs.work"

func offerSubject(tenant, name string) string { return subjectPrefix + ".offer." + tenant + "." + name }
func readySubject(tenant, name string) string { return subjectPrefix + ".ready." + tenant + "." + name }
func taskSubject(tenant, id string) string    { return subjectPrefix + ".task." + tenant + "." + id }

// Option configures New.
type Option func(*Hub) error

// WithReplicas sets the settled-token bucket's replica count; default 1.
func WithReplicas(n int) Option {
	return func(h *Hub) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas %d: use 1..5", ErrInvalidOption, n)
		}
		h.replicas = n
		return nil
	}
}

// WithLogger sets where the Hub logs lost workers and operational
// problems; default discards.
func WithLogger(l *slog.Logger) Option {
	return func(h *Hub) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		h.log = l
		return nil
	}
}

// WithOnSettled has the Hub tell f, from the waiting call's goroutine, how
// each attempt handed to a worker or offered to none settled (the node
// counts them: callsheet_harness_tasks_total); default none.
func WithOnSettled(f func(tenant string, outcome Settled)) Option {
	return func(h *Hub) error {
		if f == nil {
			return fmt.Errorf("%w: WithOnSettled(nil)", ErrInvalidOption)
		}
		h.onSettled = f
		return nil
	}
}

// Hub hands the calls of harness tools to external workers and carries
// their answers back (docs/workers.md). Everything goes over NATS, so a
// call waiting on one node is served by a poll, a heartbeat or a result
// posted to any node of the fleet:
//
//   - a waiting call (Run) subscribes to its tool's offer subject in a queue
//     group and says so on the ready subject; a poll (Poll) asks the offer
//     subject and gets one task from one waiting call, which then stops
//     offering it: an attempt is handed out at most once;
//   - each attempt has its own task token (unguessable, 256 random bits) and
//     its own subject, named by the token's digest under the tenant; a
//     heartbeat, complete or fail is a request to that subject, answered by
//     the waiting call. No responders means no call waits: 409;
//   - a settled attempt records its token's digest in a KV bucket, so a late
//     post is told why (completed, timed out, lost, cancelled);
//   - a poll or post that reaches the node where the call waits is served
//     there directly, through the same attempt state, with no NATS message.
//
// A Hub is safe for concurrent use. Close ends it.
type Hub struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	settled   jetstream.KeyValue
	replicas  int
	log       *slog.Logger
	onSettled func(tenant string, outcome Settled)

	readySub *nats.Subscription
	self     []byte // this Hub's ready signs carry it, so it skips its own
	mu       sync.Mutex
	waiters  map[string]map[chan struct{}]struct{} // tenant.tool → waiting polls
	polls    map[string]int                        // tenant → polls held
	offers   map[string][]*attempt                 // tenant.tool → this node's tasks on offer, oldest first
	tasks    map[string]*attempt                   // tenant.id → this node's attempts whose subject is open

	ctx    context.Context // ends the settlement writers
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Hub over nc, keeping settled tokens in a memory-stored KV
// bucket of js (DefaultSettledBucket, created if missing: the records are a
// courtesy for clear errors, not a guarantee, so they need no disk).
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, opts ...Option) (*Hub, error) {
	h := &Hub{nc: nc, js: js, replicas: 1, log: slog.New(slog.DiscardHandler), waiters: map[string]map[chan struct{}]struct{}{}, polls: map[string]int{},
		offers: map[string][]*attempt{}, tasks: map[string]*attempt{}}
	var self [16]byte
	_, _ = rand.Read(self[:])
	h.self = []byte(hex.EncodeToString(self[:]))
	for _, o := range opts {
		if err := o(h); err != nil {
			return nil, err
		}
	}
	kv, err := cluster.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      DefaultSettledBucket,
		Description: "callsheet settled task tokens (harness tools)",
		Storage:     jetstream.MemoryStorage,
		TTL:         DefaultSettledTTL,
		MaxBytes:    64 << 20,
		Replicas:    h.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("harness: settled tokens bucket: %w", err)
	}
	h.settled = kv
	h.readySub, err = nc.Subscribe(subjectPrefix+".ready.*.*", h.onReady)
	if err != nil {
		return nil, fmt.Errorf("harness: ready subject: %w", err)
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h, nil
}

// Close stops the Hub: it waits (at most a few seconds each) for settled
// tokens being recorded. Calls still waiting end with their contexts.
func (h *Hub) Close() {
	if h.readySub != nil {
		_ = h.readySub.Unsubscribe()
	}
	h.cancel()
	h.wg.Wait()
}

// onReady wakes the polls waiting for the tool a ready sign names. A sign
// of this Hub's own was acted on as it was sent (offerLocal).
func (h *Hub) onReady(m *nats.Msg) {
	if string(m.Data) == string(h.self) {
		return
	}
	key := strings.TrimPrefix(m.Subject, subjectPrefix+".ready.")
	h.mu.Lock()
	h.wakeLocked(key)
	h.mu.Unlock()
}

func (h *Hub) wakeLocked(key string) {
	for c := range h.waiters[key] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// A call waiting on this node is served by this node's polls and posts
// without NATS (the same attempt state machine, called directly: no
// request, no encoding of the task or the result); a call on another node
// is reached over NATS as before.

// offerLocal puts a on offer to this node's polls for key and wakes them.
func (h *Hub) offerLocal(key string, a *attempt) {
	h.mu.Lock()
	h.offers[key] = append(h.offers[key], a)
	h.wakeLocked(key)
	h.mu.Unlock()
}

// withdrawLocal takes a off this node's offers.
func (h *Hub) withdrawLocal(key string, a *attempt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.offers[key]
	for i, x := range list {
		if x == a {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(h.offers, key)
	} else {
		h.offers[key] = list
	}
}

// takeLocal hands worker the oldest task on offer on this node for key
// that it can take.
func (h *Hub) takeLocal(key, worker string) (Task, bool) {
	for {
		h.mu.Lock()
		list := h.offers[key]
		var a *attempt
		if len(list) > 0 {
			a = list[0]
		}
		h.mu.Unlock()
		if a == nil {
			return Task{}, false
		}
		// offerTo withdraws a whatever it answers, so the loop ends.
		if t, ok := a.offerTo(worker); ok {
			return t, true
		}
	}
}

// localTask returns the attempt of this node whose subject is tenant.id.
func (h *Hub) localTask(tenant, id string) *attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tasks[tenant+"."+id]
}

// Task is one attempt of a call handed to a worker (docs/spec.md §7).
type Task struct {
	// Task is the attempt's token: it names the attempt in heartbeat,
	// complete and fail, and is good for that attempt only.
	Task           string          `json:"task"`
	Session        string          `json:"session"`
	Turn           string          `json:"turn"`
	Call           string          `json:"call"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	Attempt        int             `json:"attempt"`
	IdempotencyKey string          `json:"idempotency_key"`
	// Deadline is when the call's timeout ends it.
	Deadline time.Time `json:"deadline"`
	// HeartbeatTimeoutMS is the tool's heartbeat_timeout: a worker that
	// sends no heartbeat for this long has lost the call. 0: none declared.
	HeartbeatTimeoutMS int64 `json:"heartbeat_timeout_ms,omitempty"`
}

// PollRequest is what a worker asks for (POST /v1/workers/poll).
type PollRequest struct {
	Worker string
	Tools  []string
	Max    int
	Wait   time.Duration
}

// Check reports the first problem of p, naming the field.
func (p PollRequest) Check() error {
	switch {
	case strings.TrimSpace(p.Worker) == "" || len(p.Worker) > 256:
		return fmt.Errorf("%w: worker: give the worker an id of 1 to 256 bytes (it is logged with what it takes)", ErrInvalid)
	case len(p.Tools) == 0 || len(p.Tools) > MaxToolsPerTenant:
		return fmt.Errorf("%w: tools: name 1 to %d of your tenant's harness tools", ErrInvalid, MaxToolsPerTenant)
	case p.Max < 0 || p.Max > MaxTasks:
		return fmt.Errorf("%w: max %d: use 1..%d (0 means 1)", ErrInvalid, p.Max, MaxTasks)
	case p.Wait < 0 || p.Wait > MaxWait:
		return fmt.Errorf("%w: wait_ms %d: use 0..%d", ErrInvalid, p.Wait.Milliseconds(), MaxWait.Milliseconds())
	}
	for i, name := range p.Tools {
		if !namePattern.MatchString(name) {
			return fmt.Errorf("%w: tools[%d]: %q is not a tool name (^[a-zA-Z0-9_-]{1,64}$)", ErrInvalid, i, name)
		}
	}
	return nil
}

// offerRequest is a poll's ask on an offer subject.
type offerRequest struct {
	Worker string `json:"worker"`
}

// Poll waits up to p.Wait for tasks of tenant's tools p.Tools and returns
// at most p.Max of them (1 when 0), as soon as it has one; none when the
// wait ends first or ctx ends. The caller has checked p (Check) and that
// p.Tools are tenant's harness tools. A task returned is handed out: it is
// never offered again, whether or not the worker gets it. ErrLimit when
// tenant already holds MaxPollsPerTenant polls on this node.
func (h *Hub) Poll(ctx context.Context, tenant string, p PollRequest) ([]Task, error) {
	limit := max(p.Max, 1)
	wake := make(chan struct{}, 1)
	h.mu.Lock()
	if h.polls[tenant] >= MaxPollsPerTenant {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: tenant %q holds %d polls on this node, the most one tenant may: poll with several tools and a larger max instead of many polls", ErrLimit, tenant, MaxPollsPerTenant)
	}
	h.polls[tenant]++
	for _, name := range p.Tools {
		k := tenant + "." + name
		if h.waiters[k] == nil {
			h.waiters[k] = map[chan struct{}]struct{}{}
		}
		h.waiters[k][wake] = struct{}{}
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		if h.polls[tenant]--; h.polls[tenant] == 0 {
			delete(h.polls, tenant)
		}
		for _, name := range p.Tools {
			k := tenant + "." + name
			delete(h.waiters[k], wake)
			if len(h.waiters[k]) == 0 {
				delete(h.waiters, k)
			}
		}
		h.mu.Unlock()
	}()
	body, _ := json.Marshal(offerRequest{Worker: p.Worker})
	end := time.Now().Add(p.Wait)
	for {
		tasks := h.take(ctx, tenant, p.Worker, p.Tools, limit, body)
		if len(tasks) > 0 {
			return tasks, nil
		}
		left := time.Until(end)
		if left <= 0 {
			return nil, nil
		}
		select {
		case <-wake:
		case <-time.After(min(left, recheckEvery)):
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// take asks every tool's offer subject in turn until it holds limit tasks
// or no tool has one to give.
func (h *Hub) take(ctx context.Context, tenant, worker string, names []string, limit int, body []byte) []Task {
	var out []Task
	open := append([]string(nil), names...)
	for len(open) > 0 && len(out) < limit && ctx.Err() == nil {
		next := open[:0]
		for _, name := range open {
			if len(out) >= limit {
				break
			}
			t, ok, more := h.takeOne(ctx, tenant, name, worker, body)
			if ok {
				out = append(out, t)
			}
			if more {
				next = append(next, name)
			}
		}
		open = next
	}
	return out
}

// takeOne asks one tool's offer subject once: ok when it got a task, more
// when asking again may give another (one was given, or the one asked had
// just been taken by another poll).
func (h *Hub) takeOne(ctx context.Context, tenant, name, worker string, body []byte) (t Task, ok, more bool) {
	if t, ok := h.takeLocal(tenant+"."+name, worker); ok {
		return t, true, true
	}
	actx, cancel := context.WithTimeout(ctx, offerTimeout)
	defer cancel()
	m, err := h.nc.RequestWithContext(actx, offerSubject(tenant, name), body)
	if err != nil {
		if !errors.Is(err, nats.ErrNoResponders) && ctx.Err() == nil {
			h.log.Warn("asking for a task failed", "tenant", tenant, "tool", name, "err", err)
		}
		return Task{}, false, false
	}
	if len(m.Data) == 0 {
		return Task{}, false, true // taken by another poll meanwhile
	}
	if err := json.Unmarshal(m.Data, &t); err != nil {
		h.log.Error("undecodable task", "tool", name, "err", err)
		return Task{}, false, true
	}
	return t, true, true
}

// Attempt states.
const (
	stateOffered = iota // waiting for a worker to take it
	stateTaking         // a worker asked for it: its claim is being recorded
	stateHanded         // a worker holds it
	stateSettled        // its outcome is decided; posts answer 409
)

// Settled is how a task's attempt ended, as its token's record says.
type Settled string

// How an attempt settles.
const (
	SettledCompleted Settled = "completed" // the worker posted a result
	SettledFailed    Settled = "failed"    // the worker posted a failure
	SettledTimedOut  Settled = "timed_out" // the call's timeout passed first
	SettledLost      Settled = "lost"      // the worker stopped heartbeating
	SettledCancelled Settled = "cancelled" // the call was cancelled
	SettledNotTaken  Settled = "not_taken" // no worker took the task
)

// settledRecord is a settled token's KV record.
type settledRecord struct {
	Outcome Settled   `json:"outcome"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
	Worker  string    `json:"worker,omitempty"`
}

// answer is the result a worker posted.
type answer struct {
	parts     []tool.Part
	fail      string
	permanent bool
}

// attempt is one call waiting on a worker: the state its NATS handlers and
// Run share.
type attempt struct {
	hub    *Hub
	tenant string
	key    string // tenant.tool: where it is on offer
	id     string
	digest [sha256.Size]byte
	task   Task

	mu        sync.Mutex
	state     int
	worker    string
	cancelled bool // settled because the call was cancelled
	record    settledRecord
	offer     *nats.Subscription
	claim     tool.Claim    // records the claim as a worker takes it; nil: claimed before
	refused   error         // why the claim was refused
	handed    chan struct{} // closed when a worker takes the task
	lost      chan struct{} // closed when the claim was refused: nothing goes out
	done      chan answer   // the worker's answer (buffer 1)
	beat      chan struct{} // a heartbeat came (buffer 1)
}

// newToken returns a fresh task token and its digest: 256 bits from the
// system's CSPRNG, so a token cannot be guessed; only its digest ever
// travels on NATS.
func newToken() (string, [sha256.Size]byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("harness: crypto/rand failed: " + err.Error()) // never on Linux (getrandom)
	}
	tok := "tk_" + base64.RawURLEncoding.EncodeToString(b[:])
	return tok, sha256.Sum256([]byte(tok))
}

// TokenID returns the id a token's subject and record are named by (the
// first 128 bits of its digest, hex), or false for a string that is not
// the shape of a task token.
func TokenID(token string) (id string, digest [sha256.Size]byte, ok bool) {
	raw, found := strings.CutPrefix(token, "tk_")
	if !found || len(raw) != 43 {
		return "", digest, false
	}
	if _, err := base64.RawURLEncoding.DecodeString(raw); err != nil {
		return "", digest, false
	}
	digest = sha256.Sum256([]byte(token))
	return hex.EncodeToString(digest[:16]), digest, true
}

// Run hands one call of tenant's harness tool name to a worker and waits
// for its answer (a harness tool's tool.Tool.Run, Spec.Tool). The call's
// context carries its tool.Call and its timeout; the pool runs it only after
// the claim is durable (or, for a read-only safe tool, as its unclaimed path
// allows), so a task is handed out only then.
//
// It returns the worker's result; the worker's failure as an error
// (tool.Permanent when it said permanent); tool.NotSent when no worker took
// the task before the call ended (nothing ran); tool.Lost when the worker
// missed its heartbeat; and the context's error when the call timed out or
// was cancelled while a worker held it. The pool settles each by the call's
// replay policy (docs/spec.md §3).
func (h *Hub) Run(ctx context.Context, tenant, name string, heartbeat time.Duration, args json.RawMessage) (tool.Result, error) {
	call, ok := tool.CallFrom(ctx)
	if !ok {
		return tool.Result{}, tool.NotSent(errors.New("a harness tool runs only inside a callsheet session"))
	}
	tok, digest := newToken()
	a := &attempt{hub: h, tenant: tenant, id: hex.EncodeToString(digest[:16]), digest: digest,
		handed: make(chan struct{}), lost: make(chan struct{}), done: make(chan answer, 1), beat: make(chan struct{}, 1)}
	a.claim, _ = tool.ClaimFrom(ctx)

	deadline, _ := ctx.Deadline()
	a.task = Task{Task: tok, Session: call.Session, Turn: call.Turn, Call: call.ID, Tool: name,
		Arguments: args, Attempt: call.Attempt, IdempotencyKey: call.IdempotencyKey, Deadline: deadline.UTC(),
		HeartbeatTimeoutMS: heartbeat.Milliseconds()}
	// The task's own subject first: once a worker can take the task, its
	// answer has somewhere to go.
	taskSub, err := h.nc.Subscribe(taskSubject(tenant, a.id), a.onPost)
	if err != nil {
		return tool.Result{}, tool.NotSent(fmt.Errorf("offering the task: %w", err))
	}
	h.mu.Lock()
	h.tasks[tenant+"."+a.id] = a
	h.mu.Unlock()
	a.key = tenant + "." + name
	a.mu.Lock()
	a.offer, err = h.nc.QueueSubscribe(offerSubject(tenant, name), "offer", a.onOffer)
	a.mu.Unlock()
	if err != nil {
		h.mu.Lock()
		delete(h.tasks, tenant+"."+a.id)
		h.mu.Unlock()
		_ = taskSub.Unsubscribe()
		return tool.Result{}, tool.NotSent(fmt.Errorf("offering the task: %w", err))
	}
	h.offerLocal(a.key, a)
	_ = h.nc.Publish(readySubject(tenant, name), h.self)

	select {
	case <-a.handed:
	case <-a.lost:
		a.finish(taskSub)
		return tool.Result{}, tool.NotSent(fmt.Errorf("the call of %s could not be claimed for worker %q: %w", name, a.workerName(), a.refused))
	case <-ctx.Done():
		if a.settleFrom(stateOffered, SettledNotTaken, "no worker took it") {
			a.finish(taskSub)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return tool.Result{}, tool.NotSent(fmt.Errorf("no worker took the call of %s within its timeout; start a worker that polls for %q (docs/workers.md)", name, name))
			}
			return tool.Result{}, tool.NotSent(ctx.Err())
		}
		// Taken just as the call ended: it is the worker's now, once its
		// claim is recorded (or refused).
		select {
		case <-a.handed:
		case <-a.lost:
			a.finish(taskSub)
			return tool.Result{}, tool.NotSent(fmt.Errorf("the call of %s could not be claimed for worker %q: %w", name, a.workerName(), a.refused))
		}
	}
	var beat <-chan time.Time
	var timer *time.Timer
	if heartbeat > 0 {
		timer = time.NewTimer(heartbeat)
		defer timer.Stop()
		beat = timer.C
	}
	for {
		select {
		case ans := <-a.done:
			a.finish(taskSub)
			return ans.result()
		case <-a.beat:
			if timer != nil {
				timer.Reset(heartbeat)
			}
		case <-beat:
			if a.settle(SettledLost, fmt.Sprintf("worker %q sent no heartbeat for %s (heartbeat_timeout)", a.workerName(), heartbeat)) {
				a.finish(taskSub)
				return tool.Result{}, tool.Lost(fmt.Errorf("worker %q holding the call of %s sent no heartbeat for %s, its heartbeat_timeout: the worker is taken as lost", a.workerName(), name, heartbeat))
			}
		case <-ctx.Done():
			outcome, reason := SettledTimedOut, "the call's timeout passed before the worker answered"
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				outcome, reason = SettledCancelled, "the call was cancelled"
			}
			if a.settle(outcome, reason) {
				a.finish(taskSub)
				return tool.Result{}, fmt.Errorf("worker %q did not answer the call of %s: %s: %w", a.workerName(), name, reason, ctx.Err())
			}
			// The worker answered first: its answer stands.
		}
	}
}

func (ans answer) result() (tool.Result, error) {
	if ans.fail != "" || ans.parts == nil {
		err := fmt.Errorf("the worker failed: %s", ans.fail)
		if ans.permanent {
			err = tool.Permanent(err)
		}
		return tool.Result{}, err
	}
	return tool.Result{Parts: ans.parts}, nil
}

func (a *attempt) workerName() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.worker
}

// settle moves the attempt to settled with why, unless something else
// settled it first (then false).
func (a *attempt) settle(outcome Settled, reason string) bool {
	return a.settleFrom(stateHanded, outcome, reason)
}

// settleFrom settles the attempt if it is in state from.
func (a *attempt) settleFrom(from int, outcome Settled, reason string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state != from {
		return false
	}
	a.state, a.cancelled = stateSettled, outcome == SettledCancelled
	a.record = settledRecord{Outcome: outcome, Reason: reason, At: time.Now().UTC(), Worker: a.worker}
	return true
}

// finish stops offering the task and, in a goroutine the Hub owns, records
// its token as settled and then lets go of its subject: until the record is
// written the subject itself answers 409 with why.
func (a *attempt) finish(taskSub *nats.Subscription) {
	a.mu.Lock()
	if a.offer != nil {
		_ = a.offer.Drain() // as in onOffer
		a.offer = nil
	}
	rec := a.record
	a.mu.Unlock()
	h := a.hub
	h.withdrawLocal(a.key, a)
	if rec.Outcome == SettledLost {
		h.log.Warn("worker lost: no heartbeat within the tool's heartbeat_timeout", "tenant", a.tenant, "session", a.task.Session,
			"turn", a.task.Turn, "call", a.task.Call, "tool", a.task.Tool, "attempt", a.task.Attempt, "worker", rec.Worker)
	}
	if h.onSettled != nil {
		h.onSettled(a.tenant, rec.Outcome)
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		// Drain, not Unsubscribe: a post already on its way is still
		// answered; one that comes later finds no responders and the record.
		defer func() {
			h.mu.Lock()
			delete(h.tasks, a.tenant+"."+a.id)
			h.mu.Unlock()
			_ = taskSub.Drain()
		}()
		b, _ := json.Marshal(rec)
		ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
		defer cancel()
		if _, err := h.settled.Put(ctx, a.tenant+"."+a.id, b); err != nil && h.ctx.Err() == nil {
			h.log.Warn("recording a settled task failed", "task", a.id, "err", err)
		}
	}()
}

// onOffer answers a poll of any node over NATS: the task, once; an empty
// answer to every later ask (taken).
func (a *attempt) onOffer(m *nats.Msg) {
	var req offerRequest
	_ = json.Unmarshal(m.Data, &req)
	t, ok := a.offerTo(req.Worker)
	if !ok {
		_ = m.Respond(nil)
		return
	}
	b, _ := json.Marshal(t)
	// Once answered the task is handed out, whether or not the answer
	// reaches the worker: a never call is not offered twice.
	_ = m.Respond(b)
}

// offerTo hands the task to worker, once: false to every later ask
// (taken). With a claim function, the call's claim naming the worker is
// recorded first, and a refused claim hands nothing out (the poll asks
// elsewhere). Either way the task is no longer on offer.
func (a *attempt) offerTo(worker string) (Task, bool) {
	a.mu.Lock()
	if a.state != stateOffered {
		a.mu.Unlock()
		return Task{}, false
	}
	a.state, a.worker = stateTaking, worker
	if a.offer != nil {
		// Drain, not Unsubscribe: the asks of other polls already routed
		// here are answered "taken" (they ask elsewhere at once) instead of
		// being dropped and left to time out.
		_ = a.offer.Drain()
		a.offer = nil
	}
	claim := a.claim
	a.mu.Unlock()
	a.hub.withdrawLocal(a.key, a)
	if claim != nil {
		if err := claim(worker); err != nil {
			a.mu.Lock()
			a.state, a.refused = stateSettled, err
			a.record = settledRecord{Outcome: "not_taken", Reason: "its claim was refused: " + err.Error(), At: time.Now().UTC(), Worker: a.worker}
			a.mu.Unlock()
			close(a.lost)
			return Task{}, false
		}
	}
	a.mu.Lock()
	a.state = stateHanded
	a.mu.Unlock()
	close(a.handed)
	return a.task, true
}

// post is a heartbeat, complete or fail carried to the waiting call.
type post struct {
	Op        string          `json:"op"` // heartbeat, complete, fail
	Tenant    string          `json:"tenant"`
	Digest    string          `json:"digest"` // hex SHA-256 of the token
	Content   []tool.Part     `json:"content,omitempty"`
	Error     string          `json:"error,omitempty"`
	Permanent bool            `json:"permanent,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
}

// postReply is the waiting call's answer to a post.
type postReply struct {
	OK      bool   `json:"ok"`
	Cancel  bool   `json:"cancel,omitempty"`
	Message string `json:"message,omitempty"`
}

// onPost takes a worker's heartbeat, complete or fail for this attempt,
// posted to any node and carried over NATS.
func (a *attempt) onPost(m *nats.Msg) {
	var p post
	var r postReply
	if err := json.Unmarshal(m.Data, &p); err != nil {
		r = postReply{Message: "undecodable post"}
	} else {
		r = a.take(p)
	}
	b, _ := json.Marshal(r)
	_ = m.Respond(b)
}

// take takes a worker's heartbeat, complete or fail for this attempt and
// returns the answer to it.
func (a *attempt) take(p post) postReply {
	want := hex.EncodeToString(a.digest[:])
	// The subject already names the tenant and the token's digest; both are
	// checked again so that nothing but the token's holder in the tenant
	// that minted it can settle the attempt.
	if p.Tenant != a.tenant || subtle.ConstantTimeCompare([]byte(p.Digest), []byte(want)) != 1 {
		return postReply{Message: "this task token names no attempt of your tenant"}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.state {
	case stateOffered, stateTaking:
		return postReply{Message: "the task has not been handed to a worker"}
	case stateSettled:
		if p.Op == "heartbeat" && a.cancelled {
			return postReply{OK: true, Cancel: true}
		}
		return postReply{Message: settledMessage(a.record)}
	}
	switch p.Op {
	case "heartbeat":
		select {
		case a.beat <- struct{}{}:
		default:
		}
		return postReply{OK: true}
	case "complete", "fail":
		ans := answer{parts: p.Content, fail: p.Error, permanent: p.Permanent}
		outcome := SettledCompleted
		if p.Op == "fail" {
			outcome = SettledFailed
			if ans.fail == "" {
				ans.fail = "(no message)"
			}
		} else if ans.parts == nil {
			ans.parts = []tool.Part{}
		}
		a.state = stateSettled
		a.record = settledRecord{Outcome: outcome, Reason: "the worker answered", At: time.Now().UTC(), Worker: a.worker}
		a.done <- ans
		return postReply{OK: true}
	default:
		return postReply{Message: fmt.Sprintf("unknown operation %q", p.Op)}
	}
}

func settledMessage(r settledRecord) string {
	msg := fmt.Sprintf("the task's attempt is settled (%s at %s: %s)", r.Outcome, r.At.Format(time.RFC3339), r.Reason)
	switch r.Outcome {
	case SettledTimedOut, SettledLost, SettledCancelled:
		msg += "; its outcome is recorded by the call's replay policy, and nothing posted for it now counts"
	}
	return msg
}

// Heartbeat tells the attempt that token names that its worker is alive,
// and answers whether the call was cancelled (the worker should stop).
// ErrNotWaiting when no attempt of tenant waits on token.
func (h *Hub) Heartbeat(ctx context.Context, tenant, token string, details json.RawMessage) (cancel bool, err error) {
	if len(details) > MaxDetailsBytes {
		return false, fmt.Errorf("%w: details: %d bytes, over the limit of %d", ErrTooLarge, len(details), MaxDetailsBytes)
	}
	r, err := h.post(ctx, tenant, token, post{Op: "heartbeat", Details: details})
	var ns *notWaitingError
	if errors.As(err, &ns) && ns.record != nil && ns.record.Outcome == SettledCancelled {
		return true, nil // the call was cancelled: the worker should stop
	}
	return r.Cancel, err
}

// Complete hands the attempt that token names its result. ErrNotWaiting
// when no attempt of tenant waits on token; ErrInvalid for a malformed
// part; ErrTooLarge for a result too large to carry.
func (h *Hub) Complete(ctx context.Context, tenant, token string, content []tool.Part) error {
	if err := CheckParts(content); err != nil {
		return err
	}
	if content == nil {
		content = []tool.Part{}
	}
	_, err := h.post(ctx, tenant, token, post{Op: "complete", Content: content})
	return err
}

// Fail tells the attempt that token names that the worker failed it;
// permanent stops retries of a safe tool. Errors as Complete.
func (h *Hub) Fail(ctx context.Context, tenant, token, message string, permanent bool) error {
	switch {
	case strings.TrimSpace(message) == "":
		return fmt.Errorf("%w: error: say what went wrong (the model reads it)", ErrInvalid)
	case len(message) > MaxErrorBytes:
		return fmt.Errorf("%w: error: %d bytes, over the limit of %d", ErrTooLarge, len(message), MaxErrorBytes)
	}
	_, err := h.post(ctx, tenant, token, post{Op: "fail", Error: message, Permanent: permanent})
	return err
}

// CheckParts reports the first malformed result part (docs/spec.md §8):
// text, json (valid JSON) or image (mime and data).
func CheckParts(parts []tool.Part) error {
	if len(parts) > MaxParts {
		return fmt.Errorf("%w: content: %d parts, over the limit of %d", ErrInvalid, len(parts), MaxParts)
	}
	for i, p := range parts {
		bad := func(what string) error { return fmt.Errorf("%w: content[%d]: %s", ErrInvalid, i, what) }
		switch p.Type {
		case tool.PartText:
			if p.JSON != nil || p.MIME != "" || p.Data != nil {
				return bad(`a "text" part carries only "text"`)
			}
		case tool.PartJSON:
			if len(p.JSON) == 0 || !json.Valid(p.JSON) {
				return bad(`a "json" part needs "json": any JSON value`)
			}
			if p.Text != "" || p.MIME != "" || p.Data != nil {
				return bad(`a "json" part carries only "json"`)
			}
		case tool.PartImage:
			if !strings.HasPrefix(p.MIME, "image/") || len(p.Data) == 0 {
				return bad(`an "image" part needs "mime" (image/...) and "data" (base64)`)
			}
			if p.Text != "" || p.JSON != nil {
				return bad(`an "image" part carries only "mime" and "data"`)
			}
		default:
			return bad(fmt.Sprintf(`type %q is not one of "text", "json", "image"`, p.Type))
		}
	}
	return nil
}

// post carries p to the attempt token names and returns its answer.
func (h *Hub) post(ctx context.Context, tenant, token string, p post) (postReply, error) {
	id, digest, ok := TokenID(token)
	if !ok {
		return postReply{}, &notWaitingError{msg: fmt.Sprintf("%q is not a task token (tasks from POST /v1/workers/poll carry one in \"task\")", clipToken(token))}
	}
	p.Tenant, p.Digest = tenant, hex.EncodeToString(digest[:])
	b, err := json.Marshal(p)
	if err != nil {
		return postReply{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if int64(len(b)) > h.nc.MaxPayload()-1024 {
		return postReply{}, fmt.Errorf("%w: the result is %d bytes once encoded, over the %d the fleet's NATS carries; return less (results over the output caps are cut anyway, docs/spec.md §2.5)", ErrTooLarge, len(b), h.nc.MaxPayload()-1024)
	}
	var r postReply
	if a := h.localTask(tenant, id); a != nil {
		r = a.take(p)
	} else {
		var err error
		if r, err = h.postRemote(ctx, tenant, id, b); err != nil {
			return postReply{}, err
		}
	}
	if !r.OK {
		return r, &notWaitingError{msg: r.Message}
	}
	return r, nil
}

// postRemote carries an encoded post to the attempt's subject, for a call
// waiting on another node.
func (h *Hub) postRemote(ctx context.Context, tenant, id string, b []byte) (postReply, error) {
	actx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	m, err := h.nc.RequestWithContext(actx, taskSubject(tenant, id), b)
	if errors.Is(err, nats.ErrNoResponders) {
		return postReply{}, h.notWaiting(ctx, tenant, id)
	}
	if err != nil {
		// No answer: the attempt may have settled as the post went out.
		if nw := h.notWaiting(ctx, tenant, id); nw.(*notWaitingError).record != nil {
			return postReply{}, nw
		}
		return postReply{}, fmt.Errorf("harness: reaching the waiting call: %w", err)
	}
	var r postReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return postReply{}, fmt.Errorf("harness: undecodable answer from the waiting call: %w", err)
	}
	return r, nil
}

// notWaitingError is an ErrNotWaiting, with the settled record when there
// is one.
type notWaitingError struct {
	msg    string
	record *settledRecord
}

func (e *notWaitingError) Error() string { return ErrNotWaiting.Error() + ": " + e.msg }
func (e *notWaitingError) Unwrap() error { return ErrNotWaiting }

// notWaiting is the 409 for a token no call waits on, saying why when the
// settled record is there.
func (h *Hub) notWaiting(ctx context.Context, tenant, id string) error {
	e, err := h.settled.Get(ctx, tenant+"."+id)
	if err == nil {
		var r settledRecord
		if json.Unmarshal(e.Value(), &r) == nil {
			return &notWaitingError{msg: settledMessage(r), record: &r}
		}
	}
	return &notWaitingError{msg: "no call waits on this task token: its attempt was settled (completed, failed, timed out, lost or cancelled), its node stopped, or the token is not your tenant's"}
}

func clipToken(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}
