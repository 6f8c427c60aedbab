package tool

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type readArgs struct {
	Path   string   `json:"path" jsonschema:"file to read, relative to the workspace"`
	Offset int      `json:"offset,omitempty" jsonschema:"first line, from 0" minimum:"0"`
	Limit  int      `json:"limit" jsonschema:"lines to read" default:"100" minimum:"1" maximum:"2000"`
	Mode   string   `json:"mode" enum:"text, binary" default:"text"`
	Tags   []string `json:"tags,omitempty" enum:"a,b"`
	Level  int8     `json:"level,omitempty" enum:"1,2,3"`
	Window *window  `json:"window,omitempty"`
}

type window struct {
	Width  float64 `json:"width" default:"1.5"`
	Height int     `json:"height"`
}

// newReadTool returns a typed tool that records the arguments it was called
// with and counts its calls.
func newReadTool(t *testing.T, opts ...Option) (*Tool, *atomic.Int64, *atomic.Pointer[readArgs]) {
	t.Helper()
	var calls atomic.Int64
	var last atomic.Pointer[readArgs]
	opts = append([]Option{WithGuidelines("Use to read a file before editing it.")}, opts...)
	tl, err := New("read", "Read a file.", func(ctx context.Context, a readArgs) (Result, error) {
		calls.Add(1)
		last.Store(&a)
		return Text("ok " + a.Path), nil
	}, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tl, &calls, &last
}

func TestNewSchema(t *testing.T) {
	tl, _, _ := newReadTool(t)
	var s map[string]any
	if err := json.Unmarshal(tl.InputSchema, &s); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	props := s["properties"].(map[string]any)
	prop := func(name string) map[string]any { return props[name].(map[string]any) }

	if got := s["type"]; got != "object" {
		t.Errorf("type=%v, want object", got)
	}
	if got := s["additionalProperties"]; got != false {
		t.Errorf("additionalProperties=%v, want false", got)
	}
	// limit and mode have defaults, so only path is required.
	if got, want := s["required"], []any{"path"}; !reflect.DeepEqual(got, want) {
		t.Errorf("required=%v, want %v", got, want)
	}
	if got := prop("path")["description"]; got != "file to read, relative to the workspace" {
		t.Errorf("path description=%v", got)
	}
	if got := prop("limit")["default"]; got != float64(100) {
		t.Errorf("limit default=%v, want 100", got)
	}
	if got, want := []any{prop("limit")["minimum"], prop("limit")["maximum"]}, []any{float64(1), float64(2000)}; !reflect.DeepEqual(got, want) {
		t.Errorf("limit bounds=%v, want %v", got, want)
	}
	if got, want := prop("mode")["enum"], []any{"text", "binary"}; !reflect.DeepEqual(got, want) {
		t.Errorf("mode enum=%v, want %v", got, want)
	}
	if got := prop("mode")["default"]; got != "text" {
		t.Errorf("mode default=%v, want text", got)
	}
	items := prop("tags")["items"].(map[string]any)
	if got, want := items["enum"], []any{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tags items enum=%v, want %v", got, want)
	}
	if got, want := prop("level")["enum"], []any{float64(1), float64(2), float64(3)}; !reflect.DeepEqual(got, want) {
		t.Errorf("level enum=%v, want %v", got, want)
	}
	win := prop("window")
	if got := win["properties"].(map[string]any)["width"].(map[string]any)["default"]; got != 1.5 {
		t.Errorf("window.width default=%v, want 1.5", got)
	}
	if got, want := win["required"], []any{"height"}; !reflect.DeepEqual(got, want) {
		t.Errorf("window required=%v, want %v", got, want)
	}
	// Properties keep the struct's field order.
	if i, j := strings.Index(string(tl.InputSchema), `"path"`), strings.Index(string(tl.InputSchema), `"window"`); i > j {
		t.Errorf("properties out of field order: %s", tl.InputSchema)
	}
}

func TestNewRun(t *testing.T) {
	tl, calls, last := newReadTool(t)
	ctx := context.Background()

	tests := []struct {
		name    string
		args    string
		want    readArgs
		wantErr string // substring; "" means success
	}{
		{name: "defaults applied", args: `{"path":"a.go"}`,
			want: readArgs{Path: "a.go", Limit: 100, Mode: "text"}},
		{name: "given values win", args: `{"path":"a.go","limit":5,"mode":"binary","offset":3}`,
			want: readArgs{Path: "a.go", Limit: 5, Mode: "binary", Offset: 3}},
		{name: "string-wrapped", args: `"{\"path\":\"b\",\"tags\":[\"a\"]}"`,
			want: readArgs{Path: "b", Limit: 100, Mode: "text", Tags: []string{"a"}}},
		{name: "nested defaults", args: `{"path":"a","window":{"height":2}}`,
			want: readArgs{Path: "a", Limit: 100, Mode: "text", Window: &window{Width: 1.5, Height: 2}}},
		{name: "unknown field", args: `{"path":"a","colour":1}`, wantErr: "arguments.colour: unknown field (allowed: path, offset, limit, mode, tags, level, window)"},
		{name: "missing required", args: `{}`, wantErr: "arguments.path: missing required field"},
		{name: "string for integer", args: `{"path":"a","limit":"10"}`, wantErr: `arguments.limit: want integer, got string "10"`},
		{name: "float for integer", args: `{"path":"a","limit":2.5}`, wantErr: "arguments.limit: want integer, got number 2.5"},
		{name: "enum", args: `{"path":"a","mode":"hex"}`, wantErr: `arguments.mode: want one of "text", "binary", got string "hex"`},
		{name: "integer enum", args: `{"path":"a","level":4}`, wantErr: "arguments.level: want one of 1, 2, 3, got integer 4"},
		{name: "slice enum", args: `{"path":"a","tags":["a","c"]}`, wantErr: `arguments.tags[1]: want one of "a", "b", got string "c"`},
		{name: "bounds", args: `{"path":"a","limit":0}`, wantErr: "arguments.limit: want at least 1, got 0"},
		{name: "nested missing", args: `{"path":"a","window":{}}`, wantErr: "arguments.window.height: missing required field"},
		{name: "truncated", args: `"{\"path\":\"a`, wantErr: "probably truncated"},
		{name: "integer too large for int", args: `{"path":"a","offset":99999999999999999999}`, wantErr: "arguments.offset: want a value that fits int, got number 99999999999999999999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := calls.Load()
			verr := tl.Validate(json.RawMessage(tt.args))
			res, err := tl.Run(ctx, json.RawMessage(tt.args))
			if tt.wantErr != "" {
				for _, e := range []error{verr, err} {
					if !errors.Is(e, ErrInvalidArguments) || !strings.Contains(e.Error(), tt.wantErr) {
						t.Fatalf("err=%v, want ErrInvalidArguments containing %q", e, tt.wantErr)
					}
				}
				if n := calls.Load() - before; n != 0 {
					t.Fatalf("fn called %d times with invalid arguments, want 0", n)
				}
				return
			}
			if verr != nil || err != nil {
				t.Fatalf("Validate=%v Run=%v, want nil", verr, err)
			}
			if n := calls.Load() - before; n != 1 {
				t.Fatalf("fn called %d times, want 1", n)
			}
			if got := *last.Load(); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("args=%+v, want %+v", got, tt.want)
			}
			if got := res.Parts[0].Text; got != "ok "+tt.want.Path {
				t.Fatalf("result=%q", got)
			}
		})
	}
	// Validate and Run leave the caller's arguments as sent: defaults go
	// only into the copy fn sees.
	args := json.RawMessage(`{"path":"a"}`)
	if err := tl.Validate(args); err != nil {
		t.Fatal(err)
	}
	if _, err := tl.Run(ctx, args); err != nil || string(args) != `{"path":"a"}` {
		t.Fatalf("Run err=%v, args now %s", err, args)
	}
}

