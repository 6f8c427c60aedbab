package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/callsheet/callsheet/internal/schema"
)

// ErrInvalidOption is wrapped by the error New returns for an option that
// cannot apply: a nil function, or a typed option (WithMutatedPaths,
// WithTouchedPaths, WithClassify) whose argument type is not the tool's.
var ErrInvalidOption = errors.New("tool: invalid option")

// Option configures a tool built by New or Func.
type Option func(*config) error

// config is what options act on: the tool being built and a decoder for its
// argument type, which the typed options wrap.
type config struct {
	tool    *Tool
	argType reflect.Type
	// decode normalizes, validates, applies defaults and decodes args into
	// dst, a pointer to the argument type.
	decode func(args json.RawMessage, dst any) error
}

func (c *config) checkType(option string, t reflect.Type) error {
	if t != c.argType {
		return fmt.Errorf("%w: %s takes a function of %s, but tool %q's arguments are %s", ErrInvalidOption, option, t, c.tool.Name, c.argType)
	}
	return nil
}

// New builds a tool from a Go function over an argument struct A.
//
// The input schema is generated from A by jsonschema-go: each exported field
// is a property named by its `json` tag; a `jsonschema:"..."` tag is its
// description; fields without omitempty or omitzero are required; unknown
// fields are refused. These extra tags refine it (a slice field's enum,
// minimum and maximum apply to its items):
//
//	enum:"a,b,c"      allowed values, parsed as the field's type (strings,
//	                  numbers or booleans)
//	default:"..."     the value used when the field is absent: a string
//	                  field takes the text as is, other types parse it as
//	                  JSON. It goes in the schema's "default" and makes the
//	                  field optional.
//	minimum:"1"       lower bound of a number
//	maximum:"100"     upper bound of a number
//
// Validate checks arguments strictly against the schema (see CompileSchema)
// and that they decode into A. Run normalizes and validates the arguments,
// decodes them into A with unknown fields refused, fills absent fields that
// have a default, and calls fn; fn is never called with invalid arguments.
// Declarations left out take the strictest values. The tool's functions are
// safe for concurrent use when fn and the option functions are.
//
// New returns a *RegistrationError (matching ErrInvalidTool) for a tool
// Registry.Register would refuse, including an A that has no object schema,
// and an error wrapping ErrInvalidOption for an option that cannot apply.
func New[A any](name, description string, fn func(ctx context.Context, args A) (Result, error), opts ...Option) (*Tool, error) {
	t := &Tool{Name: name, Description: description}
	if fn == nil {
		return nil, refuse(t, RuleRun, "Run is nil: the tool has no function to call")
	}
	s, err := jsonschema.For[A](nil)
	if err != nil {
		return nil, refuse(t, RuleInputSchema, fmt.Sprintf("cannot generate a schema from %s: %v", reflect.TypeFor[A](), err))
	}
	if err := applyTags(s, reflect.TypeFor[A]()); err != nil {
		return nil, refuse(t, RuleInputSchema, err.Error())
	}
	t.InputSchema, err = json.Marshal(s)
	if err != nil {
		return nil, refuse(t, RuleInputSchema, fmt.Sprintf("cannot encode the schema of %s: %v", reflect.TypeFor[A](), err))
	}
	// A typed tool's defaults are filled into its arguments, so each must
	// satisfy its own schema.
	v, err := compileWith(t.InputSchema, schema.Options{CloseObjects: true, CheckDefaults: true})
	if err != nil {
		return nil, refuse(t, RuleInputSchema, fmt.Sprintf("argument type %s: %v", reflect.TypeFor[A](), err))
	}

	// Arguments are validated when a call is planned and again when it runs
	// (and by the typed options in between): memo keeps what the full path
	// prepared for arguments that passed it, so that it runs once per
	// arguments (see argsMemo, which says why that is safe).
	memo := &argsMemo{}
	decode := func(args json.RawMessage, dst any) error {
		if prepared, ok := memo.get(args); ok {
			// Decoded strictly once already; unknown fields cannot occur.
			if err := json.Unmarshal(prepared, dst); err != nil {
				return decodeProblem(err)
			}
			return nil
		}
		prepared, err := prepareTyped(v, s, args, dst)
		if err != nil {
			return err
		}
		memo.put(args, prepared)
		return nil
	}
	t.Validate = func(args json.RawMessage) error {
		if _, ok := memo.get(args); ok {
			return nil
		}
		var a A
		return decode(args, &a)
	}
	t.prune = v.prune
	t.memo = memo
	t.Run = func(ctx context.Context, args json.RawMessage) (Result, error) {
		var a A
		if err := decode(args, &a); err != nil {
			return Result{}, err
		}
		return fn(ctx, a)
	}

	c := &config{tool: t, argType: reflect.TypeFor[A](), decode: decode}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	t.Declarations = t.Declarations.Normalize()
	if _, err := check(t, false); err != nil { // the schema compiled above
		return nil, err
	}
	return t, nil
}

