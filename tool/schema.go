package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// CompileSchema compiles a JSON Schema (draft 2020-12 or draft-07) for a
// tool's arguments into a strict validator. The schema's root must have
// "type": "object", since arguments are always an object; a remote $ref, an
// invalid schema or a "default" that does not satisfy its own schema is
// refused.
//
// Strictness. Unknown fields are refused: every object schema that lists
// "properties" but says nothing about extra fields ("additionalProperties",
// "patternProperties" and "unevaluatedProperties" all absent) is treated as
// if it said "additionalProperties": false. This holds for generated schemas
// (which say so anyway) and for operator-supplied ones (command tools,
// harness tools); a schema that wants extra fields must allow them
// explicitly. An object schema without "properties" is a free-form map and
// is left open. Schemas combined with allOf, if/then/else, not or
// dependentSchemas, and schemas that use $ref or allOf themselves, are left as
// written, because closing one part of a combination would refuse the fields
// its siblings declare.
//
// The returned function normalizes its input with NormalizeArguments (so a
// JSON string holding the object is accepted), then checks it. JSON types are
// never coerced: "5" is not an integer, and neither is 1.5 or 1e-1. Integers
// follow JSON Schema's own rule, by value: 5.0, 5e0 and 50e-1 are the integer
// 5, and a typed tool's int field receives 5. Missing required fields and values
// outside an enum are refused. The error is an *ArgumentError listing each
// problem with its path; defaults are not injected. The function is safe for
// concurrent use.
func CompileSchema(schema json.RawMessage) (func(args json.RawMessage) error, error) {
	v, err := compileSchema(schema)
	if err != nil {
		return nil, err
	}
	return v.validate, nil
}

// validator is a compiled, strict argument schema.
type validator struct {
	schema   *jsonschema.Schema
	resolved *jsonschema.Resolved
	// walkOnly: the walk checks every keyword of the schema as the library
	// does (walkCovers), so the library pass is skipped when the walk found
	// nothing and met no number it could not compare.
	walkOnly bool
	// names holds propertyNames of each object schema the walk can reach,
	// computed once.
	names map[*jsonschema.Schema][]string
}

func compileSchema(raw json.RawMessage) (*validator, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return nil, errors.New("input schema is empty")
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("input schema is not a JSON Schema: %w", err)
	}
	return compileParsed(&s)
}

func compileParsed(s *jsonschema.Schema) (*validator, error) {
	if s.Type != "object" && !(len(s.Types) == 1 && s.Types[0] == "object") {
		return nil, fmt.Errorf(`input schema must have "type": "object" at its root (arguments are always an object)`)
	}
	closeObjects(s, false)
	rs, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
	if err != nil {
		return nil, fmt.Errorf("input schema does not resolve: %w", err)
	}
	v := &validator{schema: s, resolved: rs, walkOnly: walkCovers(s, true), names: map[*jsonschema.Schema][]string{}}
	v.indexNames(s)
	return v, nil
}

// indexNames fills v.names for s and the schemas the walk descends into.
func (v *validator) indexNames(s *jsonschema.Schema) {
	if s == nil || v.names[s] != nil {
		return
	}
	v.names[s] = propertyNames(s)
	for _, c := range s.Properties {
		v.indexNames(c)
	}
	v.indexNames(s.Items)
	v.indexNames(s.AdditionalProperties)
}

// closeObjects applies the strict default described at CompileSchema.
// frozen marks a subtree (under allOf, if/then/else, not, dependentSchemas)
// that is left as written.
func closeObjects(s *jsonschema.Schema, frozen bool) {
	if s == nil {
		return
	}
	if !frozen && s.Properties != nil && s.AdditionalProperties == nil &&
		s.PatternProperties == nil && s.UnevaluatedProperties == nil &&
		s.Ref == "" && s.DynamicRef == "" && s.AllOf == nil {
		s.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}}
	}
	for _, c := range s.Properties {
		closeObjects(c, frozen)
	}
	for _, c := range s.PatternProperties {
		closeObjects(c, frozen)
	}
	for _, c := range s.Defs {
		closeObjects(c, frozen)
	}
	for _, c := range s.Definitions {
		closeObjects(c, frozen)
	}
	for _, c := range s.AnyOf {
		closeObjects(c, frozen)
	}
	for _, c := range s.OneOf {
		closeObjects(c, frozen)
	}
	for _, c := range s.PrefixItems {
		closeObjects(c, frozen)
	}
	for _, c := range s.ItemsArray {
		closeObjects(c, frozen)
	}
	closeObjects(s.Items, frozen)
	closeObjects(s.AdditionalItems, frozen)
	closeObjects(s.AdditionalProperties, frozen)
	for _, c := range s.AllOf {
		closeObjects(c, true)
	}
	closeObjects(s.If, true)
	closeObjects(s.Then, true)
	closeObjects(s.Else, true)
	closeObjects(s.Not, true)
	for _, c := range s.DependentSchemas {
		closeObjects(c, true)
	}
	for _, c := range s.DependencySchemas {
		closeObjects(c, true)
	}
}

