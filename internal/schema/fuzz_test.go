package schema

import (
	"bytes"
	"encoding/json"
	"math/big"
	"reflect"
	"strings"
	"testing"
)

// fuzzSchemas seed FuzzCompileValidate with every keyword, references of
// each kind, and the shapes that once cost without bound.
var fuzzSchemas = []string{
	`{"type":"object","properties":{"a":{"type":"integer","minimum":1.1,"multipleOf":0.1},"b":{"enum":[1,"x",null,[1],{"k":2}]}},"required":["a"]}`,
	`{"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"}`,
	`{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"},{"$ref":"#/$defs/b"}]},"b":{"allOf":[{"$ref":"#/$defs/c"},{"$ref":"#/$defs/c"}]},"c":{"type":"integer"}},"$ref":"#/$defs/a"}`,
	`{"$id":"https://x.test/root","$dynamicAnchor":"m","properties":{"x":{"$dynamicRef":"#m"}},"$defs":{"o":{"$id":"o","$dynamicAnchor":"m","type":"string"}}}`,
	`{"prefixItems":[{"type":"string"}],"items":false,"contains":{"const":1},"minContains":1,"maxContains":2,"unevaluatedItems":false,"uniqueItems":true}`,
	`{"patternProperties":{"^x":{"type":"number"}},"additionalProperties":false,"propertyNames":{"maxLength":3},"unevaluatedProperties":false,"dependentRequired":{"a":["b"]},"dependentSchemas":{"a":{"minProperties":2}}}`,
	`{"if":{"required":["a"]},"then":{"required":["b"]},"else":{"not":{"type":"object"}},"oneOf":[{"type":"object"},{"type":"array"}],"anyOf":[true,false]}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"$id":"#foo","type":"integer"}},"items":[{"$ref":"#foo"}],"additionalItems":false,"dependencies":{"a":["b"],"c":{"required":["d"]}}}`,
	`{"type":["string","null"],"minLength":2,"maxLength":3,"pattern":"^[a-z]+$","format":"email"}`,
	`{"$ref":"#"}`, `true`, `false`, `{"items":{"items":{"items":{}}}}`,
}

var fuzzValues = []string{
	`{"a":1.1,"b":null}`, `[[[]]]`, `1e400`, `-0.0`, `"ab"`, `[1,1]`, `{"x1":1,"a":{},"b":2}`, `{"a":1}`, `null`,
	`[["x"],[1,2,3]]`, `{"x":"s"}`, `12345678901234567890.5e-3`, `{"c":1,"d":2,"a":1,"b":3}`,
}

// FuzzCompileValidate: whatever the schema and the value, Compile and
// Validate never panic, never run away (the steps stay within the budget
// unless the result says it ran out), and give the same answer twice.
func FuzzCompileValidate(f *testing.F) {
	for _, s := range fuzzSchemas {
		for _, v := range fuzzValues {
			f.Add([]byte(s), []byte(v))
		}
	}
	opts := Options{MaxNodes: 2000, MaxSteps: 20_000, MaxEvalDepth: 500}
	f.Fuzz(func(t *testing.T, schemaJSON, valueJSON []byte) {
		s, err := Compile(schemaJSON, opts)
		if err != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(valueJSON))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		r := s.Validate(v, "v")
		if r.Steps > opts.MaxSteps && !r.Exceeded {
			t.Fatalf("%d steps past the budget of %d without saying so", r.Steps, opts.MaxSteps)
		}
		if r.Steps > 2*opts.MaxSteps+int64(len(valueJSON)) {
			t.Fatalf("%d steps for a budget of %d", r.Steps, opts.MaxSteps)
		}
		if !r.Valid() && len(r.Problems) == 0 {
			t.Fatalf("invalid without a problem")
		}
		if again := s.Validate(v, "v"); !reflect.DeepEqual(again, r) {
			t.Fatalf("two validations differ: %+v, %+v", r, again)
		}
	})
}

// FuzzDecimalAsBigRat holds the exact decimal arithmetic to math/big on
// every number whose exponent big.Rat can afford: comparison, integer-ness
// and multipleOf.
func FuzzDecimalAsBigRat(f *testing.F) {
	for _, p := range [][2]string{{"1.1", "1.1"}, {"0.1", "0.10000000000000000555"}, {"-0", "0"}, {"7e3", "0.7"}, {"0.075", "0.01"},
		{"9007199254740993", "9007199254740992"}, {"1e-7", "9.9999999999999999e-8"}, {"19.99", "0.01"}, {"-12.5e-2", "2.5E-2"}} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		da, ok1 := parseDecimal(a)
		db, ok2 := parseDecimal(b)
		var n1, n2 json.Number
		valid := func(s string, n *json.Number) bool { return json.Unmarshal([]byte(s), n) == nil && string(*n) == s }
		if ok1 != valid(a, &n1) || ok2 != valid(b, &n2) {
			t.Fatalf("parseDecimal accepts %q: %v, %q: %v; encoding/json disagrees", a, ok1, b, ok2)
		}
		if !ok1 || !ok2 || hugeExponent(a) || hugeExponent(b) {
			return
		}
		ra, _ := new(big.Rat).SetString(a)
		rb, _ := new(big.Rat).SetString(b)
		if got, want := cmpDecimal(da, db), ra.Cmp(rb); got != want {
			t.Fatalf("cmpDecimal(%s, %s) = %d, big.Rat says %d", a, b, got, want)
		}
		if da.integer() != ra.IsInt() {
			t.Fatalf("integer(%s) = %v, big.Rat says %v", a, da.integer(), ra.IsInt())
		}
		if rb.Sign() > 0 {
			if got, want := multipleOf(da, db), new(big.Rat).Quo(ra, rb).IsInt(); got != want {
				t.Fatalf("multipleOf(%s, %s) = %v, big.Rat says %v", a, b, got, want)
			}
		}
	})
}

// hugeExponent reports an exponent big.Rat would spend real work on.
func hugeExponent(s string) bool {
	i := strings.IndexAny(s, "eE")
	return i >= 0 && len(strings.TrimLeft(s[i+1:], "+-0")) > 3
}