// Func is New for a function returning any value R, converted to a Result:
// a string becomes a text part, a Result or *Result is used as is, a []Part
// or a Part becomes the result's parts, and anything else becomes one JSON
// part (an error if it does not marshal).
func Func[A, R any](name, description string, fn func(ctx context.Context, args A) (R, error), opts ...Option) (*Tool, error) {
	var run func(context.Context, A) (Result, error)
	if fn != nil {
		run = func(ctx context.Context, a A) (Result, error) {
			r, err := fn(ctx, a)
			if err != nil {
				return Result{}, err
			}
			return toResult(r)
		}
	}
	return New(name, description, run, opts...)
}

// prepareTyped is the full path of a typed tool's decoder: it normalizes
// and validates args, applies defaults, writes integers plainly and decodes
// the result into dst strictly. It returns the bytes it decoded.
func prepareTyped(v *validator, s *jsonschema.Schema, args json.RawMessage, dst any) ([]byte, error) {
	_, obj, err := parseArguments(args)
	if err != nil {
		return nil, err
	}
	if ae := v.check(obj); ae != nil {
		return nil, ae
	}
	applyDefaults(s, obj)
	integerForms(obj) // 2.0 is an integer (JSON Schema); encoding/json wants 2
	data, err := marshalValue(obj)
	if err != nil {
		return nil, argError("arguments", "cannot re-encode: %v", err)
	}
	if err := decodeStrict(data, dst); err != nil {
		return nil, err
	}
	return data, nil
}

func toResult(v any) (Result, error) {
	switch x := v.(type) {
	case Result:
		return x, nil
	case *Result:
		if x == nil {
			return Result{}, nil
		}
		return *x, nil
	case string:
		return Text(x), nil
	case []Part:
		return Result{Parts: x}, nil
	case Part:
		return Result{Parts: []Part{x}}, nil
	}
	return JSON(v)
}

// WithShortDescription sets the one-line description used when the tool
// section is over budget.
func WithShortDescription(s string) Option {
	return func(c *config) error { c.tool.ShortDescription = s; return nil }
}

// WithGuidelines appends guidelines: when to use the tool. A tool needs at
// least one non-empty guideline.
func WithGuidelines(g ...string) Option {
	return func(c *config) error { c.tool.Guidelines = append(c.tool.Guidelines, g...); return nil }
}

// WithSnippet sets an example call.
func WithSnippet(s string) Option {
	return func(c *config) error { c.tool.Snippet = s; return nil }
}

// WithDeclarations sets the static effect, replay and concurrency; empty
// fields take the strictest values.
func WithDeclarations(d Declarations) Option {
	return func(c *config) error { c.tool.Declarations = d; return nil }
}

// WithEffect sets the static effect.
func WithEffect(e Effect) Option {
	return func(c *config) error { c.tool.Effect = e; return nil }
}

// WithReplay sets the static replay policy.
func WithReplay(r Replay) Option {
	return func(c *config) error { c.tool.Replay = r; return nil }
}

// WithConcurrency sets the static concurrency class.
func WithConcurrency(cc Concurrency) Option {
	return func(c *config) error { c.tool.Concurrency = cc; return nil }
}

// WithLabels appends effect labels (signals for approvers, never gates).
func WithLabels(l ...Label) Option {
	return func(c *config) error { c.tool.Labels = append(c.tool.Labels, l...); return nil }
}

// WithSelfConcurrency sets the function read at each call for the tool's
// self-concurrency cap; see Tool.SelfConcurrency. It must be safe for
// concurrent use.
func WithSelfConcurrency(fn func() int) Option {
	return func(c *config) error {
		if fn == nil {
			return fmt.Errorf("%w: WithSelfConcurrency: nil function", ErrInvalidOption)
		}
		c.tool.SelfConcurrency = fn
		return nil
	}
}

// WithTimeout sets the hard per-call timeout; Infinite only for
// user-mediated tools. Without it the tool gets DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error { c.tool.Timeout = d; return nil }
}

