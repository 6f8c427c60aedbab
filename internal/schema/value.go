package schema

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// kind is a JSON value's type; integers are numbers whose value has no
// fraction (JSON Schema's rule), told apart by value.isInteger.
type kind uint8

const (
	kNull kind = iota
	kBool
	kNumber
	kString
	kArray
	kObject
)

// value is one node of an instance, numbered in document order so that an
// evaluation can be remembered per (schema, instance location). Numbers
// keep the literal as written; their exact decimal is read when a keyword
// needs it.
type value struct {
	kind kind
	b    bool
	s    string // a string, or a number's literal
	dec  *decimal
	arr  []*value
	keys []string // an object's member names, sorted
	vals []*value // their values, in the same order
	id   int32
	// parent, key and index locate the value, for messages.
	parent *value
	key    string
	index  int
}

// errValue is returned by newValue for a Go value that is not one a JSON
// decoder (UseNumber) produces.
type errValue struct{ v any }

func (e errValue) Error() string { return fmt.Sprintf("schema: %T is not a decoded JSON value", e.v) }

// newValue builds the instance tree of v, a value decoded by encoding/json
// with UseNumber (map[string]any, []any, string, json.Number, bool, nil;
// float64 and int are taken too).
func newValue(v any) (*value, error) {
	var next int32
	var build func(v any, parent *value, key string, index int) (*value, error)
	build = func(v any, parent *value, key string, index int) (*value, error) {
		n := &value{id: next, parent: parent, key: key, index: index}
		next++
		switch x := v.(type) {
		case nil:
			n.kind = kNull
		case bool:
			n.kind, n.b = kBool, x
		case string:
			n.kind, n.s = kString, x
		case json.Number:
			n.kind, n.s = kNumber, string(x)
		case float64:
			n.kind, n.s = kNumber, strconv.FormatFloat(x, 'g', -1, 64)
		case int:
			n.kind, n.s = kNumber, strconv.Itoa(x)
		case int64:
			n.kind, n.s = kNumber, strconv.FormatInt(x, 10)
		case []any:
			n.kind = kArray
			n.arr = make([]*value, len(x))
			for i, e := range x {
				c, err := build(e, n, "", i)
				if err != nil {
					return nil, err
				}
				n.arr[i] = c
			}
		case map[string]any:
			n.kind = kObject
			n.keys = make([]string, 0, len(x))
			for k := range x {
				n.keys = append(n.keys, k)
			}
			sort.Strings(n.keys)
			n.vals = make([]*value, len(n.keys))
			for i, k := range n.keys {
				c, err := build(x[k], n, k, -1)
				if err != nil {
					return nil, err
				}
				n.vals[i] = c
			}
		default:
			return nil, errValue{v}
		}
		return n, nil
	}
	return build(v, nil, "", -1)
}

// decimal returns a number's exact value, parsed once.
func (v *value) decimal() decimal {
	if v.dec == nil {
		d, ok := parseDecimal(v.s)
		if !ok { // not from a JSON decoder; treat as zero rather than crash
			d = decimal{}
			d.exp = bigZero()
		}
		v.dec = &d
	}
	return *v.dec
}

// frozen parses every number of v now, so that a schema's values (enum,
// const) are only read by the validations that share them.
func (v *value) frozen() *value {
	if v.kind == kNumber {
		v.decimal()
	}
	for _, e := range v.arr {
		e.frozen()
	}
	for _, e := range v.vals {
		e.frozen()
	}
	return v
}

func (v *value) isInteger() bool { return v.kind == kNumber && v.decimal().integer() }

// member returns the value of an object's member name.
func (v *value) member(name string) (*value, bool) {
	i := sort.SearchStrings(v.keys, name)
	if i < len(v.keys) && v.keys[i] == name {
		return v.vals[i], true
	}
	return nil, false
}

// typeName is the JSON Schema type of v, integer for a number with no
// fraction.
func (v *value) typeName() string {
	switch v.kind {
	case kNull:
		return "null"
	case kBool:
		return "boolean"
	case kNumber:
		if v.isInteger() {
			return "integer"
		}
		return "number"
	case kString:
		return "string"
	case kArray:
		return "array"
	}
	return "object"
}

