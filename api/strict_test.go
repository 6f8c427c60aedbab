package api

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/tool"
)

// strictCases are schemas and what StrictSchema makes of them. refusedBy
// OpenAI marks the refusals the openai package refuses too.
var strictCases = []struct {
	name, in, want string
	notes          []string
	wantErr        string
	openaiRefuses  bool
}{
	{name: "required only", in: `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
		want: `{"additionalProperties":false,"properties":{"a":{"type":"string"}},"required":["a"],"type":"object"}`},
	{name: "optional becomes nullable", in: `{"type":"object","properties":{"a":{"type":"string"},"n":{"type":"integer","minimum":0}},"required":["a"]}`,
		want: `{"additionalProperties":false,"properties":{"a":{"type":"string"},"n":{"minimum":0,"type":["integer","null"]}},"required":["a","n"],"type":"object"}`},
	{name: "optional enum gets null", in: `{"type":"object","properties":{"m":{"type":"string","enum":["x","y"]}}}`,
		want: `{"additionalProperties":false,"properties":{"m":{"enum":["x","y",null],"type":["string","null"]}},"required":["m"],"type":"object"}`},
	{name: "optional untyped enum", in: `{"type":"object","properties":{"m":{"enum":[1,"y"]}}}`,
		want: `{"additionalProperties":false,"properties":{"m":{"enum":[1,"y",null]}},"required":["m"],"type":"object"}`},
	{name: "already nullable stays", in: `{"type":"object","properties":{"m":{"type":["string","null"]}}}`,
		want: `{"additionalProperties":false,"properties":{"m":{"type":["string","null"]}},"required":["m"],"type":"object"}`},
	{name: "nested objects closed", in: `{"type":"object","properties":{"o":{"type":"object","properties":{"d":{"type":"boolean"}}}},"required":["o"]}`,
		want: `{"additionalProperties":false,"properties":{"o":{"additionalProperties":false,"properties":{"d":{"type":["boolean","null"]}},"required":["d"],"type":"object"}},"required":["o"],"type":"object"}`},
	{name: "empty object", in: `{"type":"object","properties":{}}`,
		want: `{"additionalProperties":false,"properties":{},"required":[],"type":"object"}`},
	{name: "object without properties", in: `{"type":"object"}`,
		want: `{"additionalProperties":false,"properties":{},"required":[],"type":"object"}`},
	{name: "array items", in: `{"type":"object","properties":{"xs":{"type":"array","items":{"type":"object","properties":{"k":{"type":"string"}}},"maxItems":3}},"required":["xs"]}`,
		want: `{"additionalProperties":false,"properties":{"xs":{"items":{"additionalProperties":false,"properties":{"k":{"type":["string","null"]}},"required":["k"],"type":"object"},"maxItems":3,"type":"array"}},"required":["xs"],"type":"object"}`},
	{name: "optional ref wrapped", in: `{"type":"object","$defs":{"P":{"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}},"properties":{"p":{"$ref":"#/$defs/P","description":"a point"}}}`,
		want: `{"$defs":{"P":{"additionalProperties":false,"properties":{"x":{"type":"number"}},"required":["x"],"type":"object"}},"additionalProperties":false,"properties":{"p":{"anyOf":[{"$ref":"#/$defs/P","description":"a point"},{"type":"null"}]}},"required":["p"],"type":"object"}`},
	{name: "anyOf optional", in: `{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`,
		want: `{"additionalProperties":false,"properties":{"v":{"anyOf":[{"type":"string"},{"type":"integer"},{"type":"null"}]}},"required":["v"],"type":"object"}`},
	{name: "oneOf as anyOf", in: `{"type":"object","properties":{"v":{"oneOf":[{"type":"string"},{"type":"integer"}]}},"required":["v"]}`,
		want:  `{"additionalProperties":false,"properties":{"v":{"anyOf":[{"type":"string"},{"type":"integer"}]}},"required":["v"],"type":"object"}`,
		notes: []string{"arguments.v: oneOf given as anyOf"}},
	{name: "narrowing keywords removed", in: `{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},"uniqueItems":true},"o":{"type":"object","properties":{"a":{"type":"string"}},"minProperties":1,"not":{"required":["b"]}}},"required":["tags","o"]}`,
		want:  `{"additionalProperties":false,"properties":{"o":{"additionalProperties":false,"properties":{"a":{"type":["string","null"]}},"required":["a"],"type":"object"},"tags":{"items":{"type":"string"},"type":"array"}},"required":["o","tags"],"type":"object"}`,
		notes: []string{"arguments.o: removed not", "arguments.o: removed minProperties", "arguments.tags: removed uniqueItems"}},
	{name: "null default dropped", in: `{"type":"object","properties":{"a":{"type":"string","default":null}}}`,
		want: `{"additionalProperties":false,"properties":{"a":{"type":["string","null"]}},"required":["a"],"type":"object"}`},
	{name: "draft-07 schema kept", in: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"type":"string","description":"d"}},"required":["a"],"additionalProperties":false}`,
		want: `{"$schema":"http://json-schema.org/draft-07/schema#","additionalProperties":false,"properties":{"a":{"description":"d","type":"string"}},"required":["a"],"type":"object"}`},

	{name: "open object refused", in: `{"type":"object","properties":{"env":{"type":"object","additionalProperties":{"type":"string"}}},"required":["env"]}`,
		wantErr: "arguments.env takes fields beyond its listed properties", openaiRefuses: true},
	{name: "additionalProperties true refused", in: `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true}`,
		wantErr: "arguments takes fields beyond", openaiRefuses: true},
	{name: "allOf refused", in: `{"type":"object","properties":{"a":{"allOf":[{"type":"string"},{"minLength":2}]}},"required":["a"]}`,
		wantErr: "arguments.a combines schemas with allOf", openaiRefuses: true},
	{name: "patternProperties refused", in: `{"type":"object","properties":{},"patternProperties":{"^x":{"type":"string"}}}`,
		wantErr: "patternProperties", openaiRefuses: true},
	{name: "tuple refused", in: `{"type":"object","properties":{"t":{"type":"array","items":[{"type":"string"},{"type":"integer"}]}},"required":["t"]}`,
		wantErr: "arguments.t is a tuple", openaiRefuses: true},
	{name: "prefixItems refused", in: `{"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"string"}}},"required":["t"]}`,
		wantErr: "prefixItems", openaiRefuses: true},
	{name: "array without items refused", in: `{"type":"object","properties":{"xs":{"type":"array"}},"required":["xs"]}`,
		wantErr: "arguments.xs is an array without items", openaiRefuses: true},
	{name: "boolean schema refused", in: `{"type":"object","properties":{"x":true},"required":["x"]}`,
		wantErr: "arguments.x: a boolean schema", openaiRefuses: true},
	{name: "any value refused", in: `{"type":"object","properties":{"v":{"description":"anything"}},"required":["v"]}`,
		wantErr: "arguments.v accepts a value of any type"},
	{name: "root not object", in: `{"type":"array","items":{"type":"string"}}`, wantErr: `the root must have "type": "object"`, openaiRefuses: true},
	{name: "root union", in: `{"type":"object","anyOf":[{"properties":{"a":{"type":"string"}}}]}`, wantErr: "the root may not be a union"},
	{name: "required undeclared", in: `{"type":"object","properties":{},"required":["ghost"]}`, wantErr: `requires "ghost"`, openaiRefuses: true},
	{name: "ref with siblings", in: `{"type":"object","$defs":{"S":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/S","minLength":3}},"required":["a"]}`,
		wantErr: `$ref beside "minLength"`},
	{name: "unknown type refused", in: `{"type":"object","properties":{"x":{"type":"str"}},"required":["x"]}`, wantErr: `arguments.x: type "str" is not one of`},
	{name: "properties on a string refused", in: `{"type":"object","properties":{"x":{"type":"string","properties":{}}},"required":["x"]}`, wantErr: "arguments.x has properties but its type string is not object"},
	{name: "odd key named", in: `{"type":"object","properties":{"my key":{"type":"array"}},"required":["my key"]}`, wantErr: `arguments["my key"] is an array without items`},
}