// WithEscalation lets a call carry "escalate": true (refused for read-only
// tools).
func WithEscalation() Option {
	return func(c *config) error { c.tool.Escalation = true; return nil }
}

// WithWorkspaceFree declares that the tool never touches the session's
// workspace: a node that does not hold it may run the tool.
func WithWorkspaceFree() Option {
	return func(c *config) error { c.tool.WorkspaceFree = true; return nil }
}

// WithFleetCap bounds the calls of the tool running at once across every
// session and node to n (1..MaxFleetCap), counted per tenant
// (FleetCapTenant, also for an empty scope) or over the whole fleet
// (FleetCapFleet).
func WithFleetCap(n int, scope string) Option {
	return func(c *config) error {
		if n < 1 || n > MaxFleetCap {
			return fmt.Errorf("%w: fleet cap %d: use 1..%d", ErrInvalidOption, n, MaxFleetCap)
		}
		if scope != "" && scope != FleetCapTenant && scope != FleetCapFleet {
			return fmt.Errorf("%w: fleet cap scope %q: use %q or %q", ErrInvalidOption, scope, FleetCapTenant, FleetCapFleet)
		}
		c.tool.FleetCap, c.tool.FleetCapScope = n, scope
		return nil
	}
}

// WithDeferred keeps the tool out of the model's list; tool_search finds it.
func WithDeferred() Option {
	return func(c *config) error { c.tool.Deferred = true; return nil }
}

// WithMutatedPaths sets the files a call will write, from its decoded
// arguments. The tool's MutatedPaths returns nil for arguments that do not
// validate or decode into A. A must be the tool's argument type.
func WithMutatedPaths[A any](fn func(A) []string) Option {
	return func(c *config) error {
		f, err := typedPaths(c, "WithMutatedPaths", fn)
		c.tool.MutatedPaths = f
		return err
	}
}

// WithTouchedPaths sets the files a call reads, from its decoded arguments.
// The tool's TouchedPaths returns nil for arguments that do not validate or
// decode into A. A must be the tool's argument type.
func WithTouchedPaths[A any](fn func(A) []string) Option {
	return func(c *config) error {
		f, err := typedPaths(c, "WithTouchedPaths", fn)
		c.tool.TouchedPaths = f
		return err
	}
}

func typedPaths[A any](c *config, option string, fn func(A) []string) (func(json.RawMessage) []string, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: %s: nil function", ErrInvalidOption, option)
	}
	if err := c.checkType(option, reflect.TypeFor[A]()); err != nil {
		return nil, err
	}
	decode := c.decode
	return func(args json.RawMessage) []string {
		var a A
		if decode(args, &a) != nil {
			return nil
		}
		return fn(a)
	}, nil
}

// WithClassify lets a mixed tool pick its declarations per call from its
// decoded arguments. For arguments that do not validate or decode into A the
// tool's Classify returns the zero Declarations, which normalize to
// Strictest. A must be the tool's argument type.
func WithClassify[A any](fn func(A) Declarations) Option {
	return func(c *config) error {
		if fn == nil {
			return fmt.Errorf("%w: WithClassify: nil function", ErrInvalidOption)
		}
		if err := c.checkType("WithClassify", reflect.TypeFor[A]()); err != nil {
			return err
		}
		decode := c.decode
		c.tool.Classify = func(args json.RawMessage) Declarations {
			var a A
			if decode(args, &a) != nil {
				return Declarations{}
			}
			return fn(a)
		}
		return nil
	}
}

// applyTags adds the enum, default, minimum and maximum tags of the fields of
// t (and of the structs it holds) to s, the schema jsonschema.For generated
// for t. For refuses cyclic types, so the recursion ends.
func applyTags(s *jsonschema.Schema, t reflect.Type) error {
	if s == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return applyTags(s.Items, t.Elem())
	case reflect.Map:
		return applyTags(s.AdditionalProperties, t.Elem())
	case reflect.Struct:
	default:
		return nil
	}
	if s.Properties == nil {
		return nil // a type with its own schema, such as time.Time
	}
	for _, f := range reflect.VisibleFields(t) {
		if f.Anonymous || !f.IsExported() {
			continue
		}
		name, ok := jsonName(f)
		if !ok {
			continue
		}
		ps := s.Properties[name]
		if ps == nil {
			continue
		}
		if err := applyFieldTags(s, ps, name, f); err != nil {
			return fmt.Errorf("field %s.%s: %w", t, f.Name, err)
		}
		if err := applyTags(ps, f.Type); err != nil {
			return err
		}
	}
	return nil
}

