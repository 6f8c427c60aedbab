package tools

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/tool"
)

// stampSchema names files three ways: a top-level string, an array of
// objects holding one each, and an array of strings.
const stampSchema = `{"type": "object", "properties": {
	"path": {"type": "string"},
	"files": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "size": {"type": "integer"}}}},
	"sources": {"type": "array", "items": {"type": "string"}},
	"count": {"type": "integer"},
	"meta": {"type": "object"},
	"escalate": {"type": "boolean"}
}}`

func stampSpec() CommandSpec {
	return CommandSpec{
		Name: "stamp", Description: "Stamp files.", Guidelines: []string{"Use in tests."},
		InputSchema: json.RawMessage(stampSchema), Command: []string{"cat"},
	}
}

// TestCommandContract: a command tool declares what a Go tool can, and the
// declarations act on a call's arguments.
func TestCommandContract(t *testing.T) {
	spec := stampSpec()
	spec.SelfConcurrency = 3
	spec.Deferred = true
	spec.Escalation = true
	spec.MutatedPaths = []string{"path", "/files/*/name", "/files/0/name"}
	spec.TouchedPaths = []string{"/sources", "/meta/a~1b"}
	tl := mustCommand(t, spec)
	if tl.SelfCap() != 3 || !tl.Deferred || !tl.Escalation {
		t.Fatalf("self cap %d, deferred %v, escalation %v; want 3, true, true", tl.SelfCap(), tl.Deferred, tl.Escalation)
	}
	args := json.RawMessage(`{"path": "a.txt", "files": [{"name": "b/c.txt"}, {"size": 1}, {"name": "../../etc/passwd"}, {"name": "./a.txt"}],
		"sources": ["s1", 5, "s2"], "meta": {"a/b": "m.txt"}}`)
	if got, want := tl.MutatedPaths(args), []string{"a.txt", "b/c.txt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("mutated paths %q, want %q (in declaration order, each once, none outside the workspace)", got, want)
	}
	if got, want := tl.TouchedPaths(args), []string{"s1", "s2", "m.txt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("touched paths %q, want %q", got, want)
	}
	// Arguments sent as a string holding the object name the same files.
	if got := tl.MutatedPaths(json.RawMessage(`"{\"path\": \"a.txt\"}"`)); !reflect.DeepEqual(got, []string{"a.txt"}) {
		t.Errorf("mutated paths of string arguments %q, want [a.txt]", got)
	}
	for _, bad := range []string{`{"path": `, `[1]`, `{"path": 5}`, `{}`} {
		if got := tl.MutatedPaths(json.RawMessage(bad)); len(got) != 0 {
			t.Errorf("mutated paths of %s = %q, want none", bad, got)
		}
	}
	reg, err := tool.NewRegistry(tl)
	if err != nil {
		t.Fatal(err)
	}
	if len(reg.Visible()) != 0 {
		t.Errorf("a deferred command tool is in the visible list")
	}

	// Without declarations: the strictest contract.
	plain := mustCommand(t, stampSpec())
	if plain.SelfCap() != 1 || plain.Deferred || plain.Escalation || plain.MutatedPaths != nil || plain.TouchedPaths != nil {
		t.Errorf("undeclared contract: %+v", plain)
	}
}

