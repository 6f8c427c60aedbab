package tool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// readSchema is an operator-style schema: it never says
// additionalProperties, so CompileSchema closes its objects.
const readSchema = `{
	"type": "object",
	"properties": {
		"path": {"type": "string", "minLength": 1},
		"offset": {"type": "integer", "minimum": 0},
		"limit": {"type": "integer", "maximum": 2000},
		"mode": {"type": "string", "enum": ["text", "binary"]},
		"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
		"ratio": {"type": "number"},
		"opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
		"meta": {"type": "object"},
		"code": {"type": "string", "pattern": "^[A-Z]+$"}
	},
	"required": ["path"]
}`

func TestCompileSchemaValidate(t *testing.T) {
	validate, err := CompileSchema(json.RawMessage(readSchema))
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	tests := []struct {
		name    string
		args    string
		wantErr []string // problems, in order; nil means valid
	}{
		{name: "minimal", args: `{"path":"a"}`},
		{name: "all fields", args: `{"path":"a","offset":0,"limit":10,"mode":"text","tags":["x"],"ratio":0.5,"opts":{"deep":true},"meta":{"any":[1]},"code":"AB"}`},
		{name: "string holding object accepted", args: `"{\"path\": \"a\", \"limit\": 3}"`},
		{name: "integer accepted for number", args: `{"path":"a","ratio":2}`},
		{name: "free-form object stays open", args: `{"path":"a","meta":{"x":1,"y":"z"}}`},
		{name: "unknown field", args: `{"path":"a","colour":"red"}`,
			wantErr: []string{"arguments.colour: unknown field (allowed: path, offset, limit, mode, tags, ratio, opts, meta, code)"}},
		{name: "unknown nested field", args: `{"path":"a","opts":{"deep":true,"wide":1}}`,
			wantErr: []string{"arguments.opts.wide: unknown field (allowed: deep)"}},
		{name: "string for integer", args: `{"path":"a","limit":"10"}`,
			wantErr: []string{`arguments.limit: want integer, got string "10"`}},
		{name: "float for integer", args: `{"path":"a","limit":1.5}`,
			wantErr: []string{"arguments.limit: want integer, got number 1.5"}},
		// JSON Schema counts a number with a zero fraction as an integer
		// (docs/spec.md §1), so 1.0 and 1e2 are integers; 1e-1 is not.
		{name: "1.0 for integer", args: `{"path":"a","limit":1.0}`},
		{name: "exponent for integer", args: `{"path":"a","limit":1e2}`},
		{name: "negative exponent for integer", args: `{"path":"a","limit":1e-1}`,
			wantErr: []string{"arguments.limit: want integer, got number 1e-1"}},
		{name: "number for string", args: `{"path":5}`,
			wantErr: []string{"arguments.path: want string, got integer 5"}},
		{name: "object for array", args: `{"path":"a","tags":{"x":1}}`,
			wantErr: []string{"arguments.tags: want array, got object"}},
		{name: "null for string", args: `{"path":null}`,
			wantErr: []string{"arguments.path: want string, got null"}},
		{name: "bool for string in array", args: `{"path":"a","tags":["x",true]}`,
			wantErr: []string{"arguments.tags[1]: want string, got boolean true"}},
		{name: "missing required", args: `{"limit":5}`,
			wantErr: []string{"arguments.path: missing required field"}},
		{name: "empty means missing required", args: ``,
			wantErr: []string{"arguments.path: missing required field"}},
		{name: "enum violation", args: `{"path":"a","mode":"hex"}`,
			wantErr: []string{`arguments.mode: want one of "text", "binary", got string "hex"`}},
		{name: "minimum", args: `{"path":"a","offset":-1}`,
			wantErr: []string{"arguments.offset: want at least 0, got -1"}},
		{name: "maximum", args: `{"path":"a","limit":2001}`,
			wantErr: []string{"arguments.limit: want at most 2000, got 2001"}},
		{name: "minLength", args: `{"path":""}`,
			wantErr: []string{"arguments.path: want at least 1 characters, got 0"}},
		{name: "maxItems", args: `{"path":"a","tags":["1","2","3","4"]}`,
			wantErr: []string{"arguments.tags: want at most 3 items, got 4"}},
		{name: "pattern", args: `{"path":"a","code":"ab"}`,
			wantErr: []string{`arguments.code: want a string matching the pattern "^[A-Z]+$", got string "ab"`}},
		{name: "every problem listed", args: `{"limit":"10","zz":1,"aa":2}`,
			wantErr: []string{
				"arguments.path: missing required field",
				`arguments.limit: want integer, got string "10"`,
				"arguments.aa: unknown field",
				"arguments.zz: unknown field",
			}},
		{name: "truncated string arguments", args: `"{\"path\": \"a"`,
			wantErr: []string{"arguments are not valid JSON (inside the string: unexpected end at byte 11): the model's response was probably truncated"}},
		{name: "not an object", args: `["a"]`,
			wantErr: []string{"arguments must be a JSON object, got an array"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validate(json.RawMessage(tt.args))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("err=%v, want nil", err)
				}
				return
			}
			var ae *ArgumentError
			if !errors.As(err, &ae) {
				t.Fatalf("err=%v (%T), want *ArgumentError", err, err)
			}
			if !errors.Is(err, ErrInvalidArguments) {
				t.Fatalf("errors.Is(err, ErrInvalidArguments)=false for %v", err)
			}
			if len(ae.Problems) != len(tt.wantErr) {
				t.Fatalf("problems=%q, want %d: %q", ae.Problems, len(tt.wantErr), tt.wantErr)
			}
			for i, want := range tt.wantErr {
				if got := ae.Problems[i].String(); !strings.HasPrefix(got, want) {
					t.Errorf("problem %d=%q, want prefix %q", i, got, want)
				}
			}
		})
	}
}