func TestNewOptions(t *testing.T) {
	sc := func() int { return 4 }
	tl, _, _ := newReadTool(t,
		WithShortDescription("Read."),
		WithGuidelines("Prefer it to cat."),
		WithSnippet(`read({"path":"go.mod"})`),
		WithDeclarations(Declarations{Effect: EffectReadOnly}),
		WithReplay(ReplaySafe),
		WithConcurrency(ConcurrencyParallelSafe),
		WithLabels(LabelExternal),
		WithSelfConcurrency(sc),
		WithTimeout(5*time.Second),
		WithDeferred(),
		WithTouchedPaths(func(a readArgs) []string { return []string{a.Path} }),
	)
	if tl.Short() != "Read." || tl.Snippet == "" || len(tl.Guidelines) != 2 {
		t.Errorf("short=%q snippet=%q guidelines=%q", tl.Short(), tl.Snippet, tl.Guidelines)
	}
	if want := (Declarations{Effect: EffectReadOnly, Replay: ReplaySafe, Concurrency: ConcurrencyParallelSafe}); tl.Declarations != want {
		t.Errorf("declarations=%+v, want %+v", tl.Declarations, want)
	}
	if !slices.Equal(tl.Labels, []Label{LabelExternal}) || tl.SelfCap() != 4 || tl.EffectiveTimeout() != 5*time.Second || !tl.Deferred {
		t.Errorf("labels=%v selfcap=%d timeout=%v deferred=%v", tl.Labels, tl.SelfCap(), tl.EffectiveTimeout(), tl.Deferred)
	}
	if got := tl.TouchedPaths(json.RawMessage(`{"path":"x.go"}`)); !slices.Equal(got, []string{"x.go"}) {
		t.Errorf("TouchedPaths=%v, want [x.go]", got)
	}

	// Without declarations a typed tool is strictest.
	plain, _, _ := newReadTool(t)
	if plain.Declarations != Strictest {
		t.Errorf("declarations=%+v, want Strictest", plain.Declarations)
	}
}

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

