package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
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
// validator compiled from its input schema. It does not modify t.
func check(t *Tool) (func(json.RawMessage) error, error) {
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
	v, err := compileSchema(t.InputSchema)
	if err != nil {
		return nil, refuse(t, RuleInputSchema, err.Error())
	}
	if t.Run == nil {
		return nil, refuse(t, RuleRun, "Run is nil: the tool has no function to call")
	}
	return v.validate, nil
}

// Registry holds the tools of one surface by name. The zero value is an empty
// registry ready to use. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]*Tool
}

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

// Register checks t against the rules of the tool contract and adds it. It
// stores a copy of t whose empty declarations are set to their strictest
// values and whose Validate, when nil, is compiled from InputSchema (see
// CompileSchema); t itself is not modified, so one *Tool may be registered
// in several registries at once. Get returns the copy.
//
// It returns a *RegistrationError (matching ErrInvalidTool) naming the
// broken rule: RuleNilTool, RuleName, RuleDuplicateName, RuleDescription,
// RuleGuidelines, RuleDeclarations, RuleLabels, RuleReadOnlyMutatedPaths,
// RuleReadOnlyEscalation, RuleInfiniteTimeout, RuleNegativeTimeout,
// RuleInputSchema or RuleRun.
func (r *Registry) Register(t *Tool) error {
	if t == nil {
		return &RegistrationError{Rule: RuleNilTool, Detail: "tool is nil"}
	}
	validate, err := check(t)
	if err != nil {
		return err
	}
	c := *t
	c.Declarations = c.Declarations.Normalize()
	if c.FleetCap > 0 && c.FleetCapScope == "" {
		c.FleetCapScope = FleetCapTenant
	}
	c.Guidelines = slices.Clone(c.Guidelines)
	c.Labels = slices.Clone(c.Labels)
	c.InputSchema = slices.Clone(c.InputSchema)
	if c.Validate == nil {
		c.Validate = validate
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[c.Name]; dup {
		return refuse(t, RuleDuplicateName, fmt.Sprintf("a tool named %q is already registered; tool names are unique across built-in, configured, harness and MCP tools", c.Name))
	}
	if r.tools == nil {
		r.tools = make(map[string]*Tool)
	}
	r.tools[c.Name] = &c
	return nil
}

// Get returns the registered tool of that name.
func (r *Registry) Get(name string) (*Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	return t, ok
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
	for _, t := range r.tools {
		if keep(t) {
			out = append(out, t)
		}
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
