package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// ErrInvalidTool is matched (with errors.Is) by every *RegistrationError: a
// tool that breaks a rule of the tool contract.
var ErrInvalidTool = errors.New("tool: invalid tool")

// The rules a RegistrationError names.
const (
	// RuleNilTool: Register was given a nil *Tool.
	RuleNilTool = "nil_tool"
	// RuleName: the name is empty or does not match ^[a-zA-Z0-9_-]{1,64}$,
	// the rule model providers apply to tool names.
	RuleName = "name"
	// RuleDuplicateName: the registry already holds a tool of that name.
	RuleDuplicateName = "duplicate_name"
	// RuleDescription: the description is empty.
	RuleDescription = "description"
	// RuleGuidelines: no guideline is non-empty.
	RuleGuidelines = "guidelines"
	// RuleDeclarations: effect, replay or concurrency has an unknown value.
	RuleDeclarations = "declarations"
	// RuleLabels: an effect label is not one of the four of docs/spec.md §1.
	RuleLabels = "labels"
	// RuleReadOnlyMutatedPaths: a read-only tool declares mutated paths.
	RuleReadOnlyMutatedPaths = "read_only_mutated_paths"
	// RuleReadOnlyEscalation: a read-only tool allows escalation.
	RuleReadOnlyEscalation = "read_only_escalation"
	// RuleInfiniteTimeout: a tool that is not user-mediated has an
	// Infinite timeout.
	RuleInfiniteTimeout = "infinite_timeout"
	// RuleNegativeTimeout: the timeout is negative (and not Infinite).
	RuleNegativeTimeout = "negative_timeout"
	// RuleInputSchema: the input schema is missing or does not compile (see
	// CompileSchema).
	RuleInputSchema = "input_schema"
	// RuleRun: Run is nil.
	RuleRun = "run"
	// RuleFleetCap: the fleet cap is out of range, or its scope is unknown
	// or given without a cap.
	RuleFleetCap = "fleet_cap"
)

// RegistrationError reports a tool refused because it breaks a rule. It
// matches ErrInvalidTool.
type RegistrationError struct {
	// Tool is the tool's name as given (possibly empty or invalid).
	Tool string
	// Rule is one of the Rule constants.
	Rule string
	// Detail says what was wrong and what to do.
	Detail string
}

// Error returns `tool "NAME" refused (RULE): DETAIL`.
func (e *RegistrationError) Error() string {
	return fmt.Sprintf("tool %q refused (%s): %s", e.Tool, e.Rule, e.Detail)
}

// Unwrap returns ErrInvalidTool.
func (e *RegistrationError) Unwrap() error { return ErrInvalidTool }