type bgArgs struct {
	Action string `json:"action" enum:"list,output,wait,cancel"`
	Job    string `json:"job,omitempty"`
}

func TestTypedWrappersMalformedArgs(t *testing.T) {
	write, err := New("write", "Write a file.", func(ctx context.Context, a writeArgs) (Result, error) { return Text("ok"), nil },
		WithGuidelines("Use to create a file."),
		WithMutatedPaths(func(a writeArgs) []string { return []string{a.Path} }),
		WithTouchedPaths(func(a writeArgs) []string { return []string{a.Path} }),
	)
	if err != nil {
		t.Fatal(err)
	}
	bg, err := New("bg", "Background jobs.", func(ctx context.Context, a bgArgs) (Result, error) { return Text("ok"), nil },
		WithGuidelines("Use to inspect background commands."),
		WithClassify(func(a bgArgs) Declarations {
			if a.Action == "cancel" {
				return Declarations{Effect: EffectSideEffecting}
			}
			return Declarations{Effect: EffectReadOnly, Replay: ReplaySafe, Concurrency: ConcurrencyParallelSafe}
		}),
	)
	if err != nil {
		t.Fatal(err)
	}

	if got := write.MutatedPaths(json.RawMessage(`{"path":"a.go","content":"x"}`)); !slices.Equal(got, []string{"a.go"}) {
		t.Errorf("MutatedPaths=%v, want [a.go]", got)
	}
	if got := bg.DeclarationsFor(json.RawMessage(`{"action":"list"}`)); got.Effect != EffectReadOnly || got.Replay != ReplaySafe {
		t.Errorf("list declarations=%+v, want read_only/safe", got)
	}
	if got := bg.DeclarationsFor(json.RawMessage(`{"action":"cancel","job":"j1"}`)); got != Strictest {
		t.Errorf("cancel declarations=%+v, want Strictest", got)
	}

	for _, malformed := range []string{
		`{"path":`, `[1]`, `{"path":5,"content":"x"}`, `{"content":"x"}`, `{"path":"a","content":"x","extra":1}`, `"{\"path\":`,
	} {
		if got := write.MutatedPaths(json.RawMessage(malformed)); got != nil {
			t.Errorf("MutatedPaths(%s)=%v, want nil", malformed, got)
		}
		if got := write.TouchedPaths(json.RawMessage(malformed)); got != nil {
			t.Errorf("TouchedPaths(%s)=%v, want nil", malformed, got)
		}
	}
	for _, malformed := range []string{`{"action":"drop"}`, `{}`, `{"action":1}`, `nope`} {
		if got := bg.DeclarationsFor(json.RawMessage(malformed)); got != Strictest {
			t.Errorf("DeclarationsFor(%s)=%+v, want Strictest", malformed, got)
		}
	}
}