// TestCommandContractRefused: the registry's rules hold for command tools,
// and a declaration that cannot work is refused when the tool is built,
// saying which and why.
func TestCommandContractRefused(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*CommandSpec)
		wantErr error
		says    string
	}{
		{"read-only with mutated paths", func(s *CommandSpec) { s.Effect = "read_only"; s.MutatedPaths = []string{"path"} }, tool.ErrInvalidTool, "read_only_mutated_paths"},
		{"read-only with escalation", func(s *CommandSpec) { s.Effect = "read_only"; s.Escalation = true }, tool.ErrInvalidTool, "read_only_escalation"},
		{"negative self-concurrency", func(s *CommandSpec) { s.SelfConcurrency = -2 }, ErrInvalidCommand, "self_concurrency -2 is negative"},
		{"unknown argument", func(s *CommandSpec) { s.MutatedPaths = []string{"pth"} }, ErrInvalidCommand, `mutated_paths[0] "pth": the input schema has no property "pth" at the arguments object (properties: count, escalate, files, meta, path, sources)`},
		{"unknown nested", func(s *CommandSpec) { s.TouchedPaths = []string{"path", "/files/*/nme"} }, ErrInvalidCommand, `touched_paths[1] "/files/*/nme": the input schema has no property "nme" at /files/*`},
		{"a number", func(s *CommandSpec) { s.MutatedPaths = []string{"count"} }, ErrInvalidCommand, `"count": /count is an integer; a path declaration needs a string or an array of strings`},
		{"array of objects", func(s *CommandSpec) { s.MutatedPaths = []string{"files"} }, ErrInvalidCommand, "files is an array of object"},
		{"into a string", func(s *CommandSpec) { s.MutatedPaths = []string{"/path/x"} }, ErrInvalidCommand, `/path is a string, so it has no "x" inside`},
		{"array by name", func(s *CommandSpec) { s.MutatedPaths = []string{"/files/name"} }, ErrInvalidCommand, `/files is an array: step into it with an index or *, not "name"`},
		{"bad escape", func(s *CommandSpec) { s.MutatedPaths = []string{"/a~2b"} }, ErrInvalidCommand, "'~' not followed by 0 or 1"},
		{"slash in a name", func(s *CommandSpec) { s.MutatedPaths = []string{"files/0/name"} }, ErrInvalidCommand, `write "/files/0/name"`},
		{"empty", func(s *CommandSpec) { s.TouchedPaths = []string{""} }, ErrInvalidCommand, "touched_paths[0] is empty"},
		{"escalation without escalate", func(s *CommandSpec) {
			s.Escalation = true
			s.InputSchema = json.RawMessage(`{"type": "object", "properties": {"path": {"type": "string"}}}`)
		}, ErrInvalidCommand, `no "escalate" property`},
		{"escalate not a boolean", func(s *CommandSpec) {
			s.Escalation = true
			s.InputSchema = json.RawMessage(`{"type": "object", "properties": {"escalate": {"type": "string"}}}`)
		}, ErrInvalidCommand, `"escalate" is a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := stampSpec()
			tt.edit(&spec)
			tl, err := Command(spec)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Command: tool=%v err=%v, want %v saying %q", tl, err, tt.wantErr, tt.says)
			}
		})
	}
	// Where the schema does not say, the declaration stands as written.
	for _, schema := range []string{
		`{"type": "object"}`,
		`{"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": true}`,
		`{"type": "object", "properties": {"spec": {"$ref": "#/$defs/s"}}, "$defs": {"s": {"type": "object"}}}`,
	} {
		spec := stampSpec()
		spec.InputSchema = json.RawMessage(schema)
		spec.MutatedPaths = []string{"/spec/target"}
		if _, err := Command(spec); err != nil {
			t.Errorf("schema %s: %v, want the declarations accepted", schema, err)
		}
	}
	// An open schema can carry escalate.
	spec := stampSpec()
	spec.InputSchema = json.RawMessage(`{"type": "object"}`)
	spec.Escalation = true
	if _, err := Command(spec); err != nil {
		t.Errorf("escalation over an open schema: %v, want it accepted", err)
	}
}

func FuzzParseArgPath(f *testing.F) {
	for _, s := range []string{"path", "/files/0/path", "/a~1b/~0c", "/", "//", "/*", "a/b", "~", "/~2", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, decl string) {
		steps, err := parseArgPath(decl)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if len(steps) == 0 {
			t.Fatalf("%q parsed to no steps", decl)
		}
		// A pointer re-escaped from its steps is the declaration again.
		if strings.HasPrefix(decl, "/") {
			var b strings.Builder
			for _, s := range steps {
				b.WriteString("/" + strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1"))
			}
			if b.String() != decl {
				t.Fatalf("%q parsed to %q, which writes back as %q", decl, steps, b.String())
			}
		} else if len(steps) != 1 || steps[0] != decl {
			t.Fatalf("argument name %q parsed to %q", decl, steps)
		}
	})
}
