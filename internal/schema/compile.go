package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/url"
	"reflect"
	"regexp"
	"regexp/syntax"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
)

// Draft is a JSON Schema version this package validates.
type Draft int

// The drafts: a document's "$schema" selects one (DraftDefault when it has
// none); an embedded resource with its own "$id" and "$schema" may select
// another.
const (
	Draft7       Draft = 7
	Draft2020    Draft = 2020
	DraftDefault       = Draft2020
)

// Options configures Compile. The zero value validates as the drafts say,
// within the default bounds.
type Options struct {
	// CloseObjects applies callsheet's strict default (docs/spec.md §1):
	// an object schema that lists "properties" and says nothing of other
	// members (no additionalProperties, patternProperties or
	// unevaluatedProperties) refuses every member that neither it nor the
	// schemas it applies in place (allOf, anyOf, oneOf, if/then/else,
	// dependentSchemas, $ref, $dynamicRef) evaluated. Schemas under allOf,
	// if, then, else, not and dependentSchemas are parts of a combination
	// and are left open.
	CloseObjects bool
	// CheckDefaults refuses a schema whose "default" values do not
	// validate against the schema they sit in (for schemas whose defaults
	// are filled into arguments).
	CheckDefaults bool
	// Draft is the draft of a document without "$schema" (DraftDefault
	// when zero).
	Draft Draft
	// MaxBytes, MaxDepth, MaxNodes, MaxSteps and MaxEvalDepth override the
	// defaults (DefaultMaxBytes, ...) when positive.
	MaxBytes, MaxDepth, MaxNodes int
	MaxSteps                     int64
	MaxEvalDepth                 int
}

func (o Options) withDefaults() Options {
	if o.Draft == 0 {
		o.Draft = DraftDefault
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxNodes <= 0 {
		o.MaxNodes = DefaultMaxNodes
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = DefaultMaxSteps
	}
	if o.MaxEvalDepth <= 0 {
		o.MaxEvalDepth = DefaultMaxEvalDepth
	}
	return o
}

// compiles counts Compile's calls (Compiles).
var compiles atomic.Int64

// Compiles returns how many schemas this process has compiled, for tests
// that check what a node does not compile.
func Compiles() int64 { return compiles.Load() }

// Schema is a compiled schema. It is immutable and safe for concurrent use.
type Schema struct {
	root  *node
	nodes []*node
	opts  Options
}

// resource is a schema resource: the document, or a subschema with its own
// "$id". Its anchors and JSON pointers locate subschemas for references.
type resource struct {
	uri        string
	raw        any
	draft      Draft
	anchors    map[string]*node
	dynAnchors map[string]*node
	byPointer  map[string]*node
}

// node is one compiled schema (object or boolean).
type node struct {
	id       int32
	res      *resource
	base     string // the base URI references in it resolve against
	loc      string // where it is: URI#pointer, for messages
	draft    Draft
	boolean  *bool
	isRoot   bool // the root of its resource (enters the dynamic scope)
	frozen   bool
	closed   bool
	shared   bool // reachable along more than one edge: memoised
	dynamic  bool // its result may depend on the dynamic scope
	hasAnnot bool // "default" present (CheckDefaults)
	raw      map[string]any

	ref, dynRef       *node
	refStr, dynRefStr string
	dynName           string // $dynamicRef's anchor, when it resolves dynamically

	types    []string
	enum     []*value
	constant *value

	multipleOf, minimum, maximum, exclMin, exclMax             *decimal
	minText, maxText, exclMinText, exclMaxText, multipleOfText string

	minLength, maxLength, minItems, maxItems, minProps, maxProps int64
	minContains, maxContains                                     int64
	pattern                                                      *regexp.Regexp
	patternCost                                                  int64
	patternText                                                  string
	uniqueItems                                                  bool
	required                                                     []string
	dependentRequired                                            []depReq

	propNames     []string       // properties, in the order written
	propPos       map[string]int // each property's position in propNames
	props         map[string]*node
	patternProp   []patternProp
	additional    *node
	propertyNames *node
	depSchemas    []depSchema

	prefix          []*node
	items           *node // 2020-12 items, or draft-07 items as one schema
	additionalItems *node // draft-07, after an items array
	contains        *node

	unevalProps, unevalItems *node

	allOf, anyOf, oneOf []*node
	not                 *node
	ifS, thenS, elseS   *node
}

type patternProp struct {
	re   *regexp.Regexp
	cost int64
	text string
	n    *node
}

type depReq struct {
	name     string
	required []string
}

type depSchema struct {
	name string
	n    *node
}

const absent = -1

// defaultBase is the base URI of a document without "$id": a name under
// the reserved .invalid domain, so that no reference resolves to a place
// that exists.
const defaultBase = "https://callsheet.invalid/schema.json"

// Compile compiles a JSON Schema document (draft 2020-12 or draft-07). It
// returns an error wrapping ErrInvalid, ErrTooLarge, ErrRef or ErrCycle
// that says where in the document and what to do.
func Compile(raw []byte, opts Options) (*Schema, error) {
	compiles.Add(1)
	opts = opts.withDefaults()
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, fmt.Errorf("%w: the schema is empty", ErrInvalid)
	}
	if len(raw) > opts.MaxBytes {
		return nil, fmt.Errorf("%w: the schema is %d bytes, more than %d; describe the arguments more briefly", ErrTooLarge, len(raw), opts.MaxBytes)
	}
	if err := prescan(raw, opts.MaxDepth, opts.MaxNodes); err != nil {
		return nil, err
	}
	doc, orders, err := decodeOrdered(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: the schema is not JSON: %v", ErrInvalid, err)
	}
	return compileDoc(doc, orders, opts)
}