func TestNewRefused(t *testing.T) {
	ok := func(ctx context.Context, a writeArgs) (Result, error) { return Result{}, nil }
	g := WithGuidelines("Use it.")
	tests := []struct {
		name     string
		build    func() (*Tool, error)
		wantRule string // a RegistrationError's rule; "" means ErrInvalidOption
	}{
		{"nil fn", func() (*Tool, error) { return New[writeArgs]("w", "d", nil, g) }, RuleRun},
		{"bad name", func() (*Tool, error) { return New("w x", "d", ok, g) }, RuleName},
		{"no guideline", func() (*Tool, error) { return New("w", "d", ok) }, RuleGuidelines},
		{"read-only mutates", func() (*Tool, error) {
			return New("w", "d", ok, g, WithEffect(EffectReadOnly), WithMutatedPaths(func(a writeArgs) []string { return nil }))
		}, RuleReadOnlyMutatedPaths},
		{"unsupported type", func() (*Tool, error) {
			return New("w", "d", func(ctx context.Context, a struct{ C chan int }) (Result, error) { return Result{}, nil }, g)
		}, RuleInputSchema},
		{"non-struct arguments", func() (*Tool, error) {
			return New("w", "d", func(ctx context.Context, a string) (Result, error) { return Result{}, nil }, g)
		}, RuleInputSchema},
		{"bad enum tag", func() (*Tool, error) {
			return New("w", "d", func(ctx context.Context, a struct {
				N int `json:"n" enum:"1,x"`
			}) (Result, error) {
				return Result{}, nil
			}, g)
		}, RuleInputSchema},
		{"bad default tag", func() (*Tool, error) {
			return New("w", "d", func(ctx context.Context, a struct {
				N int `json:"n" default:"1.5"`
			}) (Result, error) {
				return Result{}, nil
			}, g)
		}, RuleInputSchema},
		{"default outside enum", func() (*Tool, error) {
			return New("w", "d", func(ctx context.Context, a struct {
				M string `json:"m" enum:"a,b" default:"c"`
			}) (Result, error) {
				return Result{}, nil
			}, g)
		}, RuleInputSchema},
		{"bounds on a string", func() (*Tool, error) {
			return New("w", "d", func(ctx context.Context, a struct {
				S string `json:"s" minimum:"1"`
			}) (Result, error) {
				return Result{}, nil
			}, g)
		}, RuleInputSchema},
		{"typed option of another type", func() (*Tool, error) {
			return New("w", "d", ok, g, WithMutatedPaths(func(a bgArgs) []string { return nil }))
		}, ""},
		{"nil classify", func() (*Tool, error) { return New("w", "d", ok, g, WithClassify[writeArgs](nil)) }, ""},
		{"nil self concurrency", func() (*Tool, error) { return New("w", "d", ok, g, WithSelfConcurrency(nil)) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, err := tt.build()
			if tl != nil {
				t.Fatalf("tool=%v, want nil", tl.Name)
			}
			if tt.wantRule == "" {
				if !errors.Is(err, ErrInvalidOption) {
					t.Fatalf("err=%v, want ErrInvalidOption", err)
				}
				return
			}
			var re *RegistrationError
			if !errors.As(err, &re) || re.Rule != tt.wantRule || !errors.Is(err, ErrInvalidTool) {
				t.Fatalf("err=%v, want a RegistrationError for rule %s", err, tt.wantRule)
			}
		})
	}
}

type echoArgs struct {
	S string `json:"s"`
}