func TestStrictSchema(t *testing.T) {
	for _, tc := range strictCases {
		t.Run(tc.name, func(t *testing.T) {
			got, notes, err := StrictSchema(json.RawMessage(tc.in))
			if tc.wantErr != "" {
				if !errors.Is(err, ErrNotStrict) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err=%v, want ErrNotStrict saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("StrictSchema=\n%s\nwant\n%s", got, tc.want)
			}
			joined := strings.Join(notes, "\n")
			for _, n := range tc.notes {
				if !strings.Contains(joined, n) {
					t.Errorf("notes %q lack %q", notes, n)
				}
			}
			if len(tc.notes) == 0 && len(notes) > 0 {
				t.Errorf("unexpected notes %q", notes)
			}
			again, _, err := StrictSchema(got)
			if err != nil || string(again) != string(got) {
				t.Fatalf("StrictSchema is not idempotent: %s, %v", again, err)
			}
		})
	}
}

// checkStrict walks a strict schema and fails on anything strict mode
// would refuse: an object not closed or not requiring all its properties,
// an unsupported keyword left in, an array without items.
func checkStrict(t *testing.T, v any, path string) {
	t.Helper()
	s, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: not an object schema: %v", path, v)
	}
	for _, k := range strictRemoved {
		if _, ok := s[k]; ok {
			t.Fatalf("%s: keyword %s left in", path, k)
		}
	}
	for k := range strictRefused {
		if _, ok := s[k]; ok {
			t.Fatalf("%s: keyword %s left in", path, k)
		}
	}
	types := typesOf(s["type"])
	if props, ok := s["properties"].(map[string]any); ok || containsStr(types, "object") {
		if s["additionalProperties"] != false {
			t.Fatalf("%s: object not closed: %v", path, s)
		}
		req, _ := s["required"].([]any)
		if len(req) != len(props) {
			t.Fatalf("%s: required %v does not list every property of %v", path, req, props)
		}
		for k, p := range props {
			checkStrict(t, p, path+"."+k)
		}
	}
	if containsStr(types, "array") {
		if _, ok := s["items"]; !ok {
			t.Fatalf("%s: array without items", path)
		}
	}
	if it, ok := s["items"]; ok {
		checkStrict(t, it, path+"[]")
	}
	if alts, ok := s["anyOf"].([]any); ok {
		for _, a := range alts {
			checkStrict(t, a, path+"|")
		}
	}
}