// decodeOrdered decodes a document as encoding/json does with UseNumber,
// and records the order of each object's members (properties are listed
// in messages in the order the schema gives them).
func decodeOrdered(raw []byte) (any, map[uintptr][]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	orders := map[uintptr][]string{}
	var value func() (any, error)
	value = func() (any, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return tok, nil
		}
		switch d {
		case '{':
			m := map[string]any{}
			var keys []string
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := value()
				if err != nil {
					return nil, err
				}
				if _, dup := m[k]; !dup {
					keys = append(keys, k)
				}
				m[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			orders[reflect.ValueOf(m).Pointer()] = keys
			return m, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := value()
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v", d)
	}
	doc, err := value()
	if err != nil {
		return nil, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("more than one JSON value")
	}
	return doc, orders, nil
}

func compileDoc(doc any, orders map[uintptr][]string, opts Options) (*Schema, error) {
	c := &compiler{opts: opts, resources: map[string]*resource{}, orders: orders}
	draft := opts.Draft
	if m, ok := doc.(map[string]any); ok {
		if d, err := draftOf(m["$schema"], opts.Draft); err != nil {
			return nil, fmt.Errorf("%w: #/$schema: %v", ErrInvalid, err)
		} else {
			draft = d
		}
	}
	res := c.newResource(defaultBase, doc, draft)
	root, err := c.compile(doc, res, defaultBase, "", draft, false)
	if err != nil {
		return nil, err
	}
	root.isRoot = true
	if err := c.link(); err != nil {
		return nil, err
	}
	s := &Schema{root: root, nodes: c.nodes, opts: opts}
	if err := s.analyse(); err != nil {
		return nil, err
	}
	if opts.CheckDefaults {
		if err := s.checkDefaults(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// draftOf reads "$schema".
func draftOf(v any, inherited Draft) (Draft, error) {
	if v == nil {
		return inherited, nil
	}
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("$schema must be a string naming a draft")
	}
	u := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://"), "#")
	switch u {
	case "json-schema.org/draft/2020-12/schema":
		return Draft2020, nil
	case "json-schema.org/draft-07/schema":
		return Draft7, nil
	}
	return 0, fmt.Errorf("$schema %q is not a draft this node validates; use https://json-schema.org/draft/2020-12/schema or http://json-schema.org/draft-07/schema#", s)
}

type compiler struct {
	opts      Options
	nodes     []*node
	resources map[string]*resource
	pending   []*node // nodes whose references are not linked yet
	orders    map[uintptr][]string
}

func (c *compiler) newResource(uri string, raw any, draft Draft) *resource {
	r := &resource{uri: uri, raw: raw, draft: draft, anchors: map[string]*node{}, dynAnchors: map[string]*node{}, byPointer: map[string]*node{}}
	c.resources[uri] = r
	return r
}

func invalid(loc, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, loc, fmt.Sprintf(format, args...))
}

// where names a place for messages: the pointer alone within the document,
// the full URI within an embedded resource.
func where(res *resource, ptr string) string {
	if res.uri == defaultBase {
		return "#" + ptr
	}
	return res.uri + "#" + ptr
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// compile compiles the schema raw found at ptr in res.
func (c *compiler) compile(raw any, res *resource, base, ptr string, draft Draft, frozen bool) (*node, error) {
	if n, ok := res.byPointer[ptr]; ok {
		return n, nil
	}
	if len(c.nodes) >= c.opts.MaxNodes {
		return nil, fmt.Errorf("%w: the schema has more than %d subschemas", ErrTooLarge, c.opts.MaxNodes)
	}
	n := &node{id: int32(len(c.nodes)), res: res, base: base, loc: where(res, ptr), draft: draft, frozen: frozen,
		minLength: absent, maxLength: absent, minItems: absent, maxItems: absent, minProps: absent, maxProps: absent,
		minContains: absent, maxContains: absent}
	c.nodes = append(c.nodes, n)
	res.byPointer[ptr] = n
	switch x := raw.(type) {
	case bool:
		n.boolean = &x
		return n, nil
	case map[string]any:
		n.raw = x
	default:
		return nil, invalid(n.loc, "a schema must be an object or a boolean, not %s", jsonKind(raw))
	}
	m := n.raw
	// $id: a new resource (and base), or in draft-07 "#name", an anchor.
	if id, ok := m["$id"]; ok && !(draft == Draft7 && m["$ref"] != nil) {
		s, ok := id.(string)
		if !ok {
			return nil, invalid(n.loc, "$id must be a string")
		}
		u, err := resolve(base, s)
		if err != nil {
			return nil, invalid(n.loc, "$id %q is not a URI reference: %v", s, err)
		}
		uri, frag := splitFragment(u)
		switch {
		case draft == Draft7 && strings.HasPrefix(s, "#"):
			res.anchors[frag] = n
		case frag != "" && draft == Draft2020:
			return nil, invalid(n.loc, "$id %q has a fragment; name places with $anchor", s)
		case uri != res.uri || ptr != "":
			if uri != res.uri {
				if d, err := draftOf(m["$schema"], draft); err != nil {
					return nil, invalid(n.loc, "%v", err)
				} else {
					draft = d
					n.draft = d
				}
				delete(res.byPointer, ptr)
				if other, dup := c.resources[uri]; dup && other.raw != nil {
					return nil, invalid(n.loc, "$id %q names two schemas", s)
				}
				res = c.newResource(uri, raw, draft)
				ptr = ""
				res.byPointer[ptr] = n
				n.res, n.isRoot, n.loc = res, true, where(res, "")
			}
			base = uri
			n.base = uri
			if frag != "" {
				res.anchors[frag] = n
			}
		}
	}
	if draft == Draft2020 {
		for _, kw := range []string{"$anchor", "$dynamicAnchor"} {
			if a, ok := m[kw]; ok {
				name, ok := a.(string)
				if !ok || !validAnchor(name) {
					return nil, invalid(n.loc, "%s must be a name such as \"node\" (a letter or _, then letters, digits, -, _ or .)", kw)
				}
				res.anchors[name] = n
				if kw == "$dynamicAnchor" {
					res.dynAnchors[name] = n
				}
			}
		}
	}
	if err := c.keywords(n, res, base, ptr, draft, frozen); err != nil {
		return nil, err
	}
	return n, nil
}

func validAnchor(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || 'A' <= r && r <= 'Z' || 'a' <= r && r <= 'z':
		case i > 0 && (r == '-' || r == '.' || '0' <= r && r <= '9'):
		default:
			return false
		}
	}
	return true
}

// keywords compiles n's keywords.
func (c *compiler) keywords(n *node, res *resource, base, ptr string, draft Draft, frozen bool) error {
	m := n.raw
	sub := func(kw string, v any, fz bool) (*node, error) {
		return c.compile(v, res, base, ptr+"/"+escapePointer(kw), draft, frozen || fz)
	}
	subAt := func(kw, key string, v any, fz bool) (*node, error) {
		return c.compile(v, res, base, ptr+"/"+escapePointer(kw)+"/"+escapePointer(key), draft, frozen || fz)
	}
	list := func(kw string, fz bool) ([]*node, error) {
		v, ok := m[kw]
		if !ok {
			return nil, nil
		}
		arr, ok := v.([]any)
		if !ok || len(arr) == 0 {
			return nil, invalid(n.loc, "%s must be a non-empty array of schemas", kw)
		}
		out := make([]*node, len(arr))
		for i, e := range arr {
			s, err := subAt(kw, strconv.Itoa(i), e, fz)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	}
	one := func(kw string, fz bool) (*node, error) {
		v, ok := m[kw]
		if !ok {
			return nil, nil
		}
		return sub(kw, v, fz)
	}
	schemaMap := func(kw string, fz bool) (map[string]*node, []string, error) {
		v, ok := m[kw]
		if !ok {
			return nil, nil, nil
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, nil, invalid(n.loc, "%s must be an object of schemas", kw)
		}
		names := make([]string, 0, len(obj))
		for k := range obj {
			names = append(names, k)
		}
		sort.Strings(names)
		out := make(map[string]*node, len(obj))
		for _, k := range names {
			s, err := subAt(kw, k, obj[k], fz)
			if err != nil {
				return nil, nil, err
			}
			out[k] = s
		}
		return out, names, nil
	}
	var err error
	// Definitions are compiled where they are, so that references find them
	// and their $id and anchors are known.
	defsKw := "$defs"
	if draft == Draft7 {
		defsKw = "definitions"
	}
	if _, _, err = schemaMap(defsKw, false); err != nil {
		return err
	}
	if r, ok := m["$ref"]; ok {
		s, ok := r.(string)
		if !ok {
			return invalid(n.loc, "$ref must be a string")
		}
		n.refStr = s
		c.pending = append(c.pending, n)
		if draft == Draft7 {
			return nil // every other keyword beside $ref is ignored in draft-07
		}
	}
	if draft == Draft2020 {
		if r, ok := m["$dynamicRef"]; ok {
			s, ok := r.(string)
			if !ok {
				return invalid(n.loc, "$dynamicRef must be a string")
			}
			n.dynRefStr = s
			if n.refStr == "" {
				c.pending = append(c.pending, n)
			}
		}
	}
	if _, ok := m["default"]; ok {
		n.hasAnnot = true
	}
	if err := c.assertions(n, m, draft); err != nil {
		return err
	}
	// Applicators.
	if n.allOf, err = list("allOf", true); err != nil {
		return err
	}
	if n.anyOf, err = list("anyOf", false); err != nil {
		return err
	}
	if n.oneOf, err = list("oneOf", false); err != nil {
		return err
	}
	if n.not, err = one("not", true); err != nil {
		return err
	}
	if n.ifS, err = one("if", true); err != nil {
		return err
	}
	if n.thenS, err = one("then", true); err != nil {
		return err
	}
	if n.elseS, err = one("else", true); err != nil {
		return err
	}
	if n.props, _, err = schemaMap("properties", false); err != nil {
		return err
	}
	if n.props != nil {
		props := m["properties"].(map[string]any)
		n.propNames = c.orders[reflect.ValueOf(props).Pointer()]
		if len(n.propNames) != len(props) {
			n.propNames = sortedKeys(props)
		}
		n.propPos = make(map[string]int, len(n.propNames))
		for i, name := range n.propNames {
			n.propPos[name] = i
		}
	}
	if pp, names, err := schemaMap("patternProperties", false); err != nil {
		return err
	} else {
		for _, p := range names {
			re, cost, err := compilePattern(p)
			if err != nil {
				return invalid(n.loc, "patternProperties %q: %v", p, err)
			}
			n.patternProp = append(n.patternProp, patternProp{re: re, cost: cost, text: p, n: pp[p]})
		}
	}
	if n.additional, err = one("additionalProperties", false); err != nil {
		return err
	}
	if n.propertyNames, err = one("propertyNames", false); err != nil {
		return err
	}
	if n.contains, err = one("contains", false); err != nil {
		return err
	}
	switch draft {
	case Draft2020:
		if n.prefix, err = list("prefixItems", false); err != nil {
			return err
		}
		if v, ok := m["items"]; ok {
			if _, isArr := v.([]any); isArr {
				return invalid(n.loc, "items must be a schema in draft 2020-12; a list of schemas is prefixItems")
			}
		}
		if n.items, err = one("items", false); err != nil {
			return err
		}
		if ds, names, err := schemaMap("dependentSchemas", true); err != nil {
			return err
		} else {
			for _, k := range names {
				n.depSchemas = append(n.depSchemas, depSchema{name: k, n: ds[k]})
			}
		}
		if n.unevalProps, err = one("unevaluatedProperties", false); err != nil {
			return err
		}
		if n.unevalItems, err = one("unevaluatedItems", false); err != nil {
			return err
		}
	case Draft7:
		if v, ok := m["items"]; ok {
			if arr, isArr := v.([]any); isArr {
				for i, e := range arr {
					s, err := subAt("items", strconv.Itoa(i), e, false)
					if err != nil {
						return err
					}
					n.prefix = append(n.prefix, s)
				}
				if n.additionalItems, err = one("additionalItems", false); err != nil {
					return err
				}
				if n.prefix == nil {
					n.prefix = []*node{}
				}
			} else if n.items, err = sub("items", v, false); err != nil {
				return err
			}
		}
		if v, ok := m["dependencies"]; ok {
			obj, ok := v.(map[string]any)
			if !ok {
				return invalid(n.loc, "dependencies must be an object")
			}
			for _, k := range sortedKeys(obj) {
				if arr, isArr := obj[k].([]any); isArr {
					names, ok := strings_(arr)
					if !ok {
						return invalid(n.loc, "dependencies %q must list property names", k)
					}
					n.dependentRequired = append(n.dependentRequired, depReq{name: k, required: names})
					continue
				}
				s, err := subAt("dependencies", k, obj[k], true)
				if err != nil {
					return err
				}
				n.depSchemas = append(n.depSchemas, depSchema{name: k, n: s})
			}
		}
	}
	if c.opts.CloseObjects && !frozen && n.props != nil && n.additional == nil && n.patternProp == nil && n.unevalProps == nil {
		if _, ok := m["patternProperties"]; !ok {
			n.closed = true
		}
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func strings_(arr []any) ([]string, bool) {
	out := make([]string, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

var typeNames = map[string]bool{"array": true, "boolean": true, "integer": true, "null": true, "number": true, "object": true, "string": true}

// assertions compiles the keywords that check a value itself.
func (c *compiler) assertions(n *node, m map[string]any, draft Draft) error {
	if t, ok := m["type"]; ok {
		switch x := t.(type) {
		case string:
			n.types = []string{x}
		case []any:
			names, ok := strings_(x)
			if !ok {
				return invalid(n.loc, "type must be a type name or a list of them")
			}
			n.types = names
			if n.types == nil {
				n.types = []string{}
			}
		default:
			return invalid(n.loc, "type must be a type name or a list of them, not %s", jsonKind(t))
		}
		for _, name := range n.types {
			if !typeNames[name] {
				return invalid(n.loc, "type %q is not one of array, boolean, integer, null, number, object, string", name)
			}
		}
	}
	if e, ok := m["enum"]; ok {
		arr, ok := e.([]any)
		if !ok {
			return invalid(n.loc, "enum must be an array")
		}
		for _, x := range arr {
			v, err := newValue(x)
			if err != nil {
				return invalid(n.loc, "enum: %v", err)
			}
			n.enum = append(n.enum, v.frozen())
		}
		if n.enum == nil {
			n.enum = []*value{}
		}
	}
	if cv, ok := m["const"]; ok {
		v, err := newValue(cv)
		if err != nil {
			return invalid(n.loc, "const: %v", err)
		}
		n.constant = v.frozen()
	}
	num := func(kw string, dst **decimal, text *string) error {
		v, ok := m[kw]
		if !ok {
			return nil
		}
		jn, ok := v.(json.Number)
		if !ok {
			return invalid(n.loc, "%s must be a number", kw)
		}
		d, ok := parseDecimal(string(jn))
		if !ok {
			return invalid(n.loc, "%s %s is not a number", kw, jn)
		}
		*dst = &d
		if text != nil {
			*text = string(jn)
		}
		return nil
	}
	if err := num("multipleOf", &n.multipleOf, &n.multipleOfText); err != nil {
		return err
	}
	if n.multipleOf != nil && n.multipleOf.sign() <= 0 {
		return invalid(n.loc, "multipleOf must be more than 0, not %s", n.multipleOfText)
	}
	if err := num("minimum", &n.minimum, &n.minText); err != nil {
		return err
	}
	if err := num("maximum", &n.maximum, &n.maxText); err != nil {
		return err
	}
	if err := num("exclusiveMinimum", &n.exclMin, &n.exclMinText); err != nil {
		return err
	}
	if err := num("exclusiveMaximum", &n.exclMax, &n.exclMaxText); err != nil {
		return err
	}
	count := func(kw string, dst *int64) error {
		v, ok := m[kw]
		if !ok {
			return nil
		}
		jn, ok := v.(json.Number)
		if !ok {
			return invalid(n.loc, "%s must be a non-negative integer", kw)
		}
		d, ok := parseDecimal(string(jn))
		if !ok {
			return invalid(n.loc, "%s must be a non-negative integer", kw)
		}
		x, ok := d.count(math.MaxInt64)
		if !ok {
			return invalid(n.loc, "%s must be a non-negative integer, not %s", kw, jn)
		}
		*dst = x
		return nil
	}
	for kw, dst := range map[string]*int64{"minLength": &n.minLength, "maxLength": &n.maxLength, "minItems": &n.minItems,
		"maxItems": &n.maxItems, "minProperties": &n.minProps, "maxProperties": &n.maxProps} {
		if err := count(kw, dst); err != nil {
			return err
		}
	}
	if draft == Draft2020 {
		if err := count("minContains", &n.minContains); err != nil {
			return err
		}
		if err := count("maxContains", &n.maxContains); err != nil {
			return err
		}
	}
	if p, ok := m["pattern"]; ok {
		s, ok := p.(string)
		if !ok {
			return invalid(n.loc, "pattern must be a string")
		}
		re, cost, err := compilePattern(s)
		if err != nil {
			return invalid(n.loc, "pattern %q: %v", s, err)
		}
		n.pattern, n.patternText, n.patternCost = re, s, cost
	}
	if u, ok := m["uniqueItems"]; ok {
		b, ok := u.(bool)
		if !ok {
			return invalid(n.loc, "uniqueItems must be true or false")
		}
		n.uniqueItems = b
	}
	if r, ok := m["required"]; ok {
		arr, ok := r.([]any)
		names, ok2 := strings_(arr)
		if !ok || !ok2 {
			return invalid(n.loc, "required must be an array of property names")
		}
		n.required = names
	}
	if draft == Draft2020 {
		if dr, ok := m["dependentRequired"]; ok {
			obj, ok := dr.(map[string]any)
			if !ok {
				return invalid(n.loc, "dependentRequired must be an object of arrays of property names")
			}
			for _, k := range sortedKeys(obj) {
				arr, _ := obj[k].([]any)
				names, ok := strings_(arr)
				if !ok || arr == nil {
					return invalid(n.loc, "dependentRequired %q must be an array of property names", k)
				}
				n.dependentRequired = append(n.dependentRequired, depReq{name: k, required: names})
			}
		}
	}
	return nil
}

// compilePattern compiles an ECMA-262 pattern as Go's RE2, which takes the
// same syntax for what schemas use (classes, anchors, quantifiers, \d, \w,
// \p{L}) and matches in time linear in the input; lookaround and
// backreferences are refused. cost is the size of its program: matching a
// string costs about its length times that.
func compilePattern(p string) (*regexp.Regexp, int64, error) {
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, 0, fmt.Errorf("not a regular expression this node runs (RE2 syntax: no lookaround or backreferences): %v", err)
	}
	cost := int64(1)
	if parsed, err := syntax.Parse(p, syntax.Perl); err == nil {
		if prog, err := syntax.Compile(parsed.Simplify()); err == nil {
			cost = int64(len(prog.Inst))
		}
	}
	if cost > maxPatternSize {
		return nil, 0, fmt.Errorf("the pattern compiles to %d instructions, more than %d; write it more simply (a counted repetition such as {1000} repeats its part that often)", cost, maxPatternSize)
	}
	return re, cost, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

// resolve resolves ref against base.
func resolve(base, ref string) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	r, err := url.Parse(ref)
	if err != nil {
		return "", err
	}
	return b.ResolveReference(r).String(), nil
}

// splitFragment splits a URI into the part before '#' and its decoded
// fragment.
func splitFragment(u string) (string, string) {
	uri, frag, _ := strings.Cut(u, "#")
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	return uri, frag
}

// link resolves every $ref and $dynamicRef, compiling the schemas a JSON
// pointer names that were not compiled where they are (a pointer may name
// any place of a document).
func (c *compiler) link() error {
	for len(c.pending) > 0 {
		n := c.pending[0]
		c.pending = c.pending[1:]
		if n.refStr != "" {
			t, err := c.target(n, n.refStr, "$ref")
			if err != nil {
				return err
			}
			n.ref = t
		}
		if n.dynRefStr != "" {
			t, err := c.target(n, n.dynRefStr, "$dynamicRef")
			if err != nil {
				return err
			}
			n.dynRef = t
			u, _ := resolve(n.base, n.dynRefStr)
			_, frag := splitFragment(u)
			if frag != "" && !strings.HasPrefix(frag, "/") && t.res.dynAnchors[frag] == t {
				n.dynName = frag
			}
		}
	}
	return nil
}

// target finds the schema a reference names.
func (c *compiler) target(n *node, ref, kw string) (*node, error) {
	u, err := resolve(n.base, ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s %q is not a URI reference: %v", ErrRef, n.loc, kw, ref, err)
	}
	uri, frag := splitFragment(u)
	res, ok := c.resources[uri]
	if !ok {
		return nil, fmt.Errorf("%w: %s: %s %q names another document (%s); remote references are never fetched: put the schema under $defs and refer to it as \"#/$defs/NAME\"", ErrRef, n.loc, kw, ref, uri)
	}
	if frag == "" {
		return res.byPointer[""], nil
	}
	if !strings.HasPrefix(frag, "/") {
		if t, ok := res.anchors[frag]; ok {
			return t, nil
		}
		return nil, fmt.Errorf("%w: %s: %s %q: no schema has the anchor %q", ErrRef, n.loc, kw, ref, frag)
	}
	if t, ok := res.byPointer[frag]; ok {
		return t, nil
	}
	raw, ok := pointerGet(res.raw, frag)
	if !ok {
		return nil, fmt.Errorf("%w: %s: %s %q: nothing is at %s", ErrRef, n.loc, kw, ref, frag)
	}
	return c.compile(raw, res, res.uri, frag, res.draft, false)
}

// pointerGet follows a JSON pointer ("/a/0/b") into v.
func pointerGet(v any, ptr string) (any, bool) {
	if ptr == "" {
		return v, true
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
			if err != nil || i < 0 || i >= len(x) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// analyse refuses cycles that consume no input among the schemas the root
// reaches, and marks which schemas are shared (memoised) and which depend
// on the dynamic scope.
func (s *Schema) analyse() error {
	type adj struct{ inPlace, inside []*node }
	// A $dynamicRef may reach any dynamic anchor of its name: one hub per
	// name stands between them, so the graph has an edge per reference and
	// per anchor, not their product.
	all := append([]*node(nil), s.nodes...)
	hubs := map[string]*node{}
	seen := map[*resource]bool{}
	for _, n := range s.nodes {
		if seen[n.res] {
			continue
		}
		seen[n.res] = true
		for _, name := range sortedNodeKeys(n.res.dynAnchors) {
			h, ok := hubs[name]
			if !ok {
				h = &node{id: int32(len(all)), loc: "$dynamicAnchor " + strconv.Quote(name)}
				hubs[name] = h
				all = append(all, h)
			}
			h.allOf = append(h.allOf, n.res.dynAnchors[name])
		}
	}
	g := make([]adj, len(all))
	indeg := make([]int, len(all))
	for _, n := range all {
		var ip, in []*node
		add := func(dst *[]*node, ns ...*node) {
			for _, x := range ns {
				if x != nil {
					*dst = append(*dst, x)
				}
			}
		}
		add(&ip, n.ref, n.dynRef, n.not, n.ifS, n.thenS, n.elseS)
		add(&ip, n.allOf...)
		add(&ip, n.anyOf...)
		add(&ip, n.oneOf...)
		for _, d := range n.depSchemas {
			add(&ip, d.n)
		}
		if h := hubs[n.dynName]; n.dynName != "" && h != nil {
			add(&ip, h)
		}
		for _, name := range n.propNames {
			add(&in, n.props[name])
		}
		for _, p := range n.patternProp {
			add(&in, p.n)
		}
		add(&in, n.additional, n.propertyNames, n.items, n.additionalItems, n.contains, n.unevalProps, n.unevalItems)
		add(&in, n.prefix...)
		g[n.id] = adj{ip, in}
		for _, x := range ip {
			indeg[x.id]++
		}
		for _, x := range in {
			indeg[x.id]++
		}
	}
	// Reachable from the root, along every edge.
	reach := make([]bool, len(all))
	stack := []*node{s.root}
	reach[s.root.id] = true
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, lst := range [][]*node{g[n.id].inPlace, g[n.id].inside} {
			for _, x := range lst {
				if !reach[x.id] {
					reach[x.id] = true
					stack = append(stack, x)
				}
			}
		}
	}
	// A cycle along in-place edges among reachable schemas: iterative DFS
	// with colours, the path kept to name the cycle.
	const (
		white = iota
		grey
		black
	)
	colour := make([]uint8, len(all))
	type frame struct {
		n *node
		i int
	}
	for _, start := range all {
		if !reach[start.id] || colour[start.id] != white {
			continue
		}
		path := []frame{{start, 0}}
		colour[start.id] = grey
		for len(path) > 0 {
			top := &path[len(path)-1]
			out := g[top.n.id].inPlace
			if top.i == len(out) {
				colour[top.n.id] = black
				path = path[:len(path)-1]
				continue
			}
			next := out[top.i]
			top.i++
			switch colour[next.id] {
			case grey:
				var locs []string
				in := false
				for _, f := range path {
					if f.n == next {
						in = true
					}
					if in {
						locs = append(locs, f.n.loc)
					}
				}
				locs = append(locs, next.loc)
				return fmt.Errorf("%w: %s: these schemas apply one another to the same value without descending into it, so validating would never end; make the reference descend (under properties or items), or break the loop", ErrCycle, strings.Join(locs, " → "))
			case white:
				colour[next.id] = grey
				path = append(path, frame{next, 0})
			}
		}
	}
	// Dynamic: the schemas from which a $dynamicRef is reachable.
	rev := make([][]*node, len(all))
	for _, n := range all {
		for _, lst := range [][]*node{g[n.id].inPlace, g[n.id].inside} {
			for _, x := range lst {
				rev[x.id] = append(rev[x.id], n)
			}
		}
	}
	var queue []*node
	for _, n := range s.nodes {
		if n.dynName != "" {
			n.dynamic = true
			queue = append(queue, n)
		}
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, p := range rev[n.id] {
			if !p.dynamic {
				p.dynamic = true
				queue = append(queue, p)
			}
		}
	}
	for _, n := range s.nodes {
		n.shared = indeg[n.id] > 1 || n.ref != nil && n.ref == n
	}
	return nil
}

func bigZero() *big.Int { return new(big.Int) }

func sortedNodeKeys(m map[string]*node) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