// prune drops, at every depth, each field that is null where its schema
// says it is optional and does not accept null, and returns the arguments
// again when it dropped any: a model in OpenAI's strict mode sends null for
// every optional field it leaves out (GET /v1/tools?strict=true makes every
// field required and the optional ones nullable), and null there means
// absent. A required field that is null, or one whose schema accepts null,
// is kept and validated as given.
func (v *validator) prune(args json.RawMessage, obj map[string]any) json.RawMessage {
	if !pruneNulls(v.schema, obj) {
		return args
	}
	b, err := marshalValue(obj)
	if err != nil {
		return args
	}
	return b
}

// pruneNulls removes optional null fields from x (see prune); it reports
// whether it removed any.
func pruneNulls(s *jsonschema.Schema, x any) bool {
	if s == nil {
		return false
	}
	changed := false
	switch x := x.(type) {
	case map[string]any:
		for k, val := range x {
			ps, declared := s.Properties[k]
			if !declared {
				continue
			}
			if val == nil && !slices.Contains(s.Required, k) && !acceptsNull(ps) {
				delete(x, k)
				changed = true
				continue
			}
			changed = pruneNulls(ps, val) || changed
		}
	case []any:
		for _, e := range x {
			changed = pruneNulls(s.Items, e) || changed
		}
	}
	return changed
}

// acceptsNull reports whether s may accept null; when it cannot tell (no
// type, a $ref), it says yes, so that such a field is kept and validated.
func acceptsNull(s *jsonschema.Schema) bool {
	if s == nil {
		return true
	}
	if s.Enum != nil {
		return slices.Contains(s.Enum, nil)
	}
	if s.Const != nil {
		return *s.Const == nil
	}
	if t := schemaTypes(s); t != nil {
		return slices.Contains(t, "null")
	}
	for _, alts := range [][]*jsonschema.Schema{s.AnyOf, s.OneOf} {
		if alts != nil {
			return slices.ContainsFunc(alts, acceptsNull)
		}
	}
	return true
}

// validate is the function CompileSchema returns.
func (v *validator) validate(args json.RawMessage) error {
	_, obj, err := parseArguments(args)
	if err != nil {
		return err
	}
	if ae := v.check(obj); ae != nil {
		return ae
	}
	return nil
}

// check validates a parsed arguments object. The walk below explains the
// common keywords in words a model can act on and collects every problem;
// jsonschema-go then checks the whole schema (patterns, combinators, $ref,
// formats of numbers it does not explain) so that nothing the walk skips gets
// through. Its message is used only when the walk found nothing.
//
// When the walk covers the whole schema (walkCovers) it is enough: a value
// it accepts, the library accepts too, so the library pass (the conversion
// of the value, a reflective walk of it, and a deep recursion that grows the
// goroutine's stack) would only repeat it. Two things still send such a
// value to the full path: a number the walk could not compare with a bound
// (c.unsure), and a number too large for the library's form (toLibrary
// refuses it, with its message).
func (v *validator) check(obj map[string]any) *ArgumentError {
	return v.checkWith(obj, v.walkOnly)
}

// checkWith is check, with the library pass skipped when walkOnly allows it;
// FuzzWalkOnlyAsLibrary runs it both ways.
func (v *validator) checkWith(obj map[string]any, walkOnly bool) *ArgumentError {
	c := &checker{v: v}
	c.walk(v.schema, obj, "arguments")
	if len(c.problems) > 0 {
		return &ArgumentError{Problems: c.problems, Omitted: c.omitted}
	}
	if walkOnly && !c.unsure && !outOfRange(obj) {
		return nil
	}
	inst, err := toLibrary(obj, "arguments")
	if err != nil {
		return err.(*ArgumentError)
	}
	if err := v.resolved.Validate(inst); err != nil {
		path, msg := libraryProblem(err.Error())
		return argError(path, "does not match the schema: %s", msg)
	}
	return nil
}