func containsStr(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// FuzzStrictSchema: StrictSchema never panics; what it returns is strict
// (checkStrict), a fixed point, and every failure matches ErrNotStrict.
func FuzzStrictSchema(f *testing.F) {
	for _, tc := range strictCases {
		f.Add([]byte(tc.in))
	}
	f.Add([]byte(`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"array","items":{"anyOf":[{"type":"null"},{"$ref":"#"}]}}}}}}`))
	f.Add([]byte(`{"type":"object","properties":{"":{"type":"string"},"\u00e9":{"const":1}}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, _, err := StrictSchema(data)
		if err != nil {
			if !errors.Is(err, ErrNotStrict) {
				t.Fatalf("error %v does not match ErrNotStrict", err)
			}
			return
		}
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("output is not JSON: %v", err)
		}
		checkStrict(t, v, "arguments")
		again, _, err := StrictSchema(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not a fixed point: %s -> %s (%v)", out, again, err)
		}
	})
}

// TestStrictSchemasAgainstOpenAI checks, with the openai npm package's own
// toStrictJsonSchema (run by Node 22 from scripts/ensure-mcp-deps), that
// every schema strict=true gives is one strict mode takes as it is: the
// built-in tools, the tools of the real filesystem and everything MCP
// servers, and the cases above; and that the refusals it shares are
// refused there too.
func TestStrictSchemasAgainstOpenAI(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.MCPServers = map[string]config.MCPServer{
		"fs": {Command: []string{testenv.Node22(t), testenv.NodeModule(t, "@modelcontextprotocol/server-filesystem/dist/index.js"), t.TempDir()}},
		"ev": {Command: []string{testenv.Node22(t), testenv.NodeModule(t, "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"}},
	}
	e := newEnv(t, &cfg)
	ts, err := e.node.ToolsFor("default", "")
	if err != nil {
		t.Fatal(err)
	}
	var fromMCP int
	input := struct {
		Strict  map[string]json.RawMessage `json:"strict"`
		Refused map[string]json.RawMessage `json:"refused"`
	}{map[string]json.RawMessage{}, map[string]json.RawMessage{}}
	d, err := Render(ts, config.Guidance{}, FormatOpenAIResponses, WithStrict(true))
	if err != nil {
		t.Fatal(err)
	}
	notStrict := map[string]string{}
	for _, p := range d.NotStrict {
		notStrict[p.Tool] = p.Reason
	}
	for _, rt := range d.Tools.([]responsesTool) {
		if !rt.Strict {
			if notStrict[rt.Name] == "" {
				t.Errorf("%s is strict: false without a reason in not_strict", rt.Name)
			}
			continue
		}
		input.Strict["tool "+rt.Name] = rt.Parameters
		if strings.HasPrefix(rt.Name, "mcp__") {
			fromMCP++
		}
	}
	if fromMCP < 20 {
		t.Fatalf("only %d strict schemas from the MCP servers (not strict: %v)", fromMCP, notStrict)
	}
	for _, tc := range strictCases {
		switch {
		case tc.wantErr == "":
			input.Strict["case "+tc.name] = json.RawMessage(tc.want)
		case tc.openaiRefuses:
			input.Refused["case "+tc.name] = json.RawMessage(tc.in)
		}
	}
	path := filepath.Join(t.TempDir(), "schemas.json")
	b, _ := json.Marshal(input)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs(filepath.Join("testdata", "strict_check.cjs"))
	out, err := exec.Command(testenv.Node22(t), script, filepath.Join(testenv.MCPDeps(t), "node_modules", "openai"), path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("strict_check.cjs: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var res struct {
		OK       []string `json:"ok"`
		Problems []struct {
			Name, Problem, Given, Got string
		} `json:"problems"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("strict_check.cjs output %s: %v", out, err)
	}
	for _, p := range res.Problems {
		t.Errorf("%s: %s\n given %s\n got   %s", p.Name, p.Problem, p.Given, p.Got)
	}
	if len(res.OK) != len(input.Strict)+len(input.Refused) {
		t.Fatalf("toStrictJsonSchema agreed on %d of %d schemas", len(res.OK), len(input.Strict)+len(input.Refused))
	}
	t.Logf("toStrictJsonSchema agrees on %d schemas (%d tools, %d from MCP servers; not strict: %v)", len(res.OK), len(ts), fromMCP, notStrict)
	_ = reflect.DeepEqual
	_ = tool.PartText
}
