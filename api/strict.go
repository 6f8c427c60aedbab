package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ErrNotStrict is matched by every error StrictSchema returns: a schema
// OpenAI's strict mode cannot express.
var ErrNotStrict = errors.New("api: schema cannot be made strict")

// StrictSchema rewrites a tool's input schema into the form OpenAI's strict
// mode (Structured Outputs, "strict": true) accepts, as the openai package's
// toStrictJsonSchema checks it (docs/facts.md "MCP and provider facts"):
//
//   - every object is closed ("additionalProperties": false) and lists every
//     property in "required";
//   - a property that was optional becomes nullable: "null" joins its type
//     (and its enum), or it becomes {"anyOf": [it, {"type": "null"}]}; the
//     node reads a null there as the field left out (tool.Tool.Arguments);
//   - keywords strict mode does not support that only narrow what is valid
//     (uniqueItems, not, if/then/else, minProperties, maxProperties,
//     contains and its bounds, propertyNames, dependentRequired,
//     dependentSchemas, additionalItems, unevaluatedItems,
//     unevaluatedProperties, content*) are removed, and each removal is
//     returned as a note: the node still validates every call against the
//     tool's real schema, so a value they would refuse is blocked as
//     invalid_arguments, never run;
//   - a default of null is dropped (it says nothing).
//
// It refuses, with an error matching ErrNotStrict that names the place
// ("arguments.items[]") and the reason, a schema whose meaning strict mode
// cannot hold: a root that is not an object, an object open to other
// fields (additionalProperties true or a schema; patternProperties), a
// schema that combines with allOf, tuple items (prefixItems, items as an
// array), an array without items, a boolean schema, a dynamic reference, or
// a value of any type (a schema without a type, enum, const, anyOf or
// $ref). The input is not modified; StrictSchema is pure.
func StrictSchema(schema json.RawMessage) (json.RawMessage, []string, error) {
	var root any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, nil, fmt.Errorf("%w: the schema is not JSON: %v", ErrNotStrict, err)
	}
	obj, ok := root.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("%w: the schema is not an object", ErrNotStrict)
	}
	if typ, _ := obj["type"].(string); typ != "object" {
		return nil, nil, fmt.Errorf(`%w: arguments: the root must have "type": "object"`, ErrNotStrict)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if _, ok := obj[k]; ok {
			return nil, nil, fmt.Errorf("%w: arguments: the root may not be a union (%s)", ErrNotStrict, k)
		}
	}
	st := &strictifier{}
	out, err := st.node(obj, "arguments")
	if err != nil {
		return nil, nil, err
	}
	if err := checkRefs(out, out, "arguments"); err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNotStrict, err)
	}
	return b, st.notes, nil
}

// strictRemoved are the keywords strict mode does not take that only
// narrow what is valid: removing one loosens the schema the model sees, and
// the node still holds calls to the tool's real schema.
var strictRemoved = []string{
	"uniqueItems", "not", "if", "then", "else", "minProperties", "maxProperties",
	"contains", "minContains", "maxContains", "propertyNames", "dependentRequired",
	"dependentSchemas", "dependencies", "additionalItems", "unevaluatedItems",
	"unevaluatedProperties", "contentEncoding", "contentMediaType", "contentSchema",
}

// strictRefused are keywords whose meaning strict mode cannot hold, and why.
var strictRefused = map[string]string{
	"allOf":             "combines schemas with allOf, which strict mode does not support",
	"patternProperties": "allows fields by pattern (patternProperties); strict mode needs every object closed to its listed properties",
	"prefixItems":       "is a tuple (prefixItems); strict mode takes one schema for every item",
	"$dynamicRef":       "uses $dynamicRef, which strict mode does not support",
	"$dynamicAnchor":    "uses $dynamicAnchor, which strict mode does not support",
	"$recursiveRef":     "uses $recursiveRef, which strict mode does not support",
	"$recursiveAnchor":  "uses $recursiveAnchor, which strict mode does not support",
	"$anchor":           "uses $anchor, which strict mode does not support",
}

type strictifier struct {
	notes []string
}