// libraryProblem turns a jsonschema-go message, a chain of "validating
// <schema pointer>: " prefixes ending in the keyword that failed, into an
// argument path and that keyword's message. The path follows the pointer's
// leading /properties/NAME steps; beyond them (items, $ref, combinators) the
// instance location is not known, so it stops there.
func libraryProblem(msg string) (path, detail string) {
	pointer := ""
	for {
		rest, ok := strings.CutPrefix(msg, "validating ")
		if !ok {
			break
		}
		p, after, found := strings.Cut(rest, ": ")
		if !found {
			break
		}
		if strings.HasPrefix(p, "/properties/") {
			pointer = p // the deepest one that is still a property path
		}
		msg = after
	}
	path = "arguments"
	segs := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for i := 0; i+1 < len(segs) && segs[i] == "properties"; i += 2 {
		name := strings.ReplaceAll(strings.ReplaceAll(segs[i+1], "~1", "/"), "~0", "~")
		path = childPath(path, name)
	}
	return path, strings.ReplaceAll(msg, "\n", "; ")
}

// checker collects problems found while walking a value against a schema.
type checker struct {
	v        *validator // for its names; nil computes them
	problems []ArgumentProblem
	omitted  int
	// unsure is set when a number could not be compared with a bound (one
	// too small for any float64): the library pass must then decide.
	unsure bool
}