// path renders where v is, as a model writes it: root.a[2]["odd key"].
func (v *value) path(root string) string {
	var steps []*value
	for x := v; x.parent != nil; x = x.parent {
		steps = append(steps, x)
	}
	var b strings.Builder
	b.WriteString(root)
	for i := len(steps) - 1; i >= 0; i-- {
		x := steps[i]
		if x.parent.kind == kArray {
			b.WriteString("[" + strconv.Itoa(x.index) + "]")
		} else {
			b.WriteString(ChildPath("", x.key))
		}
	}
	return b.String()
}

// ChildPath returns the path of an object member: path.key for a key that
// is an identifier (^[A-Za-z_][A-Za-z0-9_]*$), else path["odd key"].
func ChildPath(path, key string) string {
	if isIdent(key) {
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

func isIdent(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// equal compares two values as JSON Schema does for const, enum and
// uniqueItems: numbers by value, objects by members whatever their order.
// It charges one step per node compared.
func equal(a, b *value, steps *int64) bool {
	*steps++
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case kNull:
		return true
	case kBool:
		return a.b == b.b
	case kString:
		*steps += int64(len(a.s) / 256)
		return a.s == b.s
	case kNumber:
		return a.s == b.s || cmpDecimal(a.decimal(), b.decimal()) == 0
	case kArray:
		if len(a.arr) != len(b.arr) {
			return false
		}
		for i := range a.arr {
			if !equal(a.arr[i], b.arr[i], steps) {
				return false
			}
		}
		return true
	}
	if len(a.keys) != len(b.keys) {
		return false
	}
	for i := range a.keys {
		if a.keys[i] != b.keys[i] || !equal(a.vals[i], b.vals[i], steps) {
			return false
		}
	}
	return true
}

// canonical writes a spelling of v in which equal values are equal
// strings (numbers by value, members sorted), for uniqueItems.
func canonical(b *strings.Builder, v *value) {
	switch v.kind {
	case kNull:
		b.WriteString("n")
	case kBool:
		if v.b {
			b.WriteString("t")
		} else {
			b.WriteString("f")
		}
	case kNumber:
		b.WriteString("#" + v.decimal().key() + ";")
	case kString:
		b.WriteString(strconv.Quote(v.s))
	case kArray:
		b.WriteString("[")
		for _, e := range v.arr {
			canonical(b, e)
			b.WriteString(",")
		}
		b.WriteString("]")
	case kObject:
		b.WriteString("{")
		for i, k := range v.keys {
			b.WriteString(strconv.Quote(k) + ":")
			canonical(b, v.vals[i])
			b.WriteString(",")
		}
		b.WriteString("}")
	}
}

// describe renders v for a message: its type and, for scalars, the value,
// shortened.
func (v *value) describe() string {
	switch v.kind {
	case kNull:
		return "null"
	case kString:
		const max = 40
		x := v.s
		if utf8.RuneCountInString(x) > max {
			x = string([]rune(x)[:max]) + "…"
		}
		return "string " + strconv.Quote(x)
	case kNumber:
		s := v.s
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return v.typeName() + " " + s
	case kBool:
		return "boolean " + strconv.FormatBool(v.b)
	case kArray:
		return "array"
	}
	return "object"
}

// jsonText renders a schema value (enum, const) for a message.
func (v *value) jsonText() string {
	switch v.kind {
	case kNull:
		return "null"
	case kBool:
		return strconv.FormatBool(v.b)
	case kNumber:
		return v.s
	case kString:
		b, _ := json.Marshal(v.s)
		return string(b)
	case kArray:
		parts := make([]string, len(v.arr))
		for i, e := range v.arr {
			parts[i] = e.jsonText()
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	parts := make([]string, len(v.keys))
	for i, k := range v.keys {
		kb, _ := json.Marshal(k)
		parts[i] = string(kb) + ":" + v.vals[i].jsonText()
	}
	return "{" + strings.Join(parts, ",") + "}"
}