// jsonName returns a field's JSON name as encoding/json sees it, and false
// for a field it skips.
func jsonName(f reflect.StructField) (string, bool) {
	tag, ok := f.Tag.Lookup("json")
	if !ok {
		return f.Name, true
	}
	name, _, found := strings.Cut(tag, ",")
	if name == "-" && !found {
		return "", false
	}
	if name == "" {
		return f.Name, true
	}
	return name, true
}

func applyFieldTags(parent, ps *jsonschema.Schema, name string, f reflect.StructField) error {
	// enum, minimum and maximum constrain the items of a slice field.
	target, et := ps, deref(f.Type)
	if (et.Kind() == reflect.Slice || et.Kind() == reflect.Array) && ps.Items != nil {
		target, et = ps.Items, deref(et.Elem())
	}
	if tag, ok := f.Tag.Lookup("enum"); ok {
		vals, err := parseEnum(tag, et)
		if err != nil {
			return err
		}
		target.Enum = vals
	}
	for _, b := range []struct {
		tag string
		dst **float64
	}{{"minimum", &target.Minimum}, {"maximum", &target.Maximum}} {
		tag, ok := f.Tag.Lookup(b.tag)
		if !ok {
			continue
		}
		if !isNumberKind(et.Kind()) {
			return fmt.Errorf("%s tag on a field of type %s: only numbers take bounds", b.tag, f.Type)
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(tag), 64)
		if err != nil {
			return fmt.Errorf("%s tag %q is not a number", b.tag, tag)
		}
		*b.dst = &x
	}
	if tag, ok := f.Tag.Lookup("default"); ok {
		def, err := parseDefault(tag, f.Type)
		if err != nil {
			return err
		}
		ps.Default = def
		// A field with a default may be left out.
		parent.Required = slices.DeleteFunc(parent.Required, func(r string) bool { return r == name })
		if len(parent.Required) == 0 {
			parent.Required = nil
		}
	}
	return nil
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func isNumberKind(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// parseEnum parses a comma-separated enum tag as values of type t.
func parseEnum(tag string, t reflect.Type) ([]any, error) {
	var vals []any
	for _, item := range strings.Split(tag, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("enum tag %q has an empty value", tag)
		}
		var v any
		var err error
		switch k := t.Kind(); {
		case k == reflect.String:
			v = item
		case k == reflect.Bool:
			v, err = strconv.ParseBool(item)
		case isNumberKind(k):
			// Decode into the Go type so that out-of-range or fractional
			// values for an integer field are refused here.
			p := reflect.New(t)
			if err = json.Unmarshal([]byte(item), p.Interface()); err == nil {
				v = p.Elem().Interface()
			}
		default:
			return nil, fmt.Errorf("enum tag on a field of type %s: only strings, numbers and booleans take an enum", t)
		}
		if err != nil {
			return nil, fmt.Errorf("enum value %q is not a %s", item, t)
		}
		vals = append(vals, v)
	}
	return vals, nil
}

// parseDefault parses a default tag as a value of type t and returns its JSON.
func parseDefault(tag string, t reflect.Type) (json.RawMessage, error) {
	p := reflect.New(t)
	if deref(t).Kind() == reflect.String {
		// The text is the value: default:"utf-8", not default:"\"utf-8\"".
		q, _ := json.Marshal(tag)
		if err := json.Unmarshal(q, p.Interface()); err != nil {
			return nil, fmt.Errorf("default %q does not fit %s: %v", tag, t, err)
		}
	} else if err := json.Unmarshal([]byte(tag), p.Interface()); err != nil {
		return nil, fmt.Errorf("default %q does not parse as %s: %v", tag, t, err)
	}
	return json.Marshal(p.Elem().Interface())
}

// applyDefaults fills absent properties that have a default, at every depth
// of a parsed arguments value. It runs only on the copy the typed decoder
// reads; the call's recorded arguments are left as the model sent them.
func applyDefaults(s *jsonschema.Schema, v any) {
	if s == nil {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		for name, ps := range s.Properties {
			val, ok := x[name]
			if !ok {
				if ps.Default != nil {
					x[name] = ps.Default
				}
				continue
			}
			applyDefaults(ps, val)
		}
		if s.AdditionalProperties != nil {
			for k, val := range x {
				if _, ok := s.Properties[k]; !ok {
					applyDefaults(s.AdditionalProperties, val)
				}
			}
		}
	case []any:
		for _, e := range x {
			applyDefaults(s.Items, e)
		}
	}
}