func (c *checker) add(path, format string, args ...any) {
	if len(c.problems) >= maxProblems {
		c.omitted++
		return
	}
	c.problems = append(c.problems, ArgumentProblem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// walk checks v against the keywords of s it can explain. v is a value from
// parseArguments (map[string]any, []any, string, json.Number, bool, nil).
func (c *checker) walk(s *jsonschema.Schema, v any, path string) {
	if s == nil {
		return
	}
	if isFalseSchema(s) {
		c.add(path, "not allowed here")
		return
	}
	got := typeOf(v)
	if want := schemaTypes(s); want != nil && !typeMatches(want, got) {
		c.add(path, "want %s, got %s", joinOr(want), describe(v))
		return
	}
	if x, ok := v.(string); ok && s.Enum != nil && allStrings(s.Enum) {
		// jsonschema.Equal of two strings, without converting or reflecting.
		if !slices.Contains(s.Enum, any(x)) {
			c.add(path, "want one of %s, got %s", listValues(s.Enum), describe(v))
			return
		}
	} else if s.Enum != nil {
		lib, err := toLibrary(v, path)
		if err == nil && !slices.ContainsFunc(s.Enum, func(e any) bool { return jsonschema.Equal(lib, e) }) {
			c.add(path, "want one of %s, got %s", listValues(s.Enum), describe(v))
			return
		}
	}
	if s.Const != nil {
		lib, err := toLibrary(v, path)
		if err == nil && !jsonschema.Equal(lib, *s.Const) {
			c.add(path, "want %s, got %s", mustJSON(*s.Const), describe(v))
			return
		}
	}
	switch x := v.(type) {
	case json.Number:
		c.number(s, x, path)
	case string:
		n := utf8.RuneCountInString(x)
		if s.MinLength != nil && n < *s.MinLength {
			c.add(path, "want at least %d characters, got %d", *s.MinLength, n)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			c.add(path, "want at most %d characters, got %d", *s.MaxLength, n)
		}
	case []any:
		if s.MinItems != nil && len(x) < *s.MinItems {
			c.add(path, "want at least %d items, got %d", *s.MinItems, len(x))
		}
		if s.MaxItems != nil && len(x) > *s.MaxItems {
			c.add(path, "want at most %d items, got %d", *s.MaxItems, len(x))
		}
		if s.Items != nil && s.PrefixItems == nil {
			for i, e := range x {
				c.walk(s.Items, e, indexPath(path, i))
			}
		}
	case map[string]any:
		c.object(s, x, path)
	}
}

func (c *checker) number(s *jsonschema.Schema, n json.Number, path string) {
	// compareBound is exact and never slow (1e999999 does not make math/big
	// compute 10^999999); a number too small for it is left to the library
	// pass, which refuses it as out of range.
	cmp := func(b *float64) (int, bool) {
		if b == nil {
			return 0, false
		}
		r, ok := compareBound(n, *b)
		c.unsure = c.unsure || !ok
		return r, ok
	}
	if r, ok := cmp(s.Minimum); ok && r < 0 {
		c.add(path, "want at least %s, got %s", fmtFloat(*s.Minimum), n)
	}
	if r, ok := cmp(s.Maximum); ok && r > 0 {
		c.add(path, "want at most %s, got %s", fmtFloat(*s.Maximum), n)
	}
	if r, ok := cmp(s.ExclusiveMinimum); ok && r <= 0 {
		c.add(path, "want more than %s, got %s", fmtFloat(*s.ExclusiveMinimum), n)
	}
	if r, ok := cmp(s.ExclusiveMaximum); ok && r >= 0 {
		c.add(path, "want less than %s, got %s", fmtFloat(*s.ExclusiveMaximum), n)
	}
}

func (c *checker) object(s *jsonschema.Schema, obj map[string]any, path string) {
	for _, name := range s.Required {
		if _, ok := obj[name]; !ok {
			c.add(childPath(path, name), "missing required field")
		}
	}
	names := c.propertyNames(s)
	for _, name := range names {
		if val, ok := obj[name]; ok {
			c.walk(s.Properties[name], val, childPath(path, name))
		}
	}
	var extra []string
	for k := range obj {
		if _, ok := s.Properties[k]; !ok {
			extra = append(extra, k)
		}
	}
	if len(extra) == 0 || s.PatternProperties != nil || s.AdditionalProperties == nil {
		return // open object, or patterns the library checks
	}
	sort.Strings(extra)
	for _, k := range extra {
		if isFalseSchema(s.AdditionalProperties) {
			if len(names) == 0 {
				c.add(childPath(path, k), "unknown field (this object takes no fields)")
			} else {
				c.add(childPath(path, k), "unknown field (allowed: %s)", strings.Join(names, ", "))
			}
			continue
		}
		c.walk(s.AdditionalProperties, obj[k], childPath(path, k))
	}
}

// propertyNames is propertyNames(s), from the validator's index when s is
// in it.
func (c *checker) propertyNames(s *jsonschema.Schema) []string {
	if c.v != nil {
		if names, ok := c.v.names[s]; ok {
			return names
		}
	}
	return propertyNames(s)
}

// propertyNames lists s's properties in declaration order when known (a
// generated schema records it), else sorted.
func propertyNames(s *jsonschema.Schema) []string {
	names := make([]string, 0, len(s.Properties))
	for _, n := range s.PropertyOrder {
		if _, ok := s.Properties[n]; ok {
			names = append(names, n)
		}
	}
	if len(names) == len(s.Properties) {
		return names
	}
	var rest []string
	for n := range s.Properties {
		if !slices.Contains(names, n) {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(names, rest...)
}

// isFalseSchema reports whether s is the schema that accepts nothing, as
// jsonschema-go represents `false`.
func isFalseSchema(s *jsonschema.Schema) bool {
	if s == nil || s.Not == nil || !reflect.ValueOf(*s.Not).IsZero() {
		return false
	}
	t := *s
	t.Not = nil
	return reflect.ValueOf(t).IsZero()
}

func schemaTypes(s *jsonschema.Schema) []string {
	if s.Type != "" {
		return []string{s.Type}
	}
	return s.Types
}

func typeMatches(want []string, got string) bool {
	return slices.Contains(want, got) || got == "integer" && slices.Contains(want, "number")
}

// typeOf returns the JSON Schema type of a parsed value. A number is an
// integer when its value has no fractional part, however it is written (2,
// 2.0, 1e2), as JSON Schema counts integers; the typed decoder rewrites such
// numbers so that a Go integer field receives them (integerForms).
func typeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if isInteger(x) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// describe renders a value for a message: its type and, for scalars, the
// value, shortened.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		const max = 40
		if utf8.RuneCountInString(x) > max {
			x = string([]rune(x)[:max]) + "…"
		}
		return "string " + strconv.Quote(x)
	case json.Number:
		return typeOf(v) + " " + x.String()
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return typeOf(v)
}

func joinOr(types []string) string {
	// Put null last: "array or null" reads better than "null or array".
	ts := slices.Clone(types)
	sort.SliceStable(ts, func(i, j int) bool { return ts[j] == "null" && ts[i] != "null" })
	return strings.Join(ts, " or ")
}

func listValues(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = mustJSON(v)
	}
	return strings.Join(parts, ", ")
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// toLibrary converts a parsed value into the form jsonschema-go validates:
// json.Number becomes int64 or float64 (the library would take json.Number
// for a string).
func toLibrary(v any, path string) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := strconv.ParseFloat(x.String(), 64)
		if err != nil {
			return nil, argError(path, "number %s is out of range", x)
		}
		return f, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			le, err := toLibrary(e, indexPath(path, i))
			if err != nil {
				return nil, err
			}
			out[i] = le
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			le, err := toLibrary(e, childPath(path, k))
			if err != nil {
				return nil, err
			}
			out[k] = le
		}
		return out, nil
	}
	return v, nil
}
