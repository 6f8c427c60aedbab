package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/callsheet/callsheet/internal/testenv"
)

// suiteToolSchemas turns every schema of the JSON Schema Test Suite (draft
// 2020-12 and draft-07) into tool input schemas: the case's schema as the
// argument "v" (its $defs and definitions moved to the root, where its
// references find them), and, when it is an object schema itself, the
// case's schema as it is.
func suiteToolSchemas(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	out := map[string]json.RawMessage{}
	for _, draft := range []string{"draft2020-12", "draft7"} {
		for i, c := range testenv.JSONSchemaSuite(t, draft) {
			name := fmt.Sprintf("%s: %s (%d)", c.File, c.Description, i)
			dec := json.NewDecoder(bytes.NewReader(c.Schema))
			dec.UseNumber()
			var s any
			if err := dec.Decode(&s); err != nil {
				t.Fatal(err)
			}
			w := map[string]any{"type": "object", "required": []any{"v"}}
			if m, ok := s.(map[string]any); ok {
				if m["type"] == "object" {
					out[name+" as the root"] = c.Schema
				}
				m2 := map[string]any{}
				for k, v := range m {
					switch k {
					case "$defs", "definitions", "$schema":
						w[k] = v
					default:
						m2[k] = v
					}
				}
				s = m2
			}
			w["properties"] = map[string]any{"v": s}
			b, err := json.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = b
		}
	}
	return out
}

// TestStrictSuiteAgainstOpenAI: over every schema of the JSON Schema Test
// Suite, each one StrictSchema makes strict is one the openai package's own
// toStrictJsonSchema accepts and returns unchanged (strict mode never
// serves a schema OpenAI's helper rejects); the others are refused with
// ErrNotStrict, and GET /v1/tools?strict=true gives them "strict": false.
func TestStrictSuiteAgainstOpenAI(t *testing.T) {
	input := struct {
		Strict map[string]json.RawMessage `json:"strict"`
	}{map[string]json.RawMessage{}}
	all := suiteToolSchemas(t)
	refused := 0
	for name, s := range all {
		out, _, err := StrictSchema(s)
		if err != nil {
			if !errors.Is(err, ErrNotStrict) {
				t.Errorf("%s: %v does not match ErrNotStrict", name, err)
			}
			refused++
			continue
		}
		input.Strict[name] = out
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
	t.Logf("%d tool schemas from the suite: %d made strict, all accepted unchanged by toStrictJsonSchema: %d; %d refused as not strict", len(all), len(input.Strict), len(res.OK), refused)
}
