package tool

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// benchNoArgs is the bench's no-op tool's argument type (bench/env.go).
type benchNoArgs struct {
	Tag string `json:"tag,omitempty" jsonschema:"an optional label"`
}

// benchEditArgs is a realistic five-field tool: strings, an integer with
// bounds and a default, an enum with a default, a boolean.
type benchEditArgs struct {
	Path    string `json:"path" jsonschema:"file to edit, relative to the workspace"`
	Old     string `json:"old" jsonschema:"text to replace"`
	New     string `json:"new" jsonschema:"replacement text"`
	Count   int    `json:"count,omitempty" jsonschema:"replacements to make" default:"1" minimum:"1" maximum:"100"`
	Mode    string `json:"mode,omitempty" enum:"exact,regexp" default:"exact"`
	Preview bool   `json:"preview,omitempty"`
}

const benchEditCall = `{"path": "src/main%d.go", "old": "fmt.Println(\"hello\")", "new": "log.Print(\"hello\")", "count": 2, "mode": "exact"}`

// benchCases are the arguments the benchmarks send: %d is replaced by the
// iteration's number, so that each call's arguments are new, as a model's
// are (the same bytes again would find them validated already); {} cannot
// vary, and is what bench/ sends.
var benchCases = []struct{ name, tool, raw string }{
	{"noop/empty", "noop", `{}`},
	{"noop/tag", "noop", `{"tag": "x%d"}`},
	{"edit/5fields", "edit", benchEditCall},
}

// benchArgs returns the arguments of iteration i.
func benchArgs(raw string, i int) json.RawMessage {
	return json.RawMessage(strings.Replace(raw, "%d", strconv.Itoa(i), 1))
}

func benchTools(b *testing.B) (noop, edit *Tool) {
	b.Helper()
	noop, err := New("noop", "does nothing", func(context.Context, benchNoArgs) (Result, error) {
		return Text("ok"), nil
	}, WithGuidelines("benchmark only"))
	if err != nil {
		b.Fatal(err)
	}
	edit, err = New("edit", "edits a file", func(context.Context, benchEditArgs) (Result, error) {
		return Text("ok"), nil
	}, WithGuidelines("benchmark only"))
	if err != nil {
		b.Fatal(err)
	}
	return noop, edit
}

// BenchmarkArguments is the planning side of one call: Tool.Arguments
// (normalize, prune, validate) on arguments as a model sends them.
func BenchmarkArguments(b *testing.B) {
	noop, edit := benchTools(b)
	tools := map[string]*Tool{"noop": noop, "edit": edit}
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			t := tools[bc.tool]
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if _, err := t.Arguments(benchArgs(bc.raw, i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCall is one call as the node makes it: Arguments when the call
// is planned, then Run with the arguments planning returned.
func BenchmarkCall(b *testing.B) {
	noop, edit := benchTools(b)
	tools := map[string]*Tool{"noop": noop, "edit": edit}
	ctx := context.Background()
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			t := tools[bc.tool]
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				args, err := t.Arguments(benchArgs(bc.raw, i))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := t.Run(ctx, args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHostileSchemas measures what the worst schemas cost now: one
// call's validation (steps/op is the validator's step counter) or one
// registration. docs/performance.md has the figures before and after.
func BenchmarkHostileSchemas(b *testing.B) {
	validate := func(b *testing.B, schema, args string) {
		v, err := compileSchema(json.RawMessage(schema))
		if err != nil {
			b.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(args), &obj); err != nil {
			b.Fatal(err)
		}
		var steps int64
		for b.Loop() {
			steps = v.s.Validate(obj, "arguments").Steps
		}
		b.ReportMetric(float64(steps), "steps/op")
	}
	for _, n := range []int{24, 64} {
		b.Run("allOf-ref-"+strconv.Itoa(n), func(b *testing.B) { validate(b, allOfRefs(n, "$ref"), `{"x": 1}`) })
	}
	b.Run("allOf-dynamicRef-64", func(b *testing.B) { validate(b, allOfRefs(64, "$dynamicRef"), `{"x": 1}`) })
	b.Run("items-4000-registration", func(b *testing.B) {
		deep := json.RawMessage(`{"type": "object", "properties": {"x": ` + strings.Repeat(`{"items": `, 4000) + `{}` + strings.Repeat(`}`, 4000) + `}}`)
		for b.Loop() {
			if _, err := compileSchema(deep); err == nil {
				b.Fatal("accepted")
			}
		}
	})
	b.Run("cycle-registration", func(b *testing.B) {
		cycle := json.RawMessage(`{"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}}`)
		for b.Loop() {
			if _, err := compileSchema(cycle); err == nil {
				b.Fatal("accepted")
			}
		}
	})
}