// node returns the strict form of the schema v found at path.
func (st *strictifier) node(v any, path string) (any, error) {
	s, ok := v.(map[string]any)
	if !ok {
		if _, isBool := v.(bool); isBool {
			return nil, fmt.Errorf("%w: %s: a boolean schema (true or false) has no strict form; give it a type", ErrNotStrict, path)
		}
		return nil, fmt.Errorf("%w: %s: a schema must be an object, got %T", ErrNotStrict, path, v)
	}
	out := make(map[string]any, len(s))
	for k, val := range s {
		out[k] = val
	}
	for _, k := range sortedKeys(out) {
		if why, bad := strictRefused[k]; bad {
			return nil, fmt.Errorf("%w: %s %s", ErrNotStrict, path, why)
		}
	}
	if _, ok := out["$id"]; ok && path != "arguments" {
		return nil, fmt.Errorf("%w: %s has its own $id (a separate schema resource), which strict mode cannot hold", ErrNotStrict, path)
	}
	if ref, ok := out["$ref"].(string); ok && !strings.HasPrefix(ref, "#") {
		return nil, fmt.Errorf("%w: %s: $ref %q names another document; strict mode takes only references inside the schema (\"#/$defs/NAME\")", ErrNotStrict, path, ref)
	}
	if t, ok := out["type"].([]any); ok && len(t) == 1 {
		out["type"] = t[0] // what toStrictJsonSchema makes of a list of one
	}
	for _, k := range strictRemoved {
		if _, ok := out[k]; ok {
			delete(out, k)
			st.notes = append(st.notes, fmt.Sprintf("%s: removed %s (not supported by strict mode; calls are still checked against it)", path, k))
		}
	}
	if d, ok := out["default"]; ok && d == nil {
		delete(out, "default")
	}
	types := typesOf(out["type"])
	if t, ok := out["type"]; ok && (len(types) == 0 || (isList(t) && len(types) != len(t.([]any)))) {
		return nil, fmt.Errorf("%w: %s: type %v is not a JSON Schema type name or a list of them", ErrNotStrict, path, t)
	}
	for _, t := range types {
		if !slices.Contains(jsonTypes, t) {
			return nil, fmt.Errorf("%w: %s: type %q is not one of %s", ErrNotStrict, path, t, strings.Join(jsonTypes, ", "))
		}
	}
	_, hasProps := out["properties"]
	if hasProps && len(types) > 0 && !slices.Contains(types, "object") {
		return nil, fmt.Errorf("%w: %s has properties but its type %v is not object", ErrNotStrict, path, out["type"])
	}
	isObject := slices.Contains(types, "object") || (len(types) == 0 && hasProps)
	isArray := slices.Contains(types, "array")
	_, hasRef := out["$ref"]
	_, hasAnyOf := out["anyOf"]
	_, hasOneOf := out["oneOf"]
	_, hasEnum := out["enum"]
	_, hasConst := out["const"]
	if len(types) == 0 && !hasProps && !hasRef && !hasAnyOf && !hasOneOf && !hasEnum && !hasConst {
		return nil, fmt.Errorf("%w: %s accepts a value of any type; strict mode needs a type (or enum, const, anyOf, $ref)", ErrNotStrict, path)
	}
	if hasRef {
		for k := range out {
			if !strictRefSibling(k) {
				return nil, fmt.Errorf("%w: %s: $ref beside %q (strict mode allows only annotations beside a $ref)", ErrNotStrict, path, k)
			}
		}
	}
	if hasOneOf {
		// Strict mode takes anyOf; oneOf's "exactly one" is still checked by
		// the node against the real schema.
		if hasAnyOf {
			return nil, fmt.Errorf("%w: %s has both anyOf and oneOf", ErrNotStrict, path)
		}
		out["anyOf"] = out["oneOf"]
		delete(out, "oneOf")
		hasAnyOf = true
		st.notes = append(st.notes, path+": oneOf given as anyOf (calls are still checked against oneOf)")
	}
	if isObject && hasAnyOf {
		return nil, fmt.Errorf("%w: %s is an object with its own fields and also a union (anyOf/oneOf); strict mode takes one or the other", ErrNotStrict, path)
	}
	if isObject {
		if err := st.object(out, path); err != nil {
			return nil, err
		}
	}
	if isArray {
		items, ok := out["items"]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: %s is an array without items; strict mode needs the schema of its items", ErrNotStrict, path)
		case isList(items):
			return nil, fmt.Errorf("%w: %s is a tuple (items is a list); strict mode takes one schema for every item", ErrNotStrict, path)
		}
		strictItems, err := st.node(items, path+"[]")
		if err != nil {
			return nil, err
		}
		out["items"] = strictItems
	} else if items, ok := out["items"]; ok && !isList(items) {
		strictItems, err := st.node(items, path+"[]")
		if err != nil {
			return nil, err
		}
		out["items"] = strictItems
	}
	if hasAnyOf {
		alts, ok := out["anyOf"].([]any)
		if !ok {
			return nil, fmt.Errorf("%w: %s: anyOf is not a list", ErrNotStrict, path)
		}
		strictAlts := make([]any, len(alts))
		for i, a := range alts {
			sa, err := st.node(a, fmt.Sprintf("%s(anyOf %d)", path, i))
			if err != nil {
				return nil, err
			}
			strictAlts[i] = sa
		}
		out["anyOf"] = strictAlts
	}
	for _, defs := range []string{"$defs", "definitions"} {
		m, ok := out[defs].(map[string]any)
		if !ok {
			continue
		}
		strictDefs := make(map[string]any, len(m))
		for _, name := range sortedKeys(m) {
			sd, err := st.node(m[name], "#/"+defs+"/"+name)
			if err != nil {
				return nil, err
			}
			strictDefs[name] = sd
		}
		out[defs] = strictDefs
	}
	return out, nil
}