func TestFunc(t *testing.T) {
	ctx := context.Background()
	args := json.RawMessage(`{"s":"hi"}`)
	g := WithGuidelines("Use it.")
	tests := []struct {
		name string
		tool func() (*Tool, error)
		want []Part
	}{
		{"string", func() (*Tool, error) {
			return Func("f", "d", func(ctx context.Context, a echoArgs) (string, error) { return a.S, nil }, g)
		}, []Part{{Type: PartText, Text: "hi"}}},
		{"result", func() (*Tool, error) {
			return Func("f", "d", func(ctx context.Context, a echoArgs) (Result, error) { return Text(a.S + "!"), nil }, g)
		}, []Part{{Type: PartText, Text: "hi!"}}},
		{"parts", func() (*Tool, error) {
			return Func("f", "d", func(ctx context.Context, a echoArgs) ([]Part, error) {
				return []Part{{Type: PartText, Text: "a"}, {Type: PartImage, MIME: "image/png", Data: []byte{1}}}, nil
			}, g)
		}, []Part{{Type: PartText, Text: "a"}, {Type: PartImage, MIME: "image/png", Data: []byte{1}}}},
		{"struct", func() (*Tool, error) {
			return Func("f", "d", func(ctx context.Context, a echoArgs) (map[string]int, error) {
				return map[string]int{"n": len(a.S)}, nil
			}, g)
		}, []Part{{Type: PartJSON, JSON: json.RawMessage(`{"n":2}`)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, err := tt.tool()
			if err != nil {
				t.Fatal(err)
			}
			res, err := tl.Run(ctx, args)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Parts, tt.want) {
				t.Fatalf("parts=%+v, want %+v", res.Parts, tt.want)
			}
		})
	}

	boom := errors.New("boom")
	tl, err := Func("f", "d", func(ctx context.Context, a echoArgs) (string, error) { return "", boom }, g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tl.Run(ctx, args); !errors.Is(err, boom) {
		t.Fatalf("err=%v, want the function's error", err)
	}
	if _, err := Func[echoArgs, string]("f", "d", nil, g); !errors.Is(err, ErrInvalidTool) {
		t.Fatalf("nil fn: err=%v, want ErrInvalidTool", err)
	}
}

// fuzzArgs covers the kinds a typed tool meets: strings, sized and unsigned
// integers, floats, booleans, enums, defaults, slices, maps, nested and
// pointer structs.
type fuzzArgs struct {
	Name   string            `json:"name"`
	Count  int               `json:"count,omitempty" minimum:"0" maximum:"1000"`
	Small  int8              `json:"small,omitempty"`
	Big    uint64            `json:"big,omitempty"`
	Ratio  float64           `json:"ratio,omitempty"`
	Float  float32           `json:"float,omitempty"`
	On     bool              `json:"on,omitempty"`
	Mode   string            `json:"mode" enum:"a,b" default:"a"`
	Items  []int16           `json:"items,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	Inner  *window           `json:"inner,omitempty"`
	Any    any               `json:"any,omitempty"`
	Fixed  [2]bool           `json:"fixed,omitzero"`
	Levels []uint8           `json:"levels,omitempty" enum:"1,2"`
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"name":"x"}`, `{"name":"x","count":5,"mode":"b","items":[1,-2],"env":{"a":"b"},"inner":{"height":1}}`,
		`{"name":"x","small":127,"big":18446744073709551615,"ratio":1e308,"float":3.5e38}`,
		`{"name":"x","small":128}`, `{"name":"x","float":1e39}`, `{"name":"x","fixed":[true,false]}`,
		`{"name":"x","fixed":[true]}`, `{"name":"x","any":{"k":[1,"2",null]}}`, `"{\"name\":\"y\"}"`,
		`{"name":"x","items":null,"inner":null}`, `{"name":"x","levels":[1,2,3]}`, `{"count":"1"}`, `{`,
		`{"name":"x","count":2.0,"small":-1.28e2,"big":1.8446744073709551615e19,"items":[1e1,2.50e1],"levels":[2.0]}`,
		`{"name":"x","count":2.5}`, `{"name":"x","big":1e20}`, `{"name":"x","count":1e-99999999999}`,
	} {
		f.Add([]byte(s))
	}
	var calls atomic.Int64
	tl, err := New("fuzz", "Fuzz target.", func(ctx context.Context, a fuzzArgs) (Result, error) {
		calls.Add(1)
		if a.Mode != "a" && a.Mode != "b" {
			return Result{}, errors.New("mode escaped the enum")
		}
		return Result{}, nil
	}, WithGuidelines("Never."))
	if err != nil {
		f.Fatal(err)
	}
	schemaOnly, err := CompileSchema(tl.InputSchema)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := tl.Validate(raw)
		if err != nil {
			var ae *ArgumentError
			if !errors.As(err, &ae) || len(ae.Problems) == 0 {
				t.Fatalf("Validate: err=%v (%T), want an *ArgumentError with problems", err, err)
			}
			before := calls.Load()
			if _, rerr := tl.Run(context.Background(), raw); rerr == nil || calls.Load() != before {
				t.Fatalf("Run accepted arguments Validate refused (%v)", err)
			}
			return
		}
		// Valid arguments decode into the struct and reach fn.
		if serr := schemaOnly(raw); serr != nil {
			t.Fatalf("typed Validate passed, schema validator refused: %v", serr)
		}
		norm, nerr := NormalizeArguments(raw)
		if nerr != nil {
			t.Fatalf("Validate passed, NormalizeArguments failed: %v", nerr)
		}
		// They decode once integers written with a fraction or exponent
		// (2.0, 1e2: integers to JSON Schema) are written plainly, as the
		// typed decoder does.
		_, obj, _ := parseArguments(norm)
		plain, merr := json.Marshal(integerForms(obj))
		if merr != nil {
			t.Fatalf("re-encoding %s: %v", norm, merr)
		}
		var a fuzzArgs
		if derr := decodeStrict(plain, &a); derr != nil {
			t.Fatalf("valid arguments %s do not decode: %v", norm, derr)
		}
		before := calls.Load()
		if _, rerr := tl.Run(context.Background(), raw); rerr != nil || calls.Load() != before+1 {
			t.Fatalf("Run of valid arguments: err=%v, calls=%d", rerr, calls.Load()-before)
		}
	})
}