func TestCompileSchemaOpenWhenAsked(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		args   string
	}{
		{"additionalProperties true", `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true}`, `{"a":"x","b":1}`},
		{"additionalProperties schema", `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"integer"}}`, `{"a":"x","b":1}`},
		{"patternProperties", `{"type":"object","properties":{"a":{"type":"string"}},"patternProperties":{"^x_":{"type":"integer"}}}`, `{"a":"x","x_1":1}`},
		{"allOf members left as written", `{"type":"object","allOf":[{"properties":{"a":{"type":"string"}}},{"properties":{"b":{"type":"integer"}}}]}`, `{"a":"x","b":1}`},
		{"no properties is a free-form map", `{"type":"object"}`, `{"anything":[1,2]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			validate, err := CompileSchema(json.RawMessage(tt.schema))
			if err != nil {
				t.Fatalf("CompileSchema: %v", err)
			}
			if err := validate(json.RawMessage(tt.args)); err != nil {
				t.Fatalf("err=%v, want nil", err)
			}
		})
	}

	// additionalProperties with a schema still checks the extra values.
	validate, err := CompileSchema(json.RawMessage(`{"type":"object","properties":{},"additionalProperties":{"type":"integer"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(json.RawMessage(`{"n":"1"}`)); err == nil || !strings.Contains(err.Error(), `arguments.n: want integer, got string "1"`) {
		t.Fatalf("err=%v, want a type problem for arguments.n", err)
	}
	// An empty properties object means "no arguments".
	validate, err = CompileSchema(json.RawMessage(`{"type":"object","properties":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(json.RawMessage(`{"n":1}`)); err == nil || !strings.Contains(err.Error(), "arguments.n: unknown field (this object takes no fields)") {
		t.Fatalf("err=%v, want unknown field", err)
	}
}

func TestCompileSchemaRefused(t *testing.T) {
	tests := []struct {
		name    string
		schema  string
		wantErr string
	}{
		{"empty", ``, "empty"},
		{"not JSON", `{"type":`, "input schema: not a valid schema: the schema is not JSON"},
		{"root not object", `{"type":"string"}`, `"type": "object"`},
		{"root without type", `{"properties":{}}`, `"type": "object"`},
		{"remote ref", `{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}}`, `input schema: unresolvable reference: #/properties/a: $ref "https://example.com/s.json" names another document`},
		{"bad type keyword", `{"type":"object","properties":{"a":{"type":5}}}`, "input schema: not a valid schema: #/properties/a: type must be a type name or a list of them, not a number"},
		{"unknown draft", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`, `is not a draft this node validates`},
		{"cycle", `{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"allOf":[{"$ref":"#/$defs/a"}]}}}`,
			"input schema: reference cycle: #/$defs/a → #/$defs/b → #/$defs/b/allOf/0 → #/$defs/a: these schemas apply one another to the same value without descending into it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CompileSchema(json.RawMessage(tt.schema))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err=%v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestCompileSchemaRefLocal(t *testing.T) {
	validate, err := CompileSchema(json.RawMessage(`{
		"type": "object",
		"properties": {"p": {"$ref": "#/$defs/point"}},
		"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(json.RawMessage(`{"p":{"x":1}}`)); err != nil {
		t.Fatalf("valid: err=%v", err)
	}
	// The referenced object was closed too.
	err = validate(json.RawMessage(`{"p":{"x":1,"y":2}}`))
	if !errors.Is(err, ErrInvalidArguments) || !strings.Contains(err.Error(), `arguments.p.y: unknown field (allowed: x)`) {
		t.Fatalf("extra field behind $ref: err=%v, want an ArgumentError at arguments.p", err)
	}
}

// TestArgumentsDropOptionalNulls: what a model in OpenAI's strict mode
// sends for a field it leaves out (null) counts as absent where the field is
// optional and does not accept null; elsewhere null is validated as given.
func TestArgumentsDropOptionalNulls(t *testing.T) {
	schema := `{"type":"object","properties":{
		"path":{"type":"string"},
		"limit":{"type":"integer"},
		"note":{"type":["string","null"]},
		"mode":{"enum":["a","b"]},
		"any":{},
		"opts":{"type":"object","properties":{"deep":{"type":"boolean"},"keep":{"type":"string"}},"required":["keep"]},
		"items":{"type":"array","items":{"type":"object","properties":{"n":{"type":"integer"}}}}
	},"required":["path"]}`
	var r Registry
	tl := validTool("prune")
	tl.InputSchema = json.RawMessage(schema)
	if err := r.Register(tl); err != nil {
		t.Fatal(err)
	}
	got, _ := r.Get("prune")
	for _, tc := range []struct {
		name, in, want, wantErr string
	}{
		{"optional nulls dropped", `{"path":"a","limit":null,"mode":null}`, `{"path":"a"}`, ""},
		{"nullable kept", `{"path":"a","note":null}`, `{"path":"a","note":null}`, ""},
		{"untyped kept", `{"path":"a","any":null}`, `{"path":"a","any":null}`, ""},
		{"nested", `{"path":"a","opts":{"deep":null,"keep":"k"},"items":[{"n":null},{"n":1}]}`, `{"items":[{},{"n":1}],"opts":{"keep":"k"},"path":"a"}`, ""},
		{"required null refused", `{"path":null}`, "", "arguments.path: want string, got null"},
		{"nested required null refused", `{"path":"a","opts":{"keep":null}}`, "", "arguments.opts.keep: want string, got null"},
		{"untouched when nothing is null", `{"path":"a", "limit":3}`, `{"path":"a","limit":3}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, err := got.Arguments(json.RawMessage(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err=%v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(args) != tc.want {
				t.Fatalf("Arguments=%s, %v; want %s", args, err, tc.want)
			}
		})
	}
	// A typed tool drops them too, and its defaults then apply.
	type targs struct {
		Path  string `json:"path"`
		Limit int    `json:"limit,omitempty" default:"7"`
	}
	var seen int
	typed, err := New("typed", "d", func(_ context.Context, a targs) (Result, error) { seen = a.Limit; return Text("ok"), nil }, WithGuidelines("g"))
	if err != nil {
		t.Fatal(err)
	}
	args, err := typed.Arguments(json.RawMessage(`{"path":"p","limit":null}`))
	if err != nil || string(args) != `{"path":"p"}` {
		t.Fatalf("typed Arguments=%s, %v", args, err)
	}
	if _, err := typed.Run(context.Background(), args); err != nil || seen != 7 {
		t.Fatalf("typed run: limit=%d, %v; want the default 7", seen, err)
	}
}