// object closes an object schema and makes every property required, the
// optional ones nullable.
func (st *strictifier) object(out map[string]any, path string) error {
	if ap, ok := out["additionalProperties"]; ok && ap != false {
		return fmt.Errorf("%w: %s takes fields beyond its listed properties (additionalProperties); strict mode needs every object closed", ErrNotStrict, path)
	}
	out["additionalProperties"] = false
	props, _ := out["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	var required []string
	if rs, ok := out["required"].([]any); ok {
		for _, r := range rs {
			if name, ok := r.(string); ok {
				required = append(required, name)
			}
		}
	}
	for _, r := range required {
		if _, ok := props[r]; !ok {
			return fmt.Errorf("%w: %s requires %q, which it does not declare in properties", ErrNotStrict, path, r)
		}
	}
	strictProps := make(map[string]any, len(props))
	names := sortedKeys(props)
	for _, name := range names {
		sp, err := st.node(props[name], childPath(path, name))
		if err != nil {
			return err
		}
		if !slices.Contains(required, name) {
			sp = nullable(sp)
		}
		strictProps[name] = sp
	}
	out["properties"] = strictProps
	req := make([]any, len(names))
	for i, n := range names {
		req[i] = n
	}
	out["required"] = req
	return nil
}

// nullable makes an optional property's schema also accept null, the way
// strict mode marks a field the model may leave out.
func nullable(v any) any {
	s, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if acceptsNullJSON(s) {
		return s
	}
	types := typesOf(s["type"])
	_, hasRef := s["$ref"]
	_, hasConst := s["const"]
	switch {
	case len(types) > 0 && !hasRef && !hasConst:
		out := copyMap(s)
		ts := make([]any, 0, len(types)+1)
		for _, t := range types {
			ts = append(ts, t)
		}
		out["type"] = append(ts, "null")
		if enum, ok := out["enum"].([]any); ok {
			out["enum"] = append(slices.Clone(enum), nil)
		}
		return out
	case s["anyOf"] != nil && !hasRef:
		out := copyMap(s)
		alts, _ := out["anyOf"].([]any)
		out["anyOf"] = append(slices.Clone(alts), map[string]any{"type": "null"})
		return out
	case s["enum"] != nil && !hasRef && !hasConst:
		out := copyMap(s)
		enum, _ := out["enum"].([]any)
		out["enum"] = append(slices.Clone(enum), nil)
		return out
	}
	// A $ref or a const: wrap, keeping the description outside where the
	// model reads it.
	inner := copyMap(s)
	wrapped := map[string]any{"anyOf": []any{inner, map[string]any{"type": "null"}}}
	if d, ok := inner["description"]; ok && !hasRef {
		wrapped["description"] = d
		delete(inner, "description")
	}
	return wrapped
}

// acceptsNullJSON reports whether a (strict) schema already accepts null.
func acceptsNullJSON(s map[string]any) bool {
	if slices.Contains(typesOf(s["type"]), "null") {
		if enum, ok := s["enum"].([]any); ok {
			return slices.Contains(enum, nil)
		}
		return true
	}
	if alts, ok := s["anyOf"].([]any); ok {
		for _, a := range alts {
			if m, ok := a.(map[string]any); ok && acceptsNullJSON(m) {
				return true
			}
		}
	}
	if c, ok := s["const"]; ok && c == nil {
		return true
	}
	return false
}

func strictRefSibling(k string) bool {
	switch k {
	case "$ref", "description", "title", "default", "examples", "$comment", "readOnly", "writeOnly":
		return true
	}
	return false
}

// jsonTypes are JSON Schema's type names.
var jsonTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

// typesOf reads "type" as a list: "string" → [string]; ["a","b"] → [a b].
func typesOf(v any) []string {
	switch t := v.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func isList(v any) bool { _, ok := v.([]any); return ok }

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// childPath names a property the way argument problems do: a.b, or
// a["odd key"].
func childPath(path, name string) string {
	for _, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b, _ := json.Marshal(name)
			return path + "[" + string(b) + "]"
		}
	}
	if strings.TrimSpace(name) == "" {
		return path + `[""]`
	}
	return path + "." + name
}

// checkRefs refuses a strict schema with a reference that does not lead to
// a schema in it: its target was a part the rewriting removed (under if,
// not, dependentSchemas, ...), or never there.
func checkRefs(root, v any, path string) error {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			target, found := pointerTarget(root, strings.TrimPrefix(ref, "#"))
			_, isObj := target.(map[string]any)
			_, isBool := target.(bool)
			if !found || !isObj && !isBool {
				return fmt.Errorf("%w: %s: $ref %q leads to no schema of the strict form (its target is not one, or went with a keyword strict mode does not take)", ErrNotStrict, path, ref)
			}
		}
		for _, k := range sortedKeys(x) {
			if k == "enum" || k == "const" || k == "default" || k == "examples" {
				continue // values, not schemas
			}
			if err := checkRefs(root, x[k], path); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkRefs(root, e, path); err != nil {
				return err
			}
		}
	}
	return nil
}

// pointerTarget follows a JSON pointer (decoded from a URI fragment) in v.
func pointerTarget(v any, ptr string) (any, bool) {
	if p, err := url.PathUnescape(ptr); err == nil {
		ptr = p
	}
	if ptr == "" {
		return v, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[tok]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}