func refuse(t *Tool, rule, detail string) *RegistrationError {
	return &RegistrationError{Tool: t.Name, Rule: rule, Detail: detail}
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// check applies every rule but the duplicate name to t, with its
// declarations as they would be after normalization, and returns the
// validator compiled from its input schema (nil, and the schema left
// uncompiled, without compile). It does not modify t.
func check(t *Tool, compile bool) (*validator, error) {
	switch {
	case t.Name == "":
		return nil, refuse(t, RuleName, "name is empty; give the tool a name of letters, digits, '_' or '-' (at most 64)")
	case !nameRE.MatchString(t.Name):
		return nil, refuse(t, RuleName, fmt.Sprintf("name %q must match ^[a-zA-Z0-9_-]{1,64}$ (letters, digits, '_' or '-', at most 64), as model providers require", t.Name))
	case strings.TrimSpace(t.Description) == "":
		return nil, refuse(t, RuleDescription, "description is empty; the model needs to know what the tool does")
	case !slices.ContainsFunc(t.Guidelines, func(g string) bool { return strings.TrimSpace(g) != "" }):
		return nil, refuse(t, RuleGuidelines, "no non-empty guideline; say when the model should use the tool")
	}
	d := t.Declarations.Normalize()
	if err := d.Validate(); err != nil {
		return nil, refuse(t, RuleDeclarations, err.Error())
	}
	for _, l := range t.Labels {
		switch l {
		case LabelIrreversible, LabelFinancial, LabelExternal, LabelAffectsOthers:
		default:
			return nil, refuse(t, RuleLabels, fmt.Sprintf("label %q is not one of irreversible, financial, external, affects_others", l))
		}
	}
	if d.Effect == EffectReadOnly {
		if t.MutatedPaths != nil {
			return nil, refuse(t, RuleReadOnlyMutatedPaths, "a read-only tool declares mutated paths; declare a writing effect such as side_effecting, or drop MutatedPaths")
		}
		if t.Escalation {
			return nil, refuse(t, RuleReadOnlyEscalation, "a read-only tool allows escalation; a tool that needs to leave the sandbox is not read-only")
		}
	}
	switch {
	case t.Timeout == Infinite:
		if d.Effect != EffectUserMediated {
			return nil, refuse(t, RuleInfiniteTimeout, fmt.Sprintf("an infinite timeout is only for user-mediated tools, and this one is %s; set a finite timeout", d.Effect))
		}
	case t.Timeout < 0:
		return nil, refuse(t, RuleNegativeTimeout, fmt.Sprintf("timeout %v is negative; use 0 for the default (%v) or a positive duration", t.Timeout, DefaultTimeout))
	}
	switch {
	case t.FleetCap < 0 || t.FleetCap > MaxFleetCap:
		return nil, refuse(t, RuleFleetCap, fmt.Sprintf("fleet cap %d is out of range: use 1..%d, or 0 for none", t.FleetCap, MaxFleetCap))
	case t.FleetCapScope != "" && t.FleetCapScope != FleetCapTenant && t.FleetCapScope != FleetCapFleet:
		return nil, refuse(t, RuleFleetCap, fmt.Sprintf("fleet cap scope %q is not one of %s, %s", t.FleetCapScope, FleetCapTenant, FleetCapFleet))
	case t.FleetCapScope != "" && t.FleetCap == 0:
		return nil, refuse(t, RuleFleetCap, fmt.Sprintf("fleet cap scope %q without a fleet cap: set the cap, or drop the scope", t.FleetCapScope))
	}
	if len(t.InputSchema) == 0 {
		return nil, refuse(t, RuleInputSchema, `input schema is missing; a tool without arguments takes {"type": "object", "properties": {}}`)
	}
	var v *validator
	if compile {
		var err error
		if v, err = compileSchema(t.InputSchema); err != nil {
			return nil, refuse(t, RuleInputSchema, err.Error())
		}
	}
	if t.Run == nil {
		return nil, refuse(t, RuleRun, "Run is nil: the tool has no function to call")
	}
	return v, nil
}

// lazySchema is a tool's input schema compiled on first use: a tenant's
// harness tools are registered from the store at every start and after
// every change, and a node serves without waiting on any of them. What
// compiling it would refuse blocks each call instead, saying so. It is safe
// for concurrent use.
type lazySchema struct {
	raw  json.RawMessage
	once sync.Once
	v    *validator
	err  error
}

func (l *lazySchema) get() (*validator, error) {
	l.once.Do(func() { l.v, l.err = compileSchema(l.raw) })
	return l.v, l.err
}

func (l *lazySchema) validate(args json.RawMessage) error {
	v, err := l.get()
	if err != nil {
		return argError("", "the tool's input schema cannot be used, so no call of it runs (%v); its owner must register it again", err)
	}
	return v.validate(args)
}

func (l *lazySchema) prune(args json.RawMessage, obj map[string]any) json.RawMessage {
	v, err := l.get()
	if err != nil {
		return args
	}
	return v.prune(args, obj)
}

// Registry holds the tools of one surface by name. The zero value is an empty
// registry ready to use. It is safe for concurrent use, including
// registration and removal while the node runs.
//
// Every tool belongs to a source: Register adds to the static source (the
// built-in, configured and Go tools fixed at start); Replace sets, in one
// step, every tool of a named dynamic source (one MCP server, later one
// tenant's harness tools), so a source's tools appear, change and vanish
// together. Names are unique across all sources: a tool whose name another
// source holds is refused, never shadowed.
//
// Changing the registry never changes a decision already taken: a turn's
// plan records each call's declarations and timeout (TurnReceived), and
// Resolve still finds a tool that was removed or replaced since (the
// version last registered), so a call planned before the change runs as it
// was planned. Only new plans see the change.
//
// Tenant-scoped tools (docs/spec.md §7, harness tools) are one more source
// per tenant, seen only through the tenant's lookups (ReplaceTenant,
// GetFor, ResolveFor, VisibleFor); Get, Resolve, All and Visible see the
// shared sources only.
type Registry struct {
	mu      sync.RWMutex
	tools   map[string]*entry
	retired map[string]*Tool // the last version of each name no longer registered
	version uint64
	watch   map[chan<- struct{}]struct{}
	// scoped holds each tenant's own tools (ReplaceTenant), scopedRetired
	// the last version of each that was removed: tenant → name → tool.
	scoped, scopedRetired map[string]map[string]*Tool
}

// entry is one registered tool and the source that owns it.
type entry struct {
	tool   *Tool
	source string
}

// StaticSource is the source of the tools added with Register.
const StaticSource = ""

// NewRegistry returns a registry holding tools, or the first registration
// error.
func NewRegistry(tools ...*Tool) (*Registry, error) {
	r := &Registry{}
	for _, t := range tools {
		if err := r.Register(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// prepare checks t and returns the copy a registry stores: empty
// declarations set to their strictest values, slices cloned, and Validate
// compiled from InputSchema when nil. t itself is not modified.
func prepare(t *Tool) (*Tool, error) { return prepareWith(t, nil) }

// prepareWith is prepare that, with a lazy schema (for tenant's tools),
// leaves the input schema to be compiled on first use.
func prepareWith(t *Tool, lazy *lazySchema) (*Tool, error) {
	if t == nil {
		return nil, &RegistrationError{Rule: RuleNilTool, Detail: "tool is nil"}
	}
	v, err := check(t, lazy == nil)
	if err != nil {
		return nil, err
	}
	c := *t
	c.Declarations = c.Declarations.Normalize()
	if c.FleetCap > 0 && c.FleetCapScope == "" {
		c.FleetCapScope = FleetCapTenant
	}
	c.Guidelines = slices.Clone(c.Guidelines)
	c.Labels = slices.Clone(c.Labels)
	c.InputSchema = slices.Clone(c.InputSchema)
	switch {
	case lazy != nil:
		c.lazy = lazy
		if c.Validate == nil {
			c.Validate = lazy.validate
		}
		if c.prune == nil {
			c.prune = lazy.prune
		}
	default:
		if c.Validate == nil {
			c.Validate = v.validate
		}
		if c.prune == nil {
			c.prune = v.prune
		}
	}
	return &c, nil
}

// Register checks t against the rules of the tool contract and adds it to
// the static source. It stores a copy of t whose empty declarations are set
// to their strictest values and whose Validate, when nil, is compiled from
// InputSchema (see CompileSchema); t itself is not modified, so one *Tool
// may be registered in several registries at once. Get returns the copy.
//
// It returns a *RegistrationError (matching ErrInvalidTool) naming the
// broken rule: RuleNilTool, RuleName, RuleDuplicateName, RuleDescription,
// RuleGuidelines, RuleDeclarations, RuleLabels, RuleReadOnlyMutatedPaths,
// RuleReadOnlyEscalation, RuleInfiniteTimeout, RuleNegativeTimeout,
// RuleInputSchema or RuleRun.
func (r *Registry) Register(t *Tool) error {
	c, err := prepare(t)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if e, dup := r.tools[c.Name]; dup {
		r.mu.Unlock()
		return duplicate(t, e.source)
	}
	r.put(c, StaticSource)
	r.changedLocked()
	r.mu.Unlock()
	return nil
}

func duplicate(t *Tool, owner string) *RegistrationError {
	by := "a built-in or configured tool"
	if owner != StaticSource {
		by = "source " + strconv.Quote(owner)
	}
	return refuse(t, RuleDuplicateName, fmt.Sprintf("a tool named %q is already registered (by %s); tool names are unique across built-in, configured, harness and MCP tools", t.Name, by))
}

// put stores c for source; r.mu is held for writing.
func (r *Registry) put(c *Tool, source string) {
	if r.tools == nil {
		r.tools = make(map[string]*entry)
	}
	r.tools[c.Name] = &entry{tool: c, source: source}
	delete(r.retired, c.Name)
}

// ErrInvalidSource is returned by Replace for the static source's name,
// which belongs to Register.
var ErrInvalidSource = errors.New("tool: invalid source")

// Replace makes tools the whole set of source's tools, in one step: tools of
// source not in the set are removed (Resolve still finds them, for calls
// planned before), the others are added or replace the source's tool of the
// same name. Each tool is checked as Register checks it; one that breaks a
// rule, repeats a name earlier in the set, or has a name another source
// holds is left out, and Replace returns its *RegistrationError (several
// joined with errors.Join) while the rest still apply. An empty set removes
// every tool of source. It returns ErrInvalidSource for StaticSource.
func (r *Registry) Replace(source string, tools []*Tool) error {
	if source == StaticSource {
		return fmt.Errorf("%w: Replace needs a source name; static tools are added with Register", ErrInvalidSource)
	}
	var errs []error
	next := make(map[string]*Tool, len(tools))
	order := make([]*Tool, 0, len(tools))
	for _, t := range tools {
		c, err := prepare(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := next[c.Name]; dup {
			errs = append(errs, refuse(t, RuleDuplicateName, fmt.Sprintf("source %q offers two tools named %q; each name may appear once", source, c.Name)))
			continue
		}
		next[c.Name] = c
		order = append(order, c)
	}
	r.mu.Lock()
	for name, e := range r.tools {
		if e.source == source {
			if _, keep := next[name]; !keep {
				r.retire(name)
			}
		}
	}
	for _, c := range order {
		if e, ok := r.tools[c.Name]; ok && e.source != source {
			errs = append(errs, duplicate(c, e.source))
			continue
		}
		r.put(c, source)
	}
	r.changedLocked()
	r.mu.Unlock()
	return errors.Join(errs...)
}

// retire removes a live tool, keeping it for Resolve; r.mu is held.
func (r *Registry) retire(name string) {
	e, ok := r.tools[name]
	if !ok {
		return
	}
	delete(r.tools, name)
	if r.retired == nil {
		r.retired = make(map[string]*Tool)
	}
	r.retired[name] = e.tool
}

// changedLocked counts a change and wakes every watcher; r.mu is held.
func (r *Registry) changedLocked() {
	r.version++
	for c := range r.watch {
		select {
		case c <- struct{}{}:
		default: // a change is already pending for this watcher
		}
	}
}

// Get returns the registered tool of that name: the tool a new plan may use.
func (r *Registry) Get(name string) (*Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[name]
	if !ok {
		return nil, false
	}
	return e.tool, true
}

// Resolve returns the tool of that name for running a call already planned:
// the registered one, or else the last version registered under that name
// before it was removed or replaced by Replace. Workers use it so that a
// call planned before a tool changed or vanished still finds something to
// run (which may then fail, as an MCP server's call to a tool it no longer
// has does).
func (r *Registry) Resolve(name string) (*Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.tools[name]; ok {
		return e.tool, true
	}
	t, ok := r.retired[name]
	return t, ok
}

// SourceOf returns the source that registered the tool of that name.
func (r *Registry) SourceOf(name string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[name]
	if !ok {
		return "", false
	}
	return e.source, true
}

// Version counts the changes made to the registry; it grows by at least one
// with each Register or Replace.
func (r *Registry) Version() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.version
}

// Notify makes the registry send on c (without blocking: a change that
// finds c full is folded into the one already pending) after each change.
// Use a channel with a buffer of 1; read Version or the tools again when it
// fires. Stop ends the notifications.
func (r *Registry) Notify(c chan<- struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watch == nil {
		r.watch = make(map[chan<- struct{}]struct{})
	}
	r.watch[c] = struct{}{}
}

// Stop ends the notifications Notify started for c.
func (r *Registry) Stop(c chan<- struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.watch, c)
}

// All returns every registered tool, sorted by name.
func (r *Registry) All() []*Tool {
	return r.list(func(*Tool) bool { return true })
}

// Visible returns the tools the model is given, those not deferred, sorted
// by name.
func (r *Registry) Visible() []*Tool {
	return r.list(func(t *Tool) bool { return !t.Deferred })
}

func (r *Registry) list(keep func(*Tool) bool) []*Tool {
	r.mu.RLock()
	out := make([]*Tool, 0, len(r.tools))
	for _, e := range r.tools {
		if keep(e.tool) {
			out = append(out, e.tool)
		}
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Tenant-scoped tools: the harness tools of docs/spec.md §7. Each tenant's
// tools are one more source, seen only by that tenant's lookups (GetFor,
// ResolveFor, VisibleFor): two tenants may each register a tool of the
// same name, and neither sees the other's. A tenant's tool never shadows a
// shared one (built-in, configured or MCP): a name a shared source holds is
// refused, naming that source, and the shared tool is what a lookup finds.

// CheckFor checks t as Register would for tenant's scope: every rule of
// the tool contract, and a name no shared source holds. It returns the
// *RegistrationError Register or Replace would (RuleDuplicateName naming
// the shared owner of the name), or nil. The registry is not changed.
func (r *Registry) CheckFor(tenant string, t *Tool) error {
	c, err := prepare(t)
	if err != nil {
		return err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.tools[c.Name]; ok {
		return duplicate(c, e.source)
	}
	return nil
}

// ReplaceTenant makes tools the whole set of tenant's tools, in one step,
// as Replace does for a source: tools of tenant not in the set are removed
// (ResolveFor still finds them, for calls planned before), the others are
// added or replaced. Their input schemas are compiled on first use, not
// here (each once while it stays the same): a node applies every tenant's
// tools when it starts, and waits on none of them. A schema CheckFor would
// refuse (a registration stored before today's bounds) blocks each call
// of its tool as invalid arguments, saying why. A tool that breaks a rule, repeats a name, or has a
// name a shared source holds is left out and its *RegistrationError
// returned (several joined) while the rest apply. An empty set removes
// every tool of tenant. It returns ErrInvalidSource for an empty tenant.
func (r *Registry) ReplaceTenant(tenant string, tools []*Tool) error {
	if tenant == "" {
		return fmt.Errorf("%w: ReplaceTenant needs a tenant", ErrInvalidSource)
	}
	var errs []error
	next := make(map[string]*Tool, len(tools))
	r.mu.RLock()
	old := r.scoped[tenant]
	r.mu.RUnlock()
	for _, t := range tools {
		if t == nil {
			errs = append(errs, &RegistrationError{Rule: RuleNilTool, Detail: "tool is nil"})
			continue
		}
		// Compiled on first use, and only once while the schema stays the
		// same: a tenant's change re-applies all its tools.
		lazy := &lazySchema{raw: slices.Clone(t.InputSchema)}
		if prev, ok := old[t.Name]; ok && prev.lazy != nil && bytes.Equal(prev.lazy.raw, t.InputSchema) {
			lazy = prev.lazy
		}
		c, err := prepareWith(t, lazy)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := next[c.Name]; dup {
			errs = append(errs, refuse(t, RuleDuplicateName, fmt.Sprintf("tenant %q offers two tools named %q; each name may appear once", tenant, c.Name)))
			continue
		}
		next[c.Name] = c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.scoped == nil {
		r.scoped = map[string]map[string]*Tool{}
		r.scopedRetired = map[string]map[string]*Tool{}
	}
	old = r.scoped[tenant]
	retired := r.scopedRetired[tenant]
	if retired == nil {
		retired = map[string]*Tool{}
		r.scopedRetired[tenant] = retired
	}
	for name, t := range old {
		if _, keep := next[name]; !keep {
			retired[name] = t
		}
	}
	for name, c := range next {
		if e, ok := r.tools[name]; ok {
			errs = append(errs, duplicate(c, e.source))
			delete(next, name)
			continue
		}
		delete(retired, name)
	}
	if len(next) == 0 {
		delete(r.scoped, tenant)
	} else {
		r.scoped[tenant] = next
	}
	r.changedLocked()
	return errors.Join(errs...)
}

// GetFor returns the tool of that name a new plan of tenant's session may
// use: a shared tool, else one of tenant's own.
func (r *Registry) GetFor(tenant, name string) (*Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.tools[name]; ok {
		return e.tool, true
	}
	t, ok := r.scoped[tenant][name]
	return t, ok
}

// ResolveFor returns the tool of that name for running a call of tenant's
// session already planned (see Resolve): a registered shared tool or
// tenant tool, else the last version of either removed since.
func (r *Registry) ResolveFor(tenant, name string) (*Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.tools[name]; ok {
		return e.tool, true
	}
	if t, ok := r.scoped[tenant][name]; ok {
		return t, true
	}
	if t, ok := r.scopedRetired[tenant][name]; ok {
		return t, true
	}
	t, ok := r.retired[name]
	return t, ok
}

// VisibleFor returns the tools a model of tenant's session is given: the
// shared tools and tenant's own that are not deferred, sorted by name.
func (r *Registry) VisibleFor(tenant string) []*Tool {
	out := r.Visible()
	r.mu.RLock()
	for _, t := range r.scoped[tenant] {
		if !t.Deferred {
			out = append(out, t)
		}
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// TenantTools returns tenant's own tools, sorted by name.
func (r *Registry) TenantTools(tenant string) []*Tool {
	r.mu.RLock()
	out := make([]*Tool, 0, len(r.scoped[tenant]))
	for _, t := range r.scoped[tenant] {
		out = append(out, t)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
