package tool

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// typedValidator compiles A's schema as New does.
func typedValidator[A any](t testing.TB) *validator {
	t.Helper()
	s, err := jsonschema.For[A](nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := applyTags(s, reflect.TypeFor[A]()); err != nil {
		t.Fatal(err)
	}
	v, err := compileParsed(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func schemaValidator(t testing.TB, schema string) *validator {
	t.Helper()
	v, err := compileSchema(json.RawMessage(schema))
	if err != nil {
		t.Fatalf("%s: %v", schema, err)
	}
	return v
}

// coveredSchema uses every keyword walkCovers accepts, at several depths.
const coveredSchema = `{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"type": "object",
	"title": "t", "description": "d", "$comment": "c", "examples": [{}],
	"properties": {
		"s": {"type": "string", "minLength": 2, "maxLength": 4, "default": "abc"},
		"e": {"enum": ["a", "b", 1, 2.5, null, [1], {"k": 1}]},
		"se": {"type": "string", "enum": ["x", "y"]},
		"c": {"const": {"k": [1, "2"]}},
		"n": {"type": "number", "minimum": 0.5, "maximum": 1e300},
		"i": {"type": ["integer", "null"], "minimum": -3, "maximum": 9007199254740993},
		"a": {"type": "array", "items": {"type": "integer", "maximum": 3}, "minItems": 1, "maxItems": 3},
		"o": {"type": "object", "properties": {"deep": {"type": "boolean"}}, "required": ["deep"]},
		"m": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 1}},
		"f": false,
		"any": {}
	},
	"required": ["s"]
}`

// uncovered schemas each use one keyword the walk does not decide alone.
var uncoveredSchemas = []string{
	`{"type":"object","properties":{"p":{"type":"string","pattern":"^a"}}}`,
	`{"type":"object","properties":{"x":{"type":"number","exclusiveMinimum":1}}}`,
	`{"type":"object","properties":{"x":{"type":"number","exclusiveMaximum":1}}}`,
	`{"type":"object","properties":{"x":{"type":"number","multipleOf":2}}}`,
	`{"type":"object","properties":{"x":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`,
	`{"type":"object","properties":{"x":{"not":{"type":"string"}}}}`,
	`{"type":"object","properties":{"x":{"type":"array","uniqueItems":true}}}`,
	`{"type":"object","properties":{"x":{"type":"array","prefixItems":[{"type":"string"}]}}}`,
	`{"type":"object","properties":{"x":{"type":"array","contains":{"type":"string"}}}}`,
	`{"type":"object","properties":{"x":{"type":"object","minProperties":1}}}`,
	`{"type":"object","properties":{"x":{"type":"object","propertyNames":{"maxLength":1}}}}`,
	`{"type":"object","properties":{"x":{"type":"string","format":"date-time"}}}`,
	`{"type":"object","properties":{"x":{"$ref":"#/$defs/d"}},"$defs":{"d":{"type":"string"}}}`,
	`{"type":"object","properties":{"x":{"type":"string"}},"dependentRequired":{"x":["y"]}}`,
	`{"type":"object","patternProperties":{"^a":{"type":"string"}}}`,
	`{"type":"object","properties":{"x":{"type":"string"}},"allOf":[{"required":["x"]}]}`,
	`{"type":"object","properties":{"x":{"type":"string","x-vendor":1}}}`,
}

// TestWalkCovers: generated schemas (every tag New knows) and one that uses
// every covered keyword are decided by the walk alone; a schema using any
// other keyword is not.
func TestWalkCovers(t *testing.T) {
	for name, v := range map[string]*validator{
		"fuzzArgs": typedValidator[fuzzArgs](t), "readArgs": typedValidator[readArgs](t),
		"covered": schemaValidator(t, coveredSchema), "small": schemaValidator(t, `{"type":"object","properties":{"path":{"type":"string","minLength":1}}}`),
	} {
		if !v.walkOnly {
			t.Errorf("%s: walkOnly=false, want true", name)
		}
	}
	for _, s := range append(uncoveredSchemas, readSchema) {
		if v := schemaValidator(t, s); v.walkOnly {
			t.Errorf("%s: walkOnly=true, want false", s)
		}
	}
}

// walkOnlySeeds probe the edges of the covered keywords: integers written
// with fractions and exponents, numbers at, above and just beyond bounds,
// too small for a float64 (the walk is unsure), too large for one (the
// library's conversion refuses), enums and consts of every kind.
var walkOnlySeeds = []string{
	`{"s":"ab"}`, `{"s":"a"}`, `{"s":"abcde"}`, `{"s":"é😀"}`, `{"s":"ab","e":"a"}`, `{"s":"ab","e":2.50}`,
	`{"s":"ab","e":[1.0]}`, `{"s":"ab","e":{"k":1e0}}`, `{"s":"ab","e":"c"}`, `{"s":"ab","e":null}`,
	`{"s":"ab","se":"x"}`, `{"s":"ab","se":"z"}`, `{"s":"ab","c":{"k":[1,"2"]}}`, `{"s":"ab","c":{"k":[1,2]}}`,
	`{"s":"ab","n":0.5}`, `{"s":"ab","n":0.49999999999999999999}`, `{"s":"ab","n":1e-500}`, `{"s":"ab","n":-1e-500}`,
	`{"s":"ab","n":1e300}`, `{"s":"ab","n":1.0000000000000000001e300}`, `{"s":"ab","n":1e400}`, `{"s":"ab","n":"1"}`,
	`{"s":"ab","i":-3}`, `{"s":"ab","i":-3.0}`, `{"s":"ab","i":-4}`, `{"s":"ab","i":9007199254740993}`,
	`{"s":"ab","i":9007199254740994}`, `{"s":"ab","i":1.5}`, `{"s":"ab","i":null}`, `{"s":"ab","i":0e-99999999999999999999}`,
	`{"s":"ab","a":[1,2,3]}`, `{"s":"ab","a":[]}`, `{"s":"ab","a":[1,2,3,4]}`, `{"s":"ab","a":[4]}`, `{"s":"ab","a":[1e-500]}`,
	`{"s":"ab","o":{"deep":true}}`, `{"s":"ab","o":{}}`, `{"s":"ab","o":{"deep":1,"x":2}}`, `{"s":"ab","m":{"a":"b","c":"dd"}}`,
	`{"s":"ab","f":1}`, `{"s":"ab","any":[1e400]}`, `{"s":"ab","zz":1}`, `{}`,
	`{"name":"x","count":1000}`, `{"name":"x","count":1000.5}`, `{"name":"x","count":1e3}`, `{"name":"x","count":1001}`,
	`{"name":"x","small":-128,"big":18446744073709551615,"ratio":1e308,"float":3.4e38}`, `{"name":"x","ratio":1e-400}`,
	`{"name":"x","levels":[1,2,3]}`, `{"name":"x","mode":"c"}`, `{"name":"x","fixed":[true]}`, `{"name":"x","inner":{"height":1}}`,
	`{"path":"p","limit":0}`, `{"path":"p","limit":2000}`, `{"path":"p","tags":["a","c"]}`, `{"path":"p","level":2.0}`,
}

var outOfRangeRE = regexp.MustCompile(`^invalid arguments: arguments\S*: number \S+ is out of range$`)

// FuzzWalkOnlyAsLibrary holds check to the full path it shortens: on every
// schema the walk decides alone, skipping the library pass gives the same
// answer, with the same message, as running it.
func FuzzWalkOnlyAsLibrary(f *testing.F) {
	for _, s := range walkOnlySeeds {
		f.Add([]byte(s))
	}
	validators := []*validator{
		schemaValidator(f, coveredSchema), typedValidator[fuzzArgs](f), typedValidator[readArgs](f),
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, obj, err := parseArguments(raw)
		if err != nil {
			return
		}
		for i, v := range validators {
			short, full := v.checkWith(obj, true), v.checkWith(obj, false)
			if (short == nil) != (full == nil) {
				t.Fatalf("validator %d, %s: walk only says %v, with the library %v", i, raw, short, full)
			}
			if short == nil {
				continue
			}
			s, l := short.Error(), full.Error()
			// Of several numbers out of range, toLibrary names the first
			// it meets, in map order, either way.
			if s != l && !(outOfRangeRE.MatchString(s) && outOfRangeRE.MatchString(l)) {
				t.Fatalf("validator %d, %s: walk only says %q, with the library %q", i, raw, s, l)
			}
		}
	})
}

// TestWalkOnlyUnsure: a number too small for the walk to compare with a
// bound is decided by the library, as before.
func TestWalkOnlyUnsure(t *testing.T) {
	v := schemaValidator(t, coveredSchema)
	_, obj, err := parseArguments(json.RawMessage(`{"s":"ab","n":1e-500}`))
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{v: v}
	c.walk(v.schema, obj, "arguments")
	if len(c.problems) != 0 || !c.unsure {
		t.Fatalf("walk: problems=%v unsure=%v, want none and unsure", c.problems, c.unsure)
	}
	ae := v.check(obj)
	if ae == nil || !errors.Is(ae, ErrInvalidArguments) {
		t.Fatalf("check(1e-500 against minimum 0.5) = %v, want the library's refusal", ae)
	}
	// A typed tool refuses it too.
	type nArgs struct {
		N float64 `json:"n" minimum:"0.5"`
	}
	tl, err := New("n", "d", func(context.Context, nArgs) (Result, error) { return Text("ran"), nil }, WithGuidelines("g"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tl.Run(context.Background(), json.RawMessage(`{"n":1e-500}`)); err == nil {
		t.Fatal("typed Run accepted 1e-500 for minimum 0.5")
	}
}
